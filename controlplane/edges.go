package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/internal/ids"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// The edges (`rivora edge`, issue 25) as the control plane knows them.
// Which edges are registered is part of the state (Store.Edges: kept
// across restarts and leader changes, since the cell forwards each
// registered edge's buffer through an INGEST source the agent running
// partition 0 keeps equal to them). How each one is doing — watching,
// last seen, its last buffer report — is this control plane's memory
// (edgeRegistry), rebuilt from the edges' next calls after a restart or a
// leader change, like the agents'. edge_endpoint.go serves EdgeService,
// edges_endpoint.go the admin RPCs.

// EdgeReportInterval is how often an edge reports its buffer
// (ReportEdge). An edge is connected while its last report said its link
// to the cell was up and is at most edgeStaleAfter old.
const EdgeReportInterval = 2 * time.Second

// edgeStaleAfter is how old an edge's last report may be for it to count
// as connected: three report intervals, so one late or lost report does
// not flap it.
const edgeStaleAfter = 3 * EdgeReportInterval

// maxEdges caps the registered edges: each is an INGEST source in the
// cell and a name in every agent's feed.
const maxEdges = 1000

// edgeRegistry is what this control plane saw of each edge since it
// started: its open WatchEdge streams and its last report. It keeps no
// edge the store does not (status joins the two by name).
type edgeRegistry struct {
	mu    sync.Mutex
	edges map[string]*edgeState
}

// edgeState is one edge's calls: its open streams (each with the cancel
// that ends it when the edge is removed, and the edge process that
// opened it), when it was last heard from, its last report (nil before
// the first), and which edge process holds the name (claim).
type edgeState struct {
	streams    map[*context.CancelFunc]string
	lastSeen   time.Time
	reportedAt time.Time
	buffer     *rivorav1.EdgeBuffer
	// holder is the instance id of the edge process that holds the name
	// ("" before the first that has one), heldAt its last call; refused
	// the last process refused it (its refusals are logged once).
	holder  string
	heldAt  time.Time
	refused string
}

func newEdgeRegistry() *edgeRegistry {
	return &edgeRegistry{edges: make(map[string]*edgeState)}
}

func (r *edgeRegistry) stateLocked(name string) *edgeState {
	e := r.edges[name]
	if e == nil {
		e = &edgeState{streams: make(map[*context.CancelFunc]string)}
		r.edges[name] = e
	}
	return e
}

// watch notes an open WatchEdge stream of name, opened by edge process
// instance, ended by cancel if the edge is removed or another process
// takes the name (claim); the func it returns notes the stream's end.
func (r *edgeRegistry) watch(name, instance string, cancel context.CancelFunc, now time.Time) (done func(now time.Time)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.stateLocked(name)
	key := &cancel
	e.streams[key] = instance
	e.lastSeen = now
	return func(now time.Time) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.edges[name] != e {
			return // removed meanwhile
		}
		delete(e.streams, key)
		e.lastSeen = now
	}
}

// claim lets edge process instance hold name, or refuses it
// (errkind.EdgeNameInUseReason) while another process holds it: one
// whose last call (claim) is at most edgeStaleAfter old. Two processes
// under one name would join the cell as one leaf node — NATS drops the
// older connection for the newer, and each reconnects: the link flaps
// between them — and overwrite each other's reports. A holder silent
// for longer (stopped, killed, cut off) loses the name to the next
// process that calls, and its open watches end: if it is still running,
// its next call is refused. An empty instance (an edge from before
// instances) takes no part. It reports the instance that lost the name
// to this one ("" for none), and whether a refusal is this instance's
// first in a row (the others are not worth a log line each).
func (r *edgeRegistry) claim(name, instance string, now time.Time) (took string, firstRefusal bool, err error) {
	if instance == "" {
		return "", false, nil
	}
	r.mu.Lock()
	e := r.stateLocked(name)
	var ended []*context.CancelFunc
	switch {
	case e.holder == instance:
	case e.holder != "" && now.Sub(e.heldAt) <= edgeStaleAfter:
		holder, ago := e.holder, now.Sub(e.heldAt)
		firstRefusal, e.refused = e.refused != instance, instance
		r.mu.Unlock()
		return "", firstRefusal, nameInUse(name, holder, ago)
	default:
		for cancel, by := range e.streams {
			if by == e.holder && by != "" {
				ended = append(ended, cancel)
			}
		}
		took, e.holder = e.holder, instance
	}
	e.heldAt = now
	r.mu.Unlock()
	for _, cancel := range ended {
		(*cancel)()
	}
	return took, false, nil
}

// nameInUse is the refusal of an edge process whose name holder holds,
// which last called ago.
func nameInUse(name, holder string, ago time.Duration) error {
	err := errorf(ErrExists, "edge name %q is in use by another running edge (process %s, last heard from %s ago): each running edge needs a name of its own, its JetStream domain and the buffer the cell forwards; start this one with another --name (and a --data-dir of its own), or stop the other one (a stopped edge's name is free %s after its last call)",
		name, holder, ago.Round(100*time.Millisecond), edgeStaleAfter)
	return errkind.WithInfo(err, errkind.EdgeNameInUseReason, map[string]string{"edge": name})
}

