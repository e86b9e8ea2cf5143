package agent

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/rivora/rivora/edge"
	"github.com/rivora/rivora/internal/ids"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// edgeSourcesRepair is how often the keeper of INGEST's edge sources sets
// them again although nothing changed: an update that failed, or one
// another agent's start raced (ingest.New writes INGEST's config with the
// sources it read), is repaired within it.
const edgeSourcesRepair = 30 * time.Second

var edgeSourcesGauge = promauto.NewGauge(prometheus.GaugeOpts{
	Name: "rivora_edge_sources",
	Help: "Edges whose buffer INGEST sources, as this agent last set them (only the agent assigned partition 0 keeps them; 0 on the others).",
})

// edgeSources keeps the cell's INGEST sources equal to the registered
// edges: one source per edge (edge.Source), and no other edge's. The
// control plane's feed names the edges (WatchResponse.edges); only the
// agent assigned partition 0 writes INGEST's config, so that one writer
// does. Sources that are not edges' are never touched.
//
// Each source listens where its edge's buffer delivers, which names the
// buffer (edge.ForwardSubject): the keeper reads it from every edge it can
// reach, each time it sets the sources, and remembers the last one read.
// An edge never read gets no source until it is (it forwards nothing
// while unreachable); one read before keeps its source as it is.
//
// Invariant: nothing is written before the control plane has named the
// edges (a snapshot), so an agent that has not heard of an edge yet
// never removes its source.
type edgeSources struct {
	js    jetstream.JetStream
	log   *slog.Logger
	every time.Duration
	// kick wakes Run when what it should do changed.
	kick chan struct{}
	// read reads the deliver subjects of the edges it can reach, and why
	// it could not read the others' (edge.DeliverSubjects; a test's fake).
	read func(ctx context.Context, js jetstream.JetStream, names []string) (map[string]string, map[string]error)
	// now is the clock of the warnings about unread edges.
	now func() time.Time

	mu     sync.Mutex
	names  []string // the registered edges, sorted
	known  bool     // the control plane has named them
	keeper bool     // this agent is assigned partition 0

	// subjects are the deliver subjects last read, by edge; waiting is
	// since when an edge has waited for its first source, warned when it
	// was last warned of (warnUnread's). Run's alone.
	subjects map[string]string
	waiting  map[string]time.Time
	warned   map[string]time.Time
}

func newEdgeSources(js jetstream.JetStream, every time.Duration, log *slog.Logger) *edgeSources {
	return &edgeSources{js: js, log: log, every: every, kick: make(chan struct{}, 1), read: edge.DeliverSubjects, now: time.Now,
		subjects: map[string]string{}, waiting: map[string]time.Time{}, warned: map[string]time.Time{}}
}

// follow takes from one config message the registered edges (on a
// snapshot, or when they changed) and whether this agent keeps INGEST's
// sources (it is assigned partition 0; every message carries the full
// assignment). Run acts on a change.
func (e *edgeSources) follow(msg *rivorav1.WatchResponse) {
	e.mu.Lock()
	changed := false
	if msg.GetSnapshot() || msg.GetEdgesChanged() {
		names := e.valid(msg.GetEdges())
		changed = !e.known || !slices.Equal(names, e.names)
		e.names, e.known = names, true
	}
	if keeper := slices.Contains(msg.GetPartitions(), 0); keeper != e.keeper {
		e.keeper, changed = keeper, true
	}
	e.mu.Unlock()
	if changed {
		select {
		case e.kick <- struct{}{}:
		default:
		}
	}
}

// valid are the names sorted, without repeats, and without a name that
// cannot be an edge's (the control plane validates them: logged, never
// made a source).
func (e *edgeSources) valid(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if err := ids.Validate("edge name", n); err != nil {
			e.log.Error("ignoring an edge the control plane names", "edge", n, "error", err)
			continue
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Run sets INGEST's edge sources on every change and every e.every, and
// sooner while an edge waits to be reached for its first source (after
// edgeReachRetry, doubling up to e.every), until ctx ends.
func (e *edgeSources) Run(ctx context.Context) error {
	t := time.NewTimer(e.every)
	defer t.Stop()
	retry := edgeReachRetry
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.kick:
			retry = edgeReachRetry
		case <-t.C:
		}
		next := e.every
		if e.reconcile(ctx) {
			next = min(retry, e.every)
			retry = min(2*retry, e.every)
		} else {
			retry = edgeReachRetry
		}
		t.Reset(next)
	}
}

