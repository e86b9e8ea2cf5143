package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/backoff"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// follow keeps a Watch open on the control plane, applies every snapshot
// and delta in order, and reports the applied version. It reconnects with
// backoff; a reconnect starts with a fresh snapshot.
//
// With several control planes (ControlPlaneURL lists them, comma-separated)
// it moves to the next one when a Watch fails: only the leader serves. A
// follower that names the leader is followed at once (a wait there added
// seconds to every failover), but only once in a row, so a named leader
// that is down is retried with the backoff. A Watch that delivered config
// starts the backoff over: the wait grows over failures in a row, not
// over the agent's life.
func (a *Agent) follow(ctx context.Context) {
	// No overall timeout: the stream is long-lived.
	httpClient := a.upstream.HTTPClient(0)
	next := reconnects{retry: backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}}
	failedInARow := 0
	for ctx.Err() == nil {
		url := a.upstream.URL()
		served, err := a.watch(ctx, a.upstream.Client(httpClient, url))
		if ctx.Err() != nil {
			return
		}
		failedInARow++
		if served {
			failedInARow = 0
		}
		wait := next.after(served, a.upstream.Failed(url, err))
		if wait == 0 {
			a.log.Info("config watch: a follower named the leader; connecting to it now", "controlplane", url, "leader", a.upstream.URL())
			continue
		}
		if failedInARow >= a.upstream.Count() {
			// Every control plane tried, none served: the calls held for
			// the first tokens are answered now (retried by their
			// clients), not held to their bound for a cell out of reach.
			a.cfg.Keys.NoTokensSoon()
		}
		a.log.Warn("config watch ended; reconnecting", "controlplane", url, "next", a.upstream.URL(), "retry_in", wait, "error", err)
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// reconnects decides the wait before the Watch's next try.
type reconnects struct {
	retry backoff.Backoff
	// jumped: the last try went at once to a leader a follower named.
	jumped bool
}

// after is the wait after a Watch ended: 0 (at once) when it moved to a
// leader a follower named (toLeader), unless the try before did too;
// otherwise the backoff's next, which starts over after a Watch that
// served config.
func (r *reconnects) after(served, toLeader bool) time.Duration {
	if served {
		r.retry.Reset()
		r.jumped = false
	}
	if toLeader && !r.jumped {
		r.jumped = true
		return 0
	}
	r.jumped = false
	return r.retry.Next()
}

// watch follows one Watch stream until it ends; served reports whether
// the control plane sent config on it (it led).
func (a *Agent) watch(ctx context.Context, client rivorav1connect.AgentServiceClient) (served bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	// The goroutines below end with ctx: wait for them after cancel.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	stream, err := client.Watch(ctx, connect.NewRequest(&rivorav1.WatchRequest{
		AgentName: a.cfg.Name, Address: a.cfg.AdvertiseURL, AppliedVersion: a.applied.Load(), Session: a.locker.Session(),
		SessionReplacedAt: replacedAt(a.locker.SessionReplacedAt()),
	}))
	if err != nil {
		return false, err
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
			return served, fmt.Errorf("apply config version %d: %w", msg.GetVersion(), err)
		}
		// Served only once applied: a config that cannot be applied (a
		// partition count this agent's data refuses) would otherwise
		// reset the backoff, and the agent reconnect ten times a second.
		served = true
		// Applying may take long (a partition rebuild): that is not silence.
		select {
		case alive <- struct{}{}:
		default:
		}
		if msg.GetVersion() > a.applied.Load() || msg.GetSnapshot() {
			a.applied.Store(msg.GetVersion())
			a.gone.Release()
			if _, err := client.ReportApplied(ctx, connect.NewRequest(&rivorav1.ReportAppliedRequest{AgentName: a.cfg.Name, Version: msg.GetVersion()})); err != nil {
				a.log.Warn("report applied version", "version", msg.GetVersion(), "error", err)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return served, err
	}
	return served, errors.New("control plane closed the stream")
}

// apply installs one config message: subscriptions and event types, then
// partition count, destinations, then the partitions this agent owns and
// the registered edges (INGEST's sources), and API tokens last.
// Subscriptions and event types come before the partition count, which
// opens ingest: a fan-out accepted on the first config must see them (an
// empty table would answer 0 routes and store nothing).
// Partitions live as long as the agent runs, not as long as one stream.
func (a *Agent) apply(msg *rivorav1.WatchResponse) (err error) {
	if msg.GetSnapshot() || msg.GetTokensChanged() {
		// Last: the calls a restarted agent holds until its first tokens
		// (auth.Keys.ExpectTokens) go on as these arrive, and a publish
		// must find its destination. A revoked token is refused from
		// here on also when the rest of the config failed to apply; but
		// a first config that failed brings no tokens (the held calls are
		// answered Unavailable, retried, not "not registered").
		defer func() {
			if err == nil || a.cfg.Keys.Loaded() {
				a.cfg.Keys.SetTokens(msg.GetTokens())
			}
		}()
	}
	if msg.GetSnapshot() || len(msg.GetSubscriptions()) > 0 || len(msg.GetRemovedSubscriptionIds()) > 0 {
		a.applySubscriptions(msg.GetSubscriptions(), msg.GetRemovedSubscriptionIds(), msg.GetSnapshot())
	}
	if msg.GetSnapshot() || msg.GetEventTypesChanged() {
		if err := a.catalogue.Replace(msg.GetEventTypes(), msg.GetStrictEventTypes()); err != nil {
			return err
		}
	}
	n := int(msg.GetPartitionCount())
	if err := a.parts.FixCount(n); err != nil {
		return err
	}
	if msg.GetSnapshot() || len(msg.GetDestinations()) > 0 || len(msg.GetRemovedDestinationIds()) > 0 {
		a.applyDestinations(msg.GetDestinations(), msg.GetRemovedDestinationIds(), msg.GetSnapshot())
	}
	want := make(map[int]bool, len(msg.GetPartitions()))
	for _, p := range msg.GetPartitions() {
		want[int(p)] = true
	}
	// Opening rebuilds from the store, which takes seconds for a large
	// backlog: the partition set does it beside the Watch, so later
	// changes still apply. A leaving agent's drain hands its partitions
	// off (Run): no assignment starts another handoff meanwhile.
	if !a.leaving.Load() {
		a.parts.Assign(want)
	}
	// The registered edges, and whether this agent keeps INGEST's sources
	// for them (partition 0's): set beside the Watch too.
	a.edges.follow(msg)
	return nil
}

// replacedAt is a session's replacement time for the control plane (nil
// for an agent's first session).
func replacedAt(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
