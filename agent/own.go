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

// ownLoop acquires and opens the partitions the control plane assigns
// here, one at a time. A partition whose lock another agent still holds
// (or whose lock-delay runs) is tried again every retryOwn.
func (a *Agent) ownLoop(ctx context.Context) {
	const retryOwn = 500 * time.Millisecond
	held := make(map[int]time.Time) // partition → when we first found it held
	for ctx.Err() == nil {
		a.releaseUnwanted()
		// Locks first, all of them, then the (slower) opens: a partition
		// is owned, and no one else's, from the moment its lock is held.
		for _, p := range a.toOpen() {
			if _, err := a.acquire(ctx, p); err != nil && !errors.Is(err, ownership.ErrHeld) {
				a.log.Warn("acquire partition lock", "partition", p, "error", err)
			}
		}
		for _, p := range a.toOpen() {
			if ctx.Err() != nil {
				return
			}
			err := a.own(ctx, p)
			switch {
			case err == nil:
				delete(held, p)
			case errors.Is(err, ownership.ErrHeld):
				if _, ok := held[p]; !ok {
					held[p] = time.Now()
					a.log.Info("partition assigned here is still locked by its previous owner; waiting", "partition", p)
				}
			default:
				a.log.Error("open partition; retrying", "partition", p, "error", err)
			}
		}
		pending := a.toOpen()
		if len(pending) == 0 && a.partitionCount.Load() > 0 {
			a.ready.Store(true)
		}
		for p := range held {
			if !slices.Contains(pending, p) {
				delete(held, p)
			}
		}
		var retry <-chan time.Time
		if len(pending) > 0 {
			retry = time.After(retryOwn)
		}
		select {
		case <-a.wake:
		case <-retry:
		case <-ctx.Done():
			return
		}
	}
}

func (a *Agent) wakeOwnLoop() {
	select {
	case a.wake <- struct{}{}:
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
	client := rivorav1connect.NewAgentServiceClient(&http.Client{Timeout: 5 * time.Second}, a.cfg.ControlPlaneURL)
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-a.ownedChanged:
		case <-t.C:
		case <-ctx.Done():
			return
		}
		_, err := client.ReportOwned(ctx, connect.NewRequest(&rivorav1.ReportOwnedRequest{
			AgentName: a.cfg.Name, Session: a.locker.Session(), Partitions: a.ownedPartitions(),
		}))
		if err != nil && ctx.Err() == nil {
			a.log.Debug("report owned partitions", "error", err)
		}
	}
}
