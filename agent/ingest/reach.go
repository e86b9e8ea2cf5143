package ingest

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/lanes"
)

// An agent cut off from its NATS peers cannot store an event: the
// streams it writes need a quorum of their replicas, which it cannot
// reach. Left alone, a publish to it would wait for an acknowledgement
// that cannot come, until its caller's deadline, while the other agents
// could have stored it at once. So a request is refused with Unavailable
// (retry on another agent) as soon as there is evidence that it cannot be
// stored here, and only then:
//
//   - a request whose writes are not answered within firstCheckAfter has
//     the streams it waits on checked (natsd.Reach: this server's own
//     Raft view, no request over the network), and again every
//     checkEvery while it waits; when one of them cannot reach a quorum
//     from here the request is refused (its context cancelled with the
//     refusal as cause) — the event may have been stored, which a retry
//     with the same idempotency key answers as a duplicate, and the
//     refusal says so (a retry without a key may store it twice);
//   - for suspectFor after such a refusal, every request checks its
//     streams before it writes anything, and is refused at once when one
//     is still out of reach: nothing is stored, and the refusal says that.
//
// The Raft view turns against a stream only after heartbeats stopped for
// a few seconds (natsd's heardWithin), so a busy but reachable store is
// never refused; and it turns back with the first heartbeat after a
// heal, so the agent accepts again as soon as it can store.

// Timings of the store guard.
const (
	firstCheckAfter = 500 * time.Millisecond
	checkEvery      = 250 * time.Millisecond
	suspectFor      = 10 * time.Second
)

var unreachableRefusals = promauto.NewCounter(prometheus.CounterOpts{
	Name: "rivora_ingest_store_unreachable_total",
	Help: "Publish requests refused (Unavailable) because this agent could not reach a quorum of a stream they write: retried on another agent.",
})

// storeGuard is the gateway's judge of whether it can store now.
type storeGuard struct {
	// reach is nil where nothing is refused early (a single node or an
	// edge: its store is in process).
	reach *natsd.Reach
	log   *slog.Logger
	// suspectUntil (Unix nanoseconds): until then a request checks its
	// streams before writing.
	suspectUntil atomic.Int64
}

// newStoreGuard is the guard of a gateway configured with cfg: it judges
// only a replicated store (a single node's or an edge's is in process,
// and answers or fails at once).
func newStoreGuard(cfg Config, log *slog.Logger) *storeGuard {
	if cfg.Replicas <= 1 || cfg.Edge != nil {
		return &storeGuard{log: log}
	}
	return &storeGuard{reach: cfg.Reach, log: log}
}

// storeWatch watches one request's streams while it runs.
type storeWatch struct {
	guard *storeGuard
	// ctx is the request's context, cancelled with the refusal as its
	// cause when a stream it waits on is found out of reach.
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	streams []string
	timer   *time.Timer
	stopped bool
	refusal error
}

// watch starts watching a request (its streams are added by need).
func (g *storeGuard) watch(ctx context.Context) *storeWatch {
	w := &storeWatch{guard: g, ctx: ctx}
	if g.reach == nil {
		return w
	}
	w.ctx, w.cancel = context.WithCancelCause(ctx)
	w.timer = time.AfterFunc(firstCheckAfter, w.check)
	return w
}

// active tells whether the watch judges anything.
func (w *storeWatch) active() bool { return w.guard.reach != nil }

// need adds streams the request is about to wait on. While the guard is
// suspicious it checks them first, and returns the refusal when one is
// out of reach (nothing was written for them yet).
func (w *storeWatch) need(streams ...string) error {
	if !w.active() || len(streams) == 0 {
		return nil
	}
	w.mu.Lock()
	w.streams = append(w.streams, streams...)
	w.mu.Unlock()
	if time.Now().UnixNano() >= w.guard.suspectUntil.Load() {
		return nil
	}
	if err := w.guard.reach.Check(streams...); err != nil {
		return w.refuse(err, false)
	}
	return nil
}

// check runs on the watch's timer: a request still waiting has its
// streams checked, and is refused when one is out of reach.
func (w *storeWatch) check() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	streams := append([]string(nil), w.streams...)
	w.mu.Unlock()
	if err := w.guard.reach.Check(streams...); err != nil {
		if refusal := w.refuse(err, true); refusal != nil {
			w.cancel(refusal)
		}
		return
	}
	w.mu.Lock()
	if !w.stopped {
		w.timer.Reset(checkEvery)
	}
	w.mu.Unlock()
}

// refuse records the refusal of the request for err (a stream out of
// reach) and makes the guard suspicious. mayBeStored: the request was
// already writing (its event may be stored), else nothing was written.
// It returns nil when the request finished meanwhile (a check's answer
// came after it): nothing is refused, nor counted.
func (w *storeWatch) refuse(err error, mayBeStored bool) error {
	refusal := unreachableRefusal(err, mayBeStored)
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return nil
	}
	first := w.refusal == nil
	if first {
		w.refusal = refusal
	}
	w.mu.Unlock()
	if first {
		unreachableRefusals.Inc()
		until := time.Now().Add(suspectFor).UnixNano()
		if w.guard.suspectUntil.Swap(until) < time.Now().UnixNano() {
			w.guard.log.Warn("refusing publishes: this agent cannot reach a quorum of its store", "error", err)
		}
	}
	return refusal
}

// unreachableRefusal is the answer to a request refused because err (a
// stream out of reach): it tells the caller whether a retry elsewhere can
// store the event twice.
func unreachableRefusal(err error, mayBeStored bool) error {
	if mayBeStored {
		return errkind.Errorf(errkind.Unavailable, "this agent cannot reach a quorum of its store (%w); the request's events may have been stored: retry on another agent with the same idempotency keys, which answer a stored event with its id (a retry without a key may store an event twice)", err)
	}
	return errkind.Errorf(errkind.Unavailable, "this agent cannot reach a quorum of its store (%w); nothing was stored: retry on another agent", err)
}

// explain is the answer to a request that failed with err: the refusal
// when the watch refused it (err is then its cancelled context's), else
// err (an idempotency conflict stays one).
func (w *storeWatch) explain(err error) error {
	if err == nil || !w.active() || errors.Is(err, errkind.Exists) {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.refusal != nil {
		return w.refusal
	}
	return err
}

// stop ends the watch.
func (w *storeWatch) stop() {
	if !w.active() {
		return
	}
	w.mu.Lock()
	w.stopped = true
	w.timer.Stop()
	w.mu.Unlock()
	w.cancel(nil)
}

// storeStreams are the streams storing events may wait on: a partition's
// lanes when this agent owns it (and INGEST, which its lane writer reads
// to keep a lane's order, and may forward into); else INGEST, and for a
// keyed event its idempotency probe's: the partition's lanes and the
// idempotency records.
func (g *Gateway) storeStreams(events []*prepared) []string {
	var out []string
	seen := make(map[string]bool, 3)
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	for _, p := range events {
		add(lanes.IngestStream)
		if g.local != nil && g.local.Owns(p.partition) {
			add(lanes.LanesStream(p.partition))
			continue
		}
		if p.fingerprint != nil {
			add(lanes.LanesStream(p.partition))
			add(g.claims.stream())
		}
	}
	return out
}