// report keeps an edge's report of its buffer.
func (r *edgeRegistry) report(name string, buffer *rivorav1.EdgeBuffer, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.stateLocked(name)
	e.buffer, e.reportedAt, e.lastSeen = proto.Clone(buffer).(*rivorav1.EdgeBuffer), now, now
}

// forget drops what is known of a removed edge and ends its streams.
func (r *edgeRegistry) forget(name string) {
	r.mu.Lock()
	e := r.edges[name]
	delete(r.edges, name)
	r.mu.Unlock()
	if e == nil {
		return
	}
	for cancel := range e.streams {
		(*cancel)()
	}
}

// status is what is known of the registered edges, in their order.
func (r *edgeRegistry) status(registered []*rivorav1.Edge, now time.Time) []*rivorav1.EdgeStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*rivorav1.EdgeStatus, 0, len(registered))
	for _, rec := range registered {
		s := &rivorav1.EdgeStatus{Name: rec.GetName(), RegisteredAt: rec.GetRegisteredAt()}
		if e := r.edges[rec.GetName()]; e != nil {
			// A stream cut off silently (no FIN, no RST) stays open on
			// this side for as long as TCP retransmits: it counts only
			// while the edge's reports come too.
			s.Watching = len(e.streams) > 0 && now.Sub(e.lastSeen) <= edgeStaleAfter
			s.LastSeen = timestamppb.New(e.lastSeen)
			if e.buffer != nil {
				s.Buffer = proto.Clone(e.buffer).(*rivorav1.EdgeBuffer)
				s.ReportStale = now.Sub(e.reportedAt) > edgeStaleAfter
				s.Connected = e.buffer.GetCellConnected() && !s.ReportStale
			}
		}
		out = append(out, s)
	}
	return out
}

// edgeNames lists edges' names, in their order (the store's: sorted).
func edgeNames(edges []*rivorav1.Edge) []string {
	if len(edges) == 0 {
		return nil
	}
	names := make([]string, len(edges))
	for i, e := range edges {
		names[i] = e.GetName()
	}
	return names
}

// validateEdgeName checks an edge's name: it is the edge's JetStream
// domain and a token of its subjects, so an id (ids.Validate).
func validateEdgeName(what, name string) error {
	if err := ids.Validate(what, name); err != nil {
		return tag(ErrInvalid, err)
	}
	return nil
}

// registerEdge records edge name on its first WatchEdge (a known name
// changes nothing): a new config version, audited, that the agents'
// feed carries (the agent running partition 0 adds the edge's INGEST
// source).
func (cp *ControlPlane) registerEdge(name string) error {
	if err := validateEdgeName("edge_name", name); err != nil {
		return err
	}
	if _, known := cp.store.Edge(name); known {
		return nil // a reconnect: nothing to write
	}
	known := false
	version, err := cp.changeEdges(func(edges map[string]*rivorav1.Edge) error {
		if _, ok := edges[name]; ok {
			known = true
			return errNothingToDo
		}
		if len(edges) >= maxEdges {
			return limitReached("edges", maxEdges, "the cell has %d edges registered, the most it takes (%d): remove unused ones (`rivoractl edges remove NAME`)", len(edges), maxEdges)
		}
		edges[name] = &rivorav1.Edge{Name: name, RegisteredAt: timestamppb.New(cp.now())}
		return nil
	})
	if known {
		return nil
	}
	if err != nil {
		return err
	}
	who := actor{name: "edge " + name}
	cp.record("edge.register", "", who, fmt.Sprintf("edge %s registered on its first watch: the cell forwards its buffer", name), version)
	cp.log.Info("edge registered", "edge", name, "version", version)
	return nil
}

// removeEdge forgets edge name: the agents' feed drops it and the agent
// running partition 0 removes its INGEST source. Unless force, it is
// refused while the control plane cannot tell the edge's buffer is
// empty: its last report counts unforwarded events, is stale (an edge
// cut off from the cell keeps accepting: it may hold more than it last
// said), or never came since this control plane started (after a
// restart or a leader change, until the edge's next report). Forced,
// what the edge holds stays in its buffer, no longer forwarded. Its open
// watches end: an edge still running registers again on its next one.
func (cp *ControlPlane) removeEdge(name string, force bool, who actor) error {
	if err := validateEdgeName("name", name); err != nil {
		return err
	}
	status, err := cp.edgeStatus(name)
	if err != nil {
		return err
	}
	why, wait := bufferUnsure(status)
	if why != "" && !force {
		return errorf(ErrPrecondition, "edge %s %s; %s, or remove it with --force and whatever it holds is no longer forwarded", name, why, wait)
	}
	version, err := cp.changeEdges(func(edges map[string]*rivorav1.Edge) error {
		if _, ok := edges[name]; !ok {
			return edgeNotFound(name)
		}
		delete(edges, name)
		return nil
	})
	if err != nil {
		return err
	}
	cp.edges.forget(name)
	detail := fmt.Sprintf("edge %s removed: the cell no longer forwards its buffer", name)
	if why != "" {
		detail += " (forced: it " + why + ")"
	}
	cp.record("edge.remove", "", who, detail, version)
	cp.log.Info("edge removed", "edge", name, "author", who.name, "token_id", who.tokenID, "version", version,
		"unforwarded_events", status.GetBuffer().GetBufferedEvents(), "report_stale", status.GetReportStale(), "reported", status.GetBuffer() != nil)
	return nil
}