// edgeReachRetry is how soon the keeper first looks again for an edge it
// could not reach to give it its first source (its leaf connection may
// come up just after its registration).
const edgeReachRetry = time.Second

// reconcile sets INGEST's edge sources to the registered edges, when this
// agent keeps them and the edges are known. It reports whether an edge
// waits to be reached for its first source.
func (e *edgeSources) reconcile(ctx context.Context) (waiting bool) {
	e.mu.Lock()
	names, known, keeper := e.names, e.known, e.keeper
	e.mu.Unlock()
	if !keeper {
		// Another agent keeps them: what this one read may be stale by
		// the time it keeps them again.
		clear(e.subjects)
		clear(e.waiting)
		clear(e.warned)
		edgeSourcesGauge.Set(0)
		return false
	}
	if !known {
		return false
	}
	// The reads have their own budget: edges cut off silently answer
	// nothing until each read's timeout, and must not leave the write
	// for the others without time.
	readCtx, cancelRead := context.WithTimeout(ctx, 20*time.Second)
	read, unread := e.read(readCtx, e.js, names)
	cancelRead()
	deliver := make(map[string]string, len(names))
	for _, n := range names {
		if d, ok := read[n]; ok {
			e.subjects[n] = d
		}
		deliver[n] = e.subjects[n] // "" when never read
	}
	for n := range e.subjects {
		if _, registered := deliver[n]; !registered {
			delete(e.subjects, n)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	added, removed, changed, unreached, err := edge.SetSources(ctx, e.js, deliver)
	if err != nil {
		e.log.Warn("set INGEST's edge sources; retrying", "edges", names, "retry_in", e.every, "error", err)
		return false
	}
	for _, n := range added {
		e.log.Info("INGEST sources an edge's buffer now", "edge", n)
	}
	for _, n := range changed {
		e.log.Warn("an edge's buffer is a new one (its data dir was made anew): INGEST sources it from its start; what the old buffer had not forwarded is lost with it", "edge", n)
	}
	for _, n := range removed {
		e.log.Info("INGEST no longer sources an edge's buffer (the edge is not registered)", "edge", n)
	}
	e.warnUnread(names, unreached, unread)
	edgeSourcesGauge.Set(float64(len(names) - len(unreached)))
	return len(unreached) > 0
}

// An edge waiting for its first source is warned of once it has waited
// edgeUnreachedGrace (its leaf connection comes up about when it
// registers, a few reads earlier), and then every edgeWarnEvery, as is an
// edge whose buffer is another edge's.
const (
	edgeUnreachedGrace = time.Minute
	edgeWarnEvery      = 10 * time.Minute
)

// warnUnread logs at Warn, at most every edgeWarnEvery per edge, the
// registered edges whose events do not reach the cell for want of a read
// of where their buffer delivers: one still waiting for its first source
// (unreached) after edgeUnreachedGrace, and one whose buffer is another
// edge's (edge.ErrOtherEdgesBuffer), which never gets one. An edge cut
// off after it got its source is not: it keeps the source, and its cut
// is its own report's (rivoractl edges).
func (e *edgeSources) warnUnread(names, unreached []string, errs map[string]error) {
	now := e.now()
	for _, n := range names {
		err, waiting := errs[n], slices.Contains(unreached, n)
		if !waiting {
			delete(e.waiting, n)
		} else if _, ok := e.waiting[n]; !ok {
			e.waiting[n] = now
		}
		if !waiting && err == nil {
			delete(e.warned, n) // reached: a new trouble is told at once
		}
		otherBuffer := errors.Is(err, edge.ErrOtherEdgesBuffer)
		if !otherBuffer && (!waiting || now.Sub(e.waiting[n]) < edgeUnreachedGrace) {
			continue
		}
		if last, ok := e.warned[n]; ok && now.Sub(last) < edgeWarnEvery {
			continue
		}
		e.warned[n] = now
		if otherBuffer {
			e.log.Warn("an edge runs on another edge's buffer (started under a new --name on that edge's data dir): nothing it accepts reaches the cell; start it under the name its data dir was made with",
				"edge", n, "error", err)
			continue
		}
		e.log.Warn("an edge the cell cannot reach has no source in INGEST yet: nothing it buffers is forwarded until it is reached",
			"edge", n, "waiting", now.Sub(e.waiting[n]).Round(time.Second), "error", err)
	}
	gone := func(n string, _ time.Time) bool { return !slices.Contains(names, n) }
	maps.DeleteFunc(e.warned, gone)
	maps.DeleteFunc(e.waiting, gone)
}
