package agent

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent/ownership"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// lockLoop takes the locks of the partitions assigned here, as soon as
// their previous owner lets go (or its lock-delay ends). openLoop opens
// them; a partition is owned, and no one else's, from the moment its lock
// is held.
func (a *Agent) lockLoop(ctx context.Context) {
	const retry = 250 * time.Millisecond
	waiting := make(map[int]bool) // logged as held by another agent
	t := time.NewTicker(retry)
	defer t.Stop()
	for ctx.Err() == nil {
		a.releaseUnwanted()
		pending := a.toOpen()
		for _, p := range pending {
			_, err := a.acquire(ctx, p)
			switch {
			case err == nil:
				delete(waiting, p)
				a.wakeOpenLoop()
			case errors.Is(err, ownership.ErrHeld):
				if !waiting[p] {
					waiting[p] = true
					a.log.Info("partition assigned here is still locked by its previous owner; waiting", "partition", p)
				}
			case errors.Is(err, errRunning):
			case errors.Is(err, ownership.ErrNoSession):
				// Our session lapsed; the locker is replacing it.
			default:
				a.log.Warn("acquire partition lock", "partition", p, "error", err)
			}
		}
		for p := range waiting {
			if !slices.Contains(pending, p) {
				delete(waiting, p)
			}
		}
		select {
		case <-a.wakeLock:
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// openLoop opens the partitions whose lock is held here, one at a time,
// retrying every retry while their streams are unavailable.
func (a *Agent) openLoop(ctx context.Context) {
	const retry = 250 * time.Millisecond
	lastLog := make(map[int]time.Time) // one warning per partition every 5s
	for ctx.Err() == nil {
		for _, p := range a.locked() {
			if ctx.Err() != nil {
				return
			}
			if err := a.open(ctx, p); err != nil && time.Since(lastLog[p]) > 5*time.Second {
				lastLog[p] = time.Now()
				a.log.Warn("open partition; retrying while holding its lock", "partition", p, "error", err)
			}
		}
		if len(a.toOpen()) == 0 && a.partitionCount.Load() > 0 {
			a.ready.Store(true)
		}
		var again <-chan time.Time
		if len(a.locked()) > 0 {
			again = time.After(retry)
		}
		select {
		case <-a.wakeOpen:
		case <-again:
		case <-ctx.Done():
		}
	}
}

// locked lists the partitions whose lock is held but which do not run yet.
func (a *Agent) locked() []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]int, 0, len(a.opening))
	for p := range a.opening {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// wakeOwnLoop asks both loops to look at the assignment again.
func (a *Agent) wakeOwnLoop() {
	select {
	case a.wakeLock <- struct{}{}:
	default:
	}
	a.wakeOpenLoop()
}

func (a *Agent) wakeOpenLoop() {
	select {
	case a.wakeOpen <- struct{}{}:
	default:
	}
}

func (a *Agent) signalOwned() {
	select {
	case a.ownedChanged <- struct{}{}:
	default:
	}
}

// ownedPartitions lists the partitions whose lock this agent holds (running
// or still opening).
func (a *Agent) ownedPartitions() []uint32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]uint32, 0, len(a.owned)+len(a.opening))
	for p := range a.owned {
		out = append(out, uint32(p))
	}
	for p := range a.opening {
		out = append(out, uint32(p))
	}
	slices.Sort(out)
	return out
}

// reportOwned tells the control plane which partitions this agent holds:
// on every change, and every few seconds (a restarted control plane
// learns it again).
func (a *Agent) reportOwned(ctx context.Context) {
	httpClient := &http.Client{Timeout: 5 * time.Second}
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-a.ownedChanged:
		case <-t.C:
		case <-ctx.Done():
			return
		}
		client := rivorav1connect.NewAgentServiceClient(httpClient, a.controlPlaneURL())
		_, err := client.ReportOwned(ctx, connect.NewRequest(&rivorav1.ReportOwnedRequest{
			AgentName: a.cfg.Name, Session: a.locker.Session(), Partitions: a.ownedPartitions(),
		}))
		if err != nil && ctx.Err() == nil {
			a.log.Debug("report owned partitions", "error", err)
		}
	}
}
