package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/backoff"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// follow keeps a Watch open on the control plane, applies every snapshot
// and delta in order, and reports the applied version. It reconnects with
// backoff; a reconnect starts with a fresh snapshot.
//
// With several control planes (ControlPlaneURL lists them, comma-separated)
// it moves to the next one when a Watch fails: only the leader serves.
func (a *Agent) follow(ctx context.Context) {
	// No overall timeout: the stream is long-lived.
	httpClient := a.httpClient(0)
	retry := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	for ctx.Err() == nil {
		url := a.controlPlaneURL()
		err := a.watch(ctx, a.controlPlane(httpClient, url))
		if ctx.Err() != nil {
			return
		}
		a.nextControlPlane(url)
		wait := retry.Next()
		a.log.Warn("config watch ended; reconnecting", "controlplane", url, "next", a.controlPlaneURL(), "retry_in", wait, "error", err)
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

func (a *Agent) watch(ctx context.Context, client rivorav1connect.AgentServiceClient) error {
	ctx, cancel := context.WithCancel(ctx)
	// The goroutines below end with ctx: wait for them after cancel.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	stream, err := client.Watch(ctx, connect.NewRequest(&rivorav1.WatchRequest{
		AgentName: a.cfg.Name, Address: a.cfg.AdvertiseURL, AppliedVersion: a.applied.Load(), Session: a.locker.Session(),
	}))
	if err != nil {
		return err
	}
	defer stream.Close()
	// A new Consul session (the old one was lost) is announced with a new
	// Watch.
	wg.Go(func() {
		select {
		case <-a.locker.SessionChanged():
			a.log.Info("new consul session; reconnecting the watch to announce it", "session", a.locker.Session())
			cancel()
		case <-ctx.Done():
		}
	})
	// A silent stream past twice the control plane's keepalive is dead.
	alive := make(chan struct{}, 1)
	wg.Go(func() {
		t := time.NewTimer(25 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-alive:
				t.Reset(25 * time.Second)
			case <-t.C:
				cancel()
				return
			case <-ctx.Done():
				return
			}
		}
	})
	for stream.Receive() {
		select {
		case alive <- struct{}{}:
		default:
		}
		msg := stream.Msg()
		if err := a.apply(msg); err != nil {
			return fmt.Errorf("apply config version %d: %w", msg.GetVersion(), err)
		}
		// Applying may take long (a partition rebuild): that is not silence.
		select {
		case alive <- struct{}{}:
		default:
		}
		if msg.GetVersion() > a.applied.Load() || msg.GetSnapshot() {
			a.applied.Store(msg.GetVersion())
			a.releaseGone()
			if _, err := client.ReportApplied(ctx, connect.NewRequest(&rivorav1.ReportAppliedRequest{AgentName: a.cfg.Name, Version: msg.GetVersion()})); err != nil {
				a.log.Warn("report applied version", "version", msg.GetVersion(), "error", err)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return err
	}
	return errors.New("control plane closed the stream")
}

// apply installs one config message: partition count, API tokens,
// destinations, then the partitions this agent owns.
// Partitions live as long as the agent runs, not as long as one stream.
func (a *Agent) apply(msg *rivorav1.WatchResponse) error {
	n := int(msg.GetPartitionCount())
	if n <= 0 {
		return fmt.Errorf("partition_count %d", n)
	}
	if have := int(a.partitionCount.Load()); have != 0 && have != n {
		return fmt.Errorf("the control plane says %d partitions but this agent's data uses %d; partitions are fixed for a cell", n, have)
	}
	a.partitionCount.Store(int32(n))
	a.gateway.SetPartitions(n)
	if msg.GetSnapshot() || msg.GetTokensChanged() {
		// A revoked token is refused from here on.
		a.cfg.Keys.SetTokens(msg.GetTokens())
	}
	if msg.GetSnapshot() || len(msg.GetDestinations()) > 0 || len(msg.GetRemovedDestinationIds()) > 0 {
		if err := a.applyDestinations(msg.GetDestinations(), msg.GetRemovedDestinationIds(), msg.GetSnapshot()); err != nil {
			return err
		}
	}
	want := make(map[int]bool, len(msg.GetPartitions()))
	for _, p := range msg.GetPartitions() {
		want[int(p)] = true
	}
	// Opening rebuilds from the store, which takes seconds for a large
	// backlog: lockLoop and openLoop do it beside the Watch, so later
	// changes still apply.
	for _, run := range a.parts.assign(want) {
		a.log.Info("partition reassigned; handing it off", "partition", run.p)
		a.handOff(run)
	}
	return nil
}

// controlPlaneURL is the control plane the agent follows now.
func (a *Agent) controlPlaneURL() string {
	urls := a.controlPlanes()
	return urls[int(a.controlPlaneIndex.Load())%len(urls)]
}

// nextControlPlane moves on from failed, unless another caller did already.
func (a *Agent) nextControlPlane(failed string) {
	urls := a.controlPlanes()
	i := a.controlPlaneIndex.Load()
	if urls[int(i)%len(urls)] == failed {
		a.controlPlaneIndex.CompareAndSwap(i, i+1)
	}
}

// controlPlanes splits Config.ControlPlaneURL ("url,url,…").
func (a *Agent) controlPlanes() []string {
	var out []string
	for _, u := range strings.Split(a.cfg.ControlPlaneURL, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	if len(out) == 0 {
		return []string{""}
	}
	return out
}