// bufferUnsure says why the control plane cannot tell that an edge's
// buffer is empty, worded to follow "edge NAME " ("" when it can: a
// fresh report counting nothing), and what to wait for.
func bufferUnsure(s *rivorav1.EdgeStatus) (why, wait string) {
	b, name := s.GetBuffer(), s.GetName()
	switch {
	case b == nil:
		return "has not reported to this control plane since it started (or became the leader): what its buffer holds is unknown, and it may hold events the cell has not taken",
			fmt.Sprintf("wait for its next report (every %s while it runs: `rivoractl edges get %s`)", EdgeReportInterval, name)
	case s.GetReportStale():
		return fmt.Sprintf("has not reported for over %s (its last report, stale, counted %s): what its buffer holds now is unknown, and cut off from the cell an edge keeps accepting events", edgeStaleAfter, unforwardedEvents(b.GetBufferedEvents(), b.GetBufferedBytes())),
			fmt.Sprintf("wait until it reports again (`rivoractl edges get %s`)", name)
	case b.GetBufferedEvents() > 0:
		return fmt.Sprintf("reported %s in its buffer", unforwardedEvents(b.GetBufferedEvents(), b.GetBufferedBytes())),
			fmt.Sprintf("wait until the cell has them (`rivoractl edges get %s` shows 0)", name)
	}
	return "", ""
}

// unforwardedEvents says how many events (and bytes) an edge reported
// unforwarded: "1 unforwarded event (310 bytes)", "7 unforwarded events
// (700 bytes)".
func unforwardedEvents(events, bytes uint64) string {
	noun := "events"
	if events == 1 {
		noun = "event"
	}
	return fmt.Sprintf("%d unforwarded %s (%d bytes)", events, noun, bytes)
}

// changeEdges applies fn to the registered edges as one new config
// version and wakes every feed (the agents follow the set of edges).
func (cp *ControlPlane) changeEdges(fn func(edges map[string]*rivorav1.Edge) error) (uint64, error) {
	version, err := cp.store.UpdateEdges(fn)
	if err != nil {
		if errors.Is(err, ErrConflict) {
			cp.reloaded()
		}
		return 0, err
	}
	cp.broadcast()
	return version, nil
}

// edgeStatuses is what is known of every registered edge, sorted by
// name.
func (cp *ControlPlane) edgeStatuses() []*rivorav1.EdgeStatus {
	return cp.edges.status(cp.store.Edges(), cp.now())
}

// edgeStatus is what is known of edge name (ErrNotFound if it is not
// registered).
func (cp *ControlPlane) edgeStatus(name string) (*rivorav1.EdgeStatus, error) {
	rec, ok := cp.store.Edge(name)
	if !ok {
		return nil, edgeNotFound(name)
	}
	return cp.edges.status([]*rivorav1.Edge{rec}, cp.now())[0], nil
}

// claimEdge lets edge process instance hold edge name, or refuses it
// while another running process does (edgeRegistry.claim).
func (cp *ControlPlane) claimEdge(name, instance string) error {
	took, first, err := cp.edges.claim(name, instance, cp.now())
	if err != nil {
		level := slog.LevelDebug // it retries for a while: one line is enough
		if first {
			level = slog.LevelWarn
		}
		cp.log.Log(context.Background(), level, "refused an edge process the name another running edge holds", "edge", name, "instance", instance, "error", err)
		return err
	}
	if took != "" {
		cp.log.Warn("an edge process took the name of one not heard from for a while (stopped, or cut off: if it still runs, it is refused at its next call)", "edge", name, "instance", instance, "previous_instance", took)
	}
	return nil
}

// reportEdge keeps a registered edge's report of its buffer, from the
// edge process instance that holds the name (claimEdge). A report of
// an edge that is not registered is refused (ErrNotFound): an edge
// registers with its first WatchEdge. One that is registered is kept even
// while its watch is not open (after a leader change the two reconnect in
// either order).
func (cp *ControlPlane) reportEdge(name, instance string, buffer *rivorav1.EdgeBuffer) error {
	if err := validateEdgeName("edge_name", name); err != nil {
		return err
	}
	if buffer == nil {
		return errorf(ErrInvalid, "buffer is required")
	}
	if err := cp.claimEdge(name, instance); err != nil {
		return err
	}
	if _, registered := cp.store.Edge(name); !registered {
		return errorf(ErrNotFound, "edge %q is not registered with this control plane: an edge registers with its first WatchEdge (open it, then report)", name)
	}
	cp.edges.report(name, buffer, cp.now())
	return nil
}

// edgeNotFound is the error for an edge name that is not registered.
func edgeNotFound(name string) error {
	return errorf(ErrNotFound, "edge %q is not registered; see `rivoractl edges list`", name)
}
