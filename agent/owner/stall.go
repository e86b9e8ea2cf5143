package owner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/lanes"
)

// An owner cut off from its NATS peers still holds its Consul lock (it
// reaches Consul), but its partition's streams cannot commit a write: their
// replicas need a quorum it cannot reach. Left alone, the partition would
// stall for as long as the cut lasts, since nobody else may take the lock.
// So a running partition watches its store (watchStore): when no write has
// been confirmed for the store stall timeout, Run stops with
// ErrStoreStalled, and the partition set gives the lock back (after the
// attempts in flight ended) so an agent that reaches the quorum takes the
// partition over. The set takes it again only once Writable holds here for
// a while (agent/partitions).

// DefaultStoreStallTimeout is how long a partition may go without a
// confirmed write to its store before its owner gives it up. It is longer
// than a stream's normal leader change (a dead leader's replicas elect
// another within NATS's 4–9 s election timeout, and a leader cut off from
// its quorum steps down after 10 s), so a healthy owner does not give up a
// partition while its streams merely fail over; and short enough that a
// cut-off owner's partitions move well before a long partition ends.
const DefaultStoreStallTimeout = 15 * time.Second

// ErrStoreStalled means the partition's streams took no write for the
// store stall timeout: this agent cannot reach a quorum of their replicas.
var ErrStoreStalled = errors.New("partition store unreachable: no write confirmed within the store stall timeout")

// storeProbeEvery is how often an idle partition (no write confirmed
// since) asks whether its store could take a write; writeProbeTimeout
// bounds one such question.
const (
	storeProbeEvery   = time.Second
	writeProbeTimeout = 2 * time.Second
)

// replicaActiveWithin is how recently a stream's leader must have heard
// from a replica to count it towards a quorum. Leaders send heartbeats
// every second; NATS itself stops counting a replica as current only
// after 10 s, far too late to tell a cut.
const replicaActiveWithin = 3 * time.Second

// stallTimeout is the partition's store stall timeout.
func (o *Partition) stallTimeout() time.Duration {
	if o.deps.StoreStallTimeout > 0 {
		return o.deps.StoreStallTimeout
	}
	return DefaultStoreStallTimeout
}

// probeEvery and probeTimeout are watchStore's probe interval and bound.
func (o *Partition) probeEvery() time.Duration   { return min(storeProbeEvery, o.stallTimeout()/4) }
func (o *Partition) probeTimeout() time.Duration { return min(writeProbeTimeout, o.stallTimeout()/2) }

// ackWait bounds the writer's wait for a group's acks: a second more than
// watchStore can take to judge a store stalled, so an unreachable store is
// judged stalled (and the partition given up) first, while an ack lost on
// a reachable store (a write on its way to a leader that died or was cut
// off) restarts the partition soon after, well before INGEST's AckWait
// (30 s) would hand the mover's events out again.
func (o *Partition) ackWait() time.Duration {
	return min(ackTimeout, o.stallTimeout()+o.probeEvery()+o.probeTimeout()+time.Second)
}

// watchStore is the partition's loop that notices a store it can no longer
// write. Busy partitions prove their store with every write (the writer and
// every ledger write confirm through the fence); an idle one is asked
// Writable every storeProbeEvery. It returns ErrStoreStalled once nothing
// was confirmed for the stall timeout, judged only after a probe failed:
// an agent thawed from a freeze first asks, and stalls only if its store
// really is unreachable. Before returning it closes o.stalled, so the
// writer stops waiting for acks that will not come.
func (o *Partition) watchStore(ctx context.Context) error {
	timeout, every := o.stallTimeout(), o.probeEvery()
	o.fence.confirm(time.Now())
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if time.Since(o.fence.lastConfirmed()) < every {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, o.probeTimeout())
		ok := Writable(pctx, o.deps.JS, o.p)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		now := time.Now()
		if ok {
			o.fence.confirm(now)
			continue
		}
		if quiet := now.Sub(o.fence.lastConfirmed()); quiet >= timeout {
			close(o.stalled)
			return fmt.Errorf("%w (partition %d: nothing confirmed for %s)", ErrStoreStalled, o.p, quiet.Round(time.Millisecond))
		}
	}
}

// StoreConfirmed is when the partition's store last took a write (or was
// found writable) while it ran here.
func (o *Partition) StoreConfirmed() time.Time { return o.fence.lastConfirmed() }

// Writable reports whether this agent can have a write to partition p's
// streams committed now: the leader of each (LANES_p and LEDGER_p)
// answered it, and that leader heard from a quorum of the stream's
// replicas within replicaActiveWithin. An answer that arrives proves the
// path to the leader both ways; the leader's view of its replicas proves
// the quorum behind it (a leader cut off with us answers, but its
// replicas are silent). A stream that does not exist yet, as the meta
// leader answers, is writable: creating it is the open's business. It
// needs no lock, so an agent that gave p up asks it before taking p
// again.
func Writable(ctx context.Context, js jetstream.JetStream, p int) bool {
	for _, name := range []string{lanes.LanesStream(p), lanes.LedgerStream(p)} {
		stream, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil || !quorumBehind(stream.CachedInfo()) {
			return false
		}
	}
	return true
}

// quorumBehind reports whether a stream's info, as its leader gave it,
// shows a leader with a quorum of recently heard replicas.
func quorumBehind(info *jetstream.StreamInfo) bool {
	if info == nil {
		return false
	}
	c := info.Cluster
	if c == nil || len(c.Replicas) == 0 {
		return true // one replica: whoever answered is the store
	}
	if c.Leader == "" {
		return false
	}
	heard := 1 // the leader
	for _, r := range c.Replicas {
		if r.Current && !r.Offline && r.Active < replicaActiveWithin {
			heard++
		}
	}
	return heard >= (len(c.Replicas)+1)/2+1
}
