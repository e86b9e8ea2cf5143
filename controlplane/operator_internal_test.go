package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// The operator router, tested through real Connect servers on 127.0.0.1:
// stand-in agents (routeAgent) serve EventService, LaneService and
// ArchiveService, the control plane serves the router, and the test calls
// the control plane with Connect clients, as rivoractl does.

const routePartitions = 16

// routeAgent is a stand-in agent: it answers with its own name in the
// response, so a test sees which agent answered, and with the events and
// errors the test gave it.
type routeAgent struct {
	rivorav1connect.UnimplementedEventServiceHandler
	rivorav1connect.UnimplementedLaneServiceHandler
	rivorav1connect.UnimplementedArchiveServiceHandler

	name string
	srv  *httptest.Server

	mu     sync.Mutex
	events map[string]*rivorav1.GetEventResponse // GetEvent answers; missing: NotFound
	err    error                                 // returned by every call when set
	hang   bool                                  // GetEvent waits for its context to end
	// archiveSlow delays each answer read from the archive (list, stats,
	// show); archiveCanceled counts those whose context ended first.
	archiveSlow     time.Duration
	archiveCanceled int
	calls           []string
	// authorization is the Authorization header of every request.
	authorization []string
	resent        []string
	replays       int // Replay reports to send
	// replayEnded is closed when a Replay handler returns.
	replayEnded chan struct{}
	replayHold  bool // Replay waits for its context after its reports
	// archiveDown, when set, is the archive's error: list, stats and show
	// answer from the agent's ledger, as an agent does.
	archiveDown string
	ledger      routeLedger
}

func (a *routeAgent) called(method string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, method)
	return a.err
}

// set makes the agent answer GetEvent for id with ev (nil: NotFound).
func (a *routeAgent) set(id string, ev *rivorav1.GetEventResponse) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ev == nil {
		delete(a.events, id)
		return
	}
	a.events[id] = ev
}

func (a *routeAgent) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.err = err
}

func (a *routeAgent) resentOf() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.resent...)
}

func (a *routeAgent) callsOf() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.calls...)
}

func (a *routeAgent) GetEvent(ctx context.Context, req *connect.Request[rivorav1.GetEventRequest]) (*connect.Response[rivorav1.GetEventResponse], error) {
	if err := a.called("GetEvent"); err != nil {
		return nil, err
	}
	a.mu.Lock()
	ev, hang := a.events[req.Msg.GetEventId()], a.hang
	a.mu.Unlock()
	if hang {
		<-ctx.Done()
		return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	if ev == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("event %s: not found here", req.Msg.GetEventId()))
	}
	return connect.NewResponse(ev), nil
}

func (a *routeAgent) ListEvents(ctx context.Context, req *connect.Request[rivorav1.ListEventsRequest]) (*connect.Response[rivorav1.ListEventsResponse], error) {
	if err := a.called("ListEvents"); err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.ListEventsResponse{Events: []*rivorav1.EventSummary{{DestinationId: req.Msg.GetDestinationId(), CustomerId: a.name}}}), nil
}

func (a *routeAgent) ResendEvent(ctx context.Context, req *connect.Request[rivorav1.ResendEventRequest]) (*connect.Response[rivorav1.ResendEventResponse], error) {
	if err := a.called("ResendEvent"); err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.resent = append(a.resent, req.Msg.GetEventId()+" "+req.Msg.GetReason())
	a.mu.Unlock()
	return connect.NewResponse(&rivorav1.ResendEventResponse{EventId: req.Msg.GetEventId(), CustomerId: a.name}), nil
}

func (a *routeAgent) ListLanes(ctx context.Context, req *connect.Request[rivorav1.ListLanesRequest]) (*connect.Response[rivorav1.ListLanesResponse], error) {
	if err := a.called("ListLanes"); err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.ListLanesResponse{Lanes: []*rivorav1.LaneSummary{{DestinationId: req.Msg.GetDestinationId(), CustomerId: a.name, Depth: 3}}, Matched: 1}), nil
}

func (a *routeAgent) SkipLaneHead(ctx context.Context, req *connect.Request[rivorav1.SkipLaneHeadRequest]) (*connect.Response[rivorav1.SkipLaneHeadResponse], error) {
	if err := a.called("SkipLaneHead"); err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.SkipLaneHeadResponse{EventId: a.name}), nil
}

func (a *routeAgent) ListDeadLetters(ctx context.Context, req *connect.Request[rivorav1.ListDeadLettersRequest]) (*connect.Response[rivorav1.ListDeadLettersResponse], error) {
	if err := a.called("ListDeadLetters"); err != nil {
		return nil, err
	}
	a.mu.Lock()
	down, ledger := a.archiveDown, a.ledger
	a.mu.Unlock()
	if down != "" || req.Msg.GetLedgersOnly() {
		resp := ledger.list(int(req.Msg.GetLimit()))
		if !req.Msg.GetLedgersOnly() {
			resp.ArchiveUnavailable = down
		}
		return connect.NewResponse(resp), nil
	}
	if err := a.readArchive(ctx); err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.ListDeadLettersResponse{DeadLetters: []*rivorav1.DeadLetter{{LastError: "from-" + a.name}}}), nil
}

func (a *routeAgent) DeadLetterStats(ctx context.Context, req *connect.Request[rivorav1.DeadLetterStatsRequest]) (*connect.Response[rivorav1.DeadLetterStatsResponse], error) {
	if err := a.called("DeadLetterStats"); err != nil {
		return nil, err
	}
	a.mu.Lock()
	down, ledger := a.archiveDown, a.ledger
	a.mu.Unlock()
	if down != "" || req.Msg.GetLedgersOnly() {
		resp := ledger.stats()
		if !req.Msg.GetLedgersOnly() {
			resp.ArchiveUnavailable = down
		}
		return connect.NewResponse(resp), nil
	}
	if err := a.readArchive(ctx); err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.DeadLetterStatsResponse{Total: 7}), nil
}

func (a *routeAgent) GetDeadLetter(ctx context.Context, req *connect.Request[rivorav1.GetDeadLetterRequest]) (*connect.Response[rivorav1.GetDeadLetterResponse], error) {
	if err := a.called("GetDeadLetter"); err != nil {
		return nil, err
	}
	a.mu.Lock()
	down, ledger := a.archiveDown, a.ledger
	a.mu.Unlock()
	if down == "" && !req.Msg.GetLedgersOnly() {
		if err := a.readArchive(ctx); err != nil {
			return nil, err
		}
		return connect.NewResponse(&rivorav1.GetDeadLetterResponse{DeadLetter: &rivorav1.DeadLetter{LastError: "from-" + a.name}, Object: "deadletter/x"}), nil
	}
	for _, dl := range ledger.dls {
		if dl.GetEvent().GetEventId() == req.Msg.GetEventId() {
			return connect.NewResponse(&rivorav1.GetDeadLetterResponse{DeadLetter: dl, ArchiveUnavailable: down}), nil
		}
	}
	notHere := errkind.Errorf(errkind.NotFound, "no dead letter of event %s waits in the ledgers read here", req.Msg.GetEventId())
	if req.Msg.GetLedgersOnly() {
		return nil, errkind.AsConnect(notHere)
	}
	err := errkind.Tag(errkind.Unavailable, fmt.Errorf("%s; and %v", down, notHere))
	return nil, errkind.AsConnect(errkind.WithInfo(err, errkind.ArchiveUnavailableReason, map[string]string{"archive_error": down}))
}

// readArchive takes archiveSlow, as a slow archive does, or fails when
// ctx ends first.
func (a *routeAgent) readArchive(ctx context.Context) error {
	a.mu.Lock()
	slow := a.archiveSlow
	a.mu.Unlock()
	select {
	case <-time.After(slow):
		return nil
	case <-ctx.Done():
		a.mu.Lock()
		a.archiveCanceled++
		a.mu.Unlock()
		return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
}

// routeLedger is what a stand-in agent's ledgers hold: dead letters (in
// ledger order), the partitions it reads and those it cannot.
type routeLedger struct {
	dls    []*rivorav1.DeadLetter
	read   []uint32
	unread []*rivorav1.UnreadLedger
}

func (l routeLedger) list(limit int) *rivorav1.ListDeadLettersResponse {
	if limit <= 0 {
		limit = len(l.dls)
	}
	n := min(limit, len(l.dls))
	return &rivorav1.ListDeadLettersResponse{DeadLetters: l.dls[:n], MoreUnarchived: int64(len(l.dls) - n), Truncated: n < len(l.dls), LedgerPartitions: l.read, UnreadLedgers: l.unread}
}

func (l routeLedger) stats() *rivorav1.DeadLetterStatsResponse {
	resp := &rivorav1.DeadLetterStatsResponse{LedgerPartitions: l.read, UnreadLedgers: l.unread}
	for _, dl := range l.dls {
		resp.Counts = append(resp.Counts, &rivorav1.DeadLetterCount{DestinationId: dl.GetEvent().GetDestinationId(), CustomerId: dl.GetEvent().GetCustomerId(), Count: 1, Newest: dl.GetDeadAt(), Oldest: dl.GetDeadAt()})
		resp.Total++
	}
	return resp
}

// downArchive makes the agent answer as one whose archive cannot be read,
// from ledger.
func (a *routeAgent) downArchive(why string, ledger routeLedger) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.archiveDown, a.ledger = why, ledger
}

func (a *routeAgent) Replay(ctx context.Context, req *connect.Request[rivorav1.ReplayRequest], stream *connect.ServerStream[rivorav1.ReplayResponse]) error {
	defer close(a.replayEnded)
	if err := a.called("Replay"); err != nil {
		return err
	}
	a.mu.Lock()
	n, hold := a.replays, a.replayHold
	a.mu.Unlock()
	for i := range n {
		if err := stream.Send(&rivorav1.ReplayResponse{Total: int64(n), Replayed: int64(i + 1), Done: i == n-1 && !hold}); err != nil {
			return err
		}
	}
	if hold {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// routeCell is a control plane (no Consul: every connected agent is
// healthy) serving the router, and its stand-in agents.
type routeCell struct {
	t      *testing.T
	cp     *ControlPlane
	url    string
	agents map[string]*routeAgent
	// token is the admin token the clients call with; as sends it.
	token string
	as    connect.ClientOption
}

func startRouteCell(t *testing.T, gate func() error) *routeCell {
	t.Helper()
	cp, err := New(Config{StateDir: t.TempDir(), Partitions: routePartitions, Keys: testKeys(t)}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	token, as := storeAdmin(t, cp, "router-test")
	cp.operator.askTimeout = 300 * time.Millisecond
	cp.operator.hedgeAfter = 300 * time.Millisecond
	mux := http.NewServeMux()
	cp.handleOperator(mux, gate)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &routeCell{t: t, cp: cp, url: srv.URL, agents: map[string]*routeAgent{}, token: token, as: as}
}

// agent starts a stand-in agent that watches the control plane and
// reports owning partitions.
func (c *routeCell) agent(name string, partitions ...uint32) *routeAgent {
	c.t.Helper()
	a := &routeAgent{name: name, events: map[string]*rivorav1.GetEventResponse{}, replayEnded: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewEventServiceHandler(a))
	mux.Handle(rivorav1connect.NewLaneServiceHandler(a))
	mux.Handle(rivorav1connect.NewArchiveServiceHandler(a))
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.authorization = append(a.authorization, r.Header.Get("Authorization"))
		a.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	c.t.Cleanup(a.srv.Close)
	c.cp.agents.connect(name, a.srv.URL, "", time.Time{}, time.Now())
	if _, err := c.cp.agents.owned(name, "", partitions, nil, time.Now()); err != nil {
		c.t.Fatal(err)
	}
	c.agents[name] = a
	return a
}

// blackholed registers an agent owning partitions whose address accepts
// connections and never answers on them, as a blackholed host does: a
// call to it ends only with its context.
func (c *routeCell) blackholed(name string, partitions ...uint32) {
	c.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, conn)
			mu.Unlock()
		}
	}()
	c.t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, conn := range held {
			conn.Close()
		}
	})
	c.cp.agents.connect(name, "http://"+ln.Addr().String(), "", time.Time{}, time.Now())
	if _, err := c.cp.agents.owned(name, "", partitions, nil, time.Now()); err != nil {
		c.t.Fatal(err)
	}
}

func (c *routeCell) events() rivorav1connect.EventServiceClient {
	return rivorav1connect.NewEventServiceClient(http.DefaultClient, c.url, c.as)
}

func (c *routeCell) lanes() rivorav1connect.LaneServiceClient {
	return rivorav1connect.NewLaneServiceClient(http.DefaultClient, c.url, c.as)
}

func (c *routeCell) archive() rivorav1connect.ArchiveServiceClient {
	return rivorav1connect.NewArchiveServiceClient(http.DefaultClient, c.url, c.as)
}

// destinationIn returns a destination id whose partition is p.
func destinationIn(t *testing.T, p uint32) string {
	t.Helper()
	for i := range 10000 {
		id := fmt.Sprintf("dest-%d", i)
		if lanes.Partition(id, routePartitions) == int(p) {
			return id
		}
	}
	t.Fatalf("no destination id found in partition %d", p)
	return ""
}

func wantErr(t *testing.T, what string, err error, code connect.Code, mentions ...string) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("%s: err = %v (code %v), want %v", what, err, connect.CodeOf(err), code)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("%s: error %q does not mention %q", what, err, m)
		}
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// A call naming a destination goes to the agent owning its partition, and
// to no other; a partition nobody owns is Unavailable, naming it.
func TestOperatorRoutesByDestinationToTheOwner(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	c.agent("a1", 0, 1, 2, 3, 4, 5, 6)
	c.agent("a2", 7, 8, 9, 10, 11, 12, 13, 14)
	onA1, onA2, unowned := destinationIn(t, 3), destinationIn(t, 9), destinationIn(t, 15)

	for dest, want := range map[string]string{onA1: "a1", onA2: "a2"} {
		lanesResp, err := c.lanes().ListLanes(ctx(t), connect.NewRequest(&rivorav1.ListLanesRequest{DestinationId: dest}))
		if err != nil {
			t.Fatalf("ListLanes %s: %v", dest, err)
		}
		if got := lanesResp.Msg.GetLanes()[0].GetCustomerId(); got != want || lanesResp.Msg.GetLanes()[0].GetDepth() != 3 {
			t.Errorf("ListLanes %s answered by %s (depth %d), want %s (depth 3)", dest, got, lanesResp.Msg.GetLanes()[0].GetDepth(), want)
		}
		evs, err := c.events().ListEvents(ctx(t), connect.NewRequest(&rivorav1.ListEventsRequest{DestinationId: dest}))
		if err != nil {
			t.Fatalf("ListEvents %s: %v", dest, err)
		}
		if got := evs.Msg.GetEvents()[0].GetCustomerId(); got != want {
			t.Errorf("ListEvents %s answered by %s, want %s", dest, got, want)
		}
		skip, err := c.lanes().SkipLaneHead(ctx(t), connect.NewRequest(&rivorav1.SkipLaneHeadRequest{DestinationId: dest, CustomerId: "c", LaneKey: "l", Reason: "poison"}))
		if err != nil {
			t.Fatalf("SkipLaneHead %s: %v", dest, err)
		}
		if got := skip.Msg.GetEventId(); got != want {
			t.Errorf("SkipLaneHead %s answered by %s, want %s", dest, got, want)
		}
	}
	for name, a := range c.agents {
		if got := len(a.callsOf()); got != 3 {
			t.Errorf("agent %s got %d calls %v, want 3 (its own destination's)", name, got, a.callsOf())
		}
	}

	_, err := c.lanes().ListLanes(ctx(t), connect.NewRequest(&rivorav1.ListLanesRequest{DestinationId: unowned}))
	wantErr(t, "ListLanes in an unowned partition", err, connect.CodeUnavailable, "partition 15 has no owner right now; retry", unowned)
	_, err = c.events().ListEvents(ctx(t), connect.NewRequest(&rivorav1.ListEventsRequest{}))
	wantErr(t, "ListEvents without a destination", err, connect.CodeInvalidArgument, "destination_id is required")
}

// During a handoff two agents may report the same partition for a moment:
// the one it is assigned to answers.
func TestOperatorPrefersTheAssignedOwner(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	c.agent("a2", 4)
	c.agent("a1", 4)
	// Without Consul the longest-connected agent is assigned every
	// partition: a2, though a1 comes first by name.
	c.cp.agents.partitionsFor("a1", routePartitions)
	c.cp.agents.partitionsFor("a2", routePartitions)
	resp, err := c.lanes().ListLanes(ctx(t), connect.NewRequest(&rivorav1.ListLanesRequest{DestinationId: destinationIn(t, 4)}))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Msg.GetLanes()[0].GetCustomerId(); got != "a2" {
		t.Errorf("answered by %s, want a2 (assigned partition 4)", got)
	}
}

// An agent's own error reaches the caller with its code and message; an
// agent that cannot be reached is Unavailable naming it.
func TestOperatorPassesAgentErrorsThrough(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	a1 := c.agent("a1", 0, 1, 2, 3, 4, 5, 6, 7)
	a2 := c.agent("a2", 8, 9, 10, 11, 12, 13, 14, 15)
	a1.fail(connect.NewError(connect.CodeFailedPrecondition, errors.New("lane head 0190 is in flight; try again once its attempt ends")))
	_, err := c.lanes().SkipLaneHead(ctx(t), connect.NewRequest(&rivorav1.SkipLaneHeadRequest{DestinationId: destinationIn(t, 2), Reason: "poison"}))
	wantErr(t, "SkipLaneHead refused by the owner", err, connect.CodeFailedPrecondition, "lane head 0190 is in flight; try again once its attempt ends")
	if strings.Contains(err.Error(), "failed_precondition: failed_precondition") {
		t.Errorf("the code is repeated in the message: %q", err)
	}

	a2.srv.Close()
	_, err = c.events().ListEvents(ctx(t), connect.NewRequest(&rivorav1.ListEventsRequest{DestinationId: destinationIn(t, 9)}))
	wantErr(t, "ListEvents on a dead owner", err, connect.CodeUnavailable, "agent a2 at "+a2.srv.URL+" did not answer")
}

func event(id, dest string, state rivorav1.EventState, attempts int) *rivorav1.GetEventResponse {
	ev := &rivorav1.GetEventResponse{EventId: id, DestinationId: dest, State: state}
	for i := range attempts {
		ev.Attempts = append(ev.Attempts, &rivorav1.Attempt{Number: int32(i + 1)})
	}
	return ev
}

const (
	evID  = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	evID2 = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c"
)

// GetEvent asks every agent: a pending (or in flight) answer wins, only
// the owner knows it; else the fullest found answer; NotFound only when
// every agent says so; an agent that does not answer makes a not-found
// Unavailable, and a hung one does not hold the answer up.
func TestOperatorGetEventMergesAnswers(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	a1, a2, a3 := c.agent("a1"), c.agent("a2"), c.agent("a3")
	get := func() (*rivorav1.GetEventResponse, error) {
		resp, err := c.events().GetEvent(ctx(t), connect.NewRequest(&rivorav1.GetEventRequest{EventId: evID}))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}

	_, err := get()
	// Word for word the agents' answer, as for another customer's event.
	if want := auth.EventNotFound(evID); connect.CodeOf(err) != connect.CodeNotFound || err.Error() != want.Error() {
		t.Fatalf("unknown everywhere: %v, want %v", err, want)
	}

	a1.set(evID, event(evID, "orders", rivorav1.EventState_EVENT_STATE_DELIVERED, 1))
	a2.set(evID, event(evID, "orders", rivorav1.EventState_EVENT_STATE_DELIVERED, 2))
	ev, err := get()
	if err != nil || ev.GetState() != rivorav1.EventState_EVENT_STATE_DELIVERED || len(ev.GetAttempts()) != 2 {
		t.Fatalf("delivered on a1 (1 attempt) and a2 (2): got %v, %v; want a2's answer", ev, err)
	}

	a3.set(evID, event(evID, "orders", rivorav1.EventState_EVENT_STATE_PENDING, 0)) // resent: pending on the owner
	if ev, err := get(); err != nil || ev.GetState() != rivorav1.EventState_EVENT_STATE_PENDING {
		t.Fatalf("pending on a3, delivered elsewhere: got %v, %v; want a3's pending answer", ev, err)
	}
	a3.set(evID, event(evID, "orders", rivorav1.EventState_EVENT_STATE_IN_FLIGHT, 3))
	if ev, err := get(); err != nil || ev.GetState() != rivorav1.EventState_EVENT_STATE_IN_FLIGHT {
		t.Fatalf("in flight on a3: got %v, %v; want a3's answer", ev, err)
	}

	a3.mu.Lock()
	a3.hang = true
	a3.mu.Unlock()
	if ev, err := get(); err != nil || len(ev.GetAttempts()) != 2 {
		t.Fatalf("a3 hangs: got %v, %v; want a2's delivered answer without a3", ev, err)
	}

	a1.set(evID, nil)
	a2.set(evID, nil)
	_, err = get()
	wantErr(t, "not found on a1, a2; a3 hangs", err, connect.CodeUnavailable, "not found on a1, a2", "agent a3")

	a1.srv.Close()
	a2.srv.Close()
	_, err = get()
	wantErr(t, "no agent answers", err, connect.CodeUnavailable, "no agent answered", "agent a1", "agent a2", "agent a3")

	_, err = c.events().GetEvent(ctx(t), connect.NewRequest(&rivorav1.GetEventRequest{EventId: "no spaces"}))
	wantErr(t, "a malformed id", err, connect.CodeInvalidArgument, "event_id")
}

// No agent connected: Unavailable, saying how to connect one.
func TestOperatorWithoutAgents(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	_, err := c.events().GetEvent(ctx(t), connect.NewRequest(&rivorav1.GetEventRequest{EventId: evID}))
	wantErr(t, "GetEvent", err, connect.CodeUnavailable, "no agent is connected")
	_, err = c.archive().ListDeadLetters(ctx(t), connect.NewRequest(&rivorav1.ListDeadLettersRequest{}))
	wantErr(t, "ListDeadLetters", err, connect.CodeUnavailable, "no agent is connected")
}

// No agent connected right after this control plane became the leader,
// or while the agents it knew are gone: they are likely reconnecting, and
// the answer says so rather than to start one.
func TestOperatorWithoutAgentsAfterALeaderChange(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	c.cp.election = newElection(nil, "http://cp1", slog.New(slog.DiscardHandler), nil)
	c.cp.election.leading, c.cp.election.ledSince = true, time.Now().Add(-4*time.Second)
	_, err := c.events().GetEvent(ctx(t), connect.NewRequest(&rivorav1.GetEventRequest{EventId: evID}))
	wantErr(t, "GetEvent 4 s into the term", err, connect.CodeUnavailable, "became the leader 4s ago", "reconnecting after the leader change", "retry shortly")

	c.cp.election.ledSince = time.Now().Add(-time.Minute)
	_, err = c.archive().ListDeadLetters(ctx(t), connect.NewRequest(&rivorav1.ListDeadLettersRequest{}))
	wantErr(t, "ListDeadLetters a minute into the term", err, connect.CodeUnavailable, "start one with")

	c.cp.agents.connect("a1", "http://127.0.0.1:1", "", time.Time{}, time.Now())
	c.cp.agents.disconnect(ctx(t), "a1", time.Now())
	_, err = c.archive().ListDeadLetters(ctx(t), connect.NewRequest(&rivorav1.ListDeadLettersRequest{}))
	wantErr(t, "ListDeadLetters with a1 gone", err, connect.CodeUnavailable, "the agent it knew is not connected", "retry shortly")
}

// ResendEvent goes to the owner of the event's destination, wherever its
// history was found; an unknown event is NotFound.
func TestOperatorResendGoesToTheOwner(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	a1 := c.agent("a1", 0, 1, 2, 3, 4, 5, 6, 7)
	a2 := c.agent("a2", 8, 9, 10, 11, 12, 13, 14, 15)
	dest := destinationIn(t, 12)
	a1.set(evID, event(evID, dest, rivorav1.EventState_EVENT_STATE_DELIVERED, 1))
	resp, err := c.events().ResendEvent(ctx(t), connect.NewRequest(&rivorav1.ResendEventRequest{EventId: evID, Reason: "partner lost it"}))
	if err != nil {
		t.Fatal(err)
	}
	if r1, r2 := a1.resentOf(), a2.resentOf(); resp.Msg.GetCustomerId() != "a2" || len(r1) != 0 || len(r2) != 1 || r2[0] != evID+" partner lost it" {
		t.Errorf("resend answered by %s; a1 resent %v, a2 resent %v; want a2 (owner of %s) only, with the reason", resp.Msg.GetCustomerId(), r1, r2, dest)
	}
	_, err = c.events().ResendEvent(ctx(t), connect.NewRequest(&rivorav1.ResendEventRequest{EventId: evID2, Reason: "x"}))
	wantErr(t, "resend an unknown event", err, connect.CodeNotFound, evID2)
}

// The archive is the cell's: any agent answers, the others (at once) when
// the first is down; an agent's other errors are the answer when no agent
// read the archive.
func TestOperatorArchiveFailsOver(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	a1, a2, a3 := c.agent("a1"), c.agent("a2"), c.agent("a3")
	a1.srv.Close()
	a2.fail(connect.NewError(connect.CodeUnavailable, errors.New("archive s3 minio:9000: connection refused")))
	resp, err := c.archive().ListDeadLetters(ctx(t), connect.NewRequest(&rivorav1.ListDeadLettersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Msg.GetDeadLetters()[0].GetLastError(); got != "from-a3" {
		t.Errorf("answered %s, want from-a3 (a1 down, a2 Unavailable)", got)
	}
	if len(a2.callsOf()) != 1 || len(a3.callsOf()) != 1 {
		t.Errorf("calls: a2 %v, a3 %v; want one each", a2.callsOf(), a3.callsOf())
	}

	a3.fail(connect.NewError(connect.CodeUnavailable, errors.New("archive s3 minio:9000: connection refused")))
	_, err = c.archive().DeadLetterStats(ctx(t), connect.NewRequest(&rivorav1.DeadLetterStatsRequest{}))
	wantErr(t, "every agent down or Unavailable", err, connect.CodeUnavailable, "no agent could read the archive (3 tried)", "agent a1", "agent a2: unavailable: archive s3", "agent a3")

	// A refusal is the answer whichever agent gives it: a read from
	// another agent arriving later does not override it (a token one
	// agent has seen revoked, another not yet).
	a2.fail(connect.NewError(connect.CodeInvalidArgument, errors.New("filter: since is after until")))
	a3.fail(nil)
	a3.mu.Lock()
	a3.archiveSlow = time.Second
	a3.mu.Unlock()
	_, err = c.archive().ListDeadLetters(ctx(t), connect.NewRequest(&rivorav1.ListDeadLettersRequest{}))
	wantErr(t, "a2 refuses the request while a3 would read", err, connect.CodeInvalidArgument, "filter: since is after until")
}

// Replay forwards every progress report of one agent's stream, after
// passing over a dead agent.
func TestOperatorReplayForwardsTheStream(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	a1, a2 := c.agent("a1"), c.agent("a2")
	a1.srv.Close()
	a2.mu.Lock()
	a2.replays = 4
	a2.mu.Unlock()
	stream, err := c.archive().Replay(ctx(t), connect.NewRequest(&rivorav1.ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}}))
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	var last *rivorav1.ReplayResponse
	for stream.Receive() {
		last = stream.Msg()
		got = append(got, last.GetReplayed())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[1 2 3 4]" || !last.GetDone() || last.GetTotal() != 4 {
		t.Errorf("reports replayed %v (last %v), want [1 2 3 4] ending done with total 4", got, last)
	}
}

// A client that stops a replay (Ctrl-C) ends the agent's stream too.
func TestOperatorReplayForwardsCancellation(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	a1 := c.agent("a1")
	a1.mu.Lock()
	a1.replays, a1.replayHold = 1, true
	a1.mu.Unlock()
	callCtx, cancel := context.WithCancel(ctx(t))
	stream, err := c.archive().Replay(callCtx, connect.NewRequest(&rivorav1.ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}}))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatalf("no first report: %v", stream.Err())
	}
	select {
	case <-a1.replayEnded:
		t.Fatal("the agent's replay ended before the client cancelled")
	default:
	}
	cancel()
	select {
	case <-a1.replayEnded:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent's replay still runs 10s after the client cancelled")
	}
}

// A replay through the control plane outlives no revocation of its
// token there: the stream ends unauthenticated, saying so, and so does
// the agent's stream it forwards.
func TestOperatorReplayEndsWithItsToken(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	a1 := c.agent("a1")
	a1.mu.Lock()
	a1.replays, a1.replayHold = 1, true
	a1.mu.Unlock()
	token, info, _, err := c.cp.createToken(&rivorav1.CreateTokenRequest{Name: "night-shift", Role: rivorav1.Role_ROLE_OPERATOR}, actor{name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	archive := rivorav1connect.NewArchiveServiceClient(http.DefaultClient, c.url, connect.WithInterceptors(auth.Bearer(token)))
	stream, err := archive.Replay(ctx(t), connect.NewRequest(&rivorav1.ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("no first report: %v", stream.Err())
	}
	if _, err := c.cp.revokeToken(info.GetId(), actor{name: "test"}); err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	wantErr(t, "the replay after its token was revoked", stream.Err(), connect.CodeUnauthenticated, "token "+info.GetId()+" (night-shift) was revoked")
	select {
	case <-a1.replayEnded:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent's replay still runs 10s after the token was revoked")
	}
}

// A follower answers nothing: only the leader knows the agents.
func TestOperatorBehindTheLeaderGate(t *testing.T) {
	c := startRouteCell(t, func() error {
		return errorf(ErrUnavailable, "not the leader; the leader is http://cp2:7300")
	})
	c.agent("a1", 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
	_, err := c.events().GetEvent(ctx(t), connect.NewRequest(&rivorav1.GetEventRequest{EventId: evID}))
	wantErr(t, "GetEvent on a follower", err, connect.CodeUnavailable, "the leader is http://cp2:7300")
	_, err = c.lanes().ListLanes(ctx(t), connect.NewRequest(&rivorav1.ListLanesRequest{DestinationId: "orders"}))
	wantErr(t, "ListLanes on a follower", err, connect.CodeUnavailable, "the leader is http://cp2:7300")
	stream, err := c.archive().Replay(ctx(t), connect.NewRequest(&rivorav1.ReplayRequest{}))
	if err == nil {
		for stream.Receive() {
		}
		err = stream.Err()
	}
	wantErr(t, "Replay on a follower", err, connect.CodeUnavailable, "the leader is http://cp2:7300")
	if calls := c.agents["a1"].callsOf(); len(calls) != 0 {
		t.Errorf("a follower called the agent: %v", calls)
	}
}

// The router calls agents with the caller's own token, so each agent
// checks it again; a call without a token reaches no agent.
func TestRouterForwardsTheCallersToken(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	dest := destinationIn(t, 3)
	a := c.agent("a1", 3)
	ctx := context.Background()
	if _, err := c.lanes().ListLanes(ctx, connect.NewRequest(&rivorav1.ListLanesRequest{DestinationId: dest})); err != nil {
		t.Fatalf("ListLanes: %v", err)
	}
	anon := rivorav1connect.NewLaneServiceClient(http.DefaultClient, c.url)
	if _, err := anon.ListLanes(ctx, connect.NewRequest(&rivorav1.ListLanesRequest{DestinationId: dest})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("ListLanes without a token: %v, want Unauthenticated", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.authorization) != 1 || a.authorization[0] != "Bearer "+c.token {
		t.Fatalf("the agent was called with Authorization %q, want once, the caller's token", a.authorization)
	}
}

// A dead event's dead letter still in its partition's ledger (the archive
// down) is known only to the partition's owner: the merged answer keeps
// its mark, though every agent reads the same history and the first
// agent's answer is the one taken.
func TestOperatorGetEventKeepsTheOwnersUnarchivedMark(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	a1, a2 := c.agent("a1"), c.agent("a2")
	dead := func(unarchived bool) *rivorav1.GetEventResponse {
		ev := event(evID, "orders", rivorav1.EventState_EVENT_STATE_DEAD, 2)
		ev.DeadLetterUnarchived = unarchived
		return ev
	}
	a1.set(evID, dead(false))
	a2.set(evID, dead(true)) // the owner
	resp, err := c.events().GetEvent(ctx(t), connect.NewRequest(&rivorav1.GetEventRequest{EventId: evID}))
	if err != nil || !resp.Msg.GetDeadLetterUnarchived() || resp.Msg.GetState() != rivorav1.EventState_EVENT_STATE_DEAD {
		t.Fatalf("dead on both, unarchived on a2: got %v, %v; want dead, dead_letter_unarchived", resp, err)
	}
	a2.set(evID, dead(false))
	if resp, err := c.events().GetEvent(ctx(t), connect.NewRequest(&rivorav1.GetEventRequest{EventId: evID})); err != nil || resp.Msg.GetDeadLetterUnarchived() {
		t.Fatalf("archived everywhere: got %v, %v; want no unarchived mark", resp, err)
	}
}

// tokenFor stores a token of role (for customers, when a customer token)
// in the cell's control plane and returns the client option that calls
// with it.
func (c *routeCell) tokenFor(role rivorav1.Role, customers ...string) connect.ClientOption {
	c.t.Helper()
	token, _, _, err := c.cp.createToken(&rivorav1.CreateTokenRequest{Name: "hide-test", Role: role, Customers: customers}, actor{name: "test"})
	if err != nil {
		c.t.Fatal(err)
	}
	return connect.WithInterceptors(auth.Bearer(token))
}

// When agents fail, the router's answer names them, their addresses and
// their errors (a bucket, an endpoint): an operator token reads all of
// it, a customer token (the customer portal's) only that the cell could
// not answer, with the same code, on unary calls and on a replay's
// stream alike.
func TestOperatorHidesAgentsFromCustomerTokens(t *testing.T) {
	const raw = "archive s3 bucket rivora-dlq at minio:9000: connection refused"
	for _, tc := range []struct {
		name     string
		role     rivorav1.Role
		customer bool
	}{{"operator", rivorav1.Role_ROLE_OPERATOR, false}, {"customer", rivorav1.Role_ROLE_CUSTOMER, true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := startRouteCell(t, func() error { return nil })
			a1 := c.agent("a1", 0, 1, 2, 3, 4, 5, 6, 7)
			a2 := c.agent("a2", 8, 9, 10, 11, 12, 13, 14, 15)
			a1.fail(connect.NewError(connect.CodeUnavailable, errors.New(raw)))
			a2.srv.Close()
			var customers []string
			if tc.customer {
				customers = []string{"c1"}
			}
			as := c.tokenFor(tc.role, customers...)
			events := rivorav1connect.NewEventServiceClient(http.DefaultClient, c.url, as)
			lanesClient := rivorav1connect.NewLaneServiceClient(http.DefaultClient, c.url, as)
			archive := rivorav1connect.NewArchiveServiceClient(http.DefaultClient, c.url, as)
			onA2 := destinationIn(t, 9)
			filter := &rivorav1.DeadLetterFilter{CustomerId: "c1"}
			replay := func() error {
				stream, err := archive.Replay(ctx(t), connect.NewRequest(&rivorav1.ReplayRequest{Filter: filter}))
				if err != nil {
					return err
				}
				defer stream.Close()
				for stream.Receive() {
				}
				return stream.Err()
			}
			calls := []struct {
				name   string
				call   func() error
				detail []string // what an operator is told
			}{
				{"ListEvents", func() error {
					_, err := events.ListEvents(ctx(t), connect.NewRequest(&rivorav1.ListEventsRequest{DestinationId: onA2, CustomerId: "c1"}))
					return err
				}, []string{"agent a2 at " + a2.srv.URL + " did not answer"}},
				{"ListLanes", func() error {
					_, err := lanesClient.ListLanes(ctx(t), connect.NewRequest(&rivorav1.ListLanesRequest{DestinationId: onA2, CustomerId: "c1"}))
					return err
				}, []string{"agent a2 at " + a2.srv.URL + " did not answer"}},
				{"GetEvent", func() error {
					_, err := events.GetEvent(ctx(t), connect.NewRequest(&rivorav1.GetEventRequest{EventId: evID}))
					return err
				}, []string{"no agent answered", "agent a1: unavailable: " + raw, "agent a2 at " + a2.srv.URL}},
				{"ListDeadLetters", func() error {
					_, err := archive.ListDeadLetters(ctx(t), connect.NewRequest(&rivorav1.ListDeadLettersRequest{Filter: filter}))
					return err
				}, []string{"no agent could read the archive (2 tried)", "agent a1: unavailable: " + raw, "agent a2"}},
				{"DeadLetterStats", func() error {
					_, err := archive.DeadLetterStats(ctx(t), connect.NewRequest(&rivorav1.DeadLetterStatsRequest{Filter: filter}))
					return err
				}, []string{"no agent could read the archive (2 tried)", "agent a1: unavailable: " + raw, "agent a2"}},
				{"GetDeadLetter", func() error {
					_, err := archive.GetDeadLetter(ctx(t), connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: evID}))
					return err
				}, []string{"no agent could read the archive (2 tried)", "agent a1: unavailable: " + raw, "agent a2"}},
				{"Replay", replay, []string{"no agent could read the archive (2 tried)", "agent a1: unavailable: " + raw, "agent a2"}},
			}
			for _, call := range calls {
				err := call.call()
				if !tc.customer {
					wantErr(t, call.name, err, connect.CodeUnavailable, call.detail...)
					continue
				}
				wantErr(t, call.name, err, connect.CodeUnavailable, hiddenAgentsMessage)
				for _, leak := range []string{"a1", "a2", a1.srv.URL, a2.srv.URL, "127.0.0.1", "minio", "rivora-dlq", "connection refused"} {
					if strings.Contains(err.Error(), leak) {
						t.Errorf("%s: a customer token is told %q, which names %q", call.name, err, leak)
					}
				}
			}
		})
	}
}

// The admin services ask every agent for a destination's pending events
// and health: with an agent down, an operator token is told which, at
// which address; a customer token asking about its own destination only
// that the cell could not answer.
func TestAdminHidesAgentsFromCustomerTokens(t *testing.T) {
	c := startRouteCell(t, func() error { return nil })
	mux := http.NewServeMux()
	c.cp.handle(mux, func() error { return nil })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	a1 := c.agent("a1", 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
	a1.srv.Close()
	if _, _, err := c.cp.createDestination(&rivorav1.CreateDestinationRequest{Id: "c1-orders", Url: "https://example.com/hook", OwnerCustomer: "c1"}, systemActor, everything); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		as     connect.ClientOption
		wanted []string
	}{
		{"operator", c.tokenFor(rivorav1.Role_ROLE_OPERATOR), []string{"agent a1: unavailable: ", strings.TrimPrefix(a1.srv.URL, "http://")}},
		{"customer", c.tokenFor(rivorav1.Role_ROLE_CUSTOMER, "c1"), []string{hiddenAgentsMessage}},
	} {
		admin := rivorav1connect.NewAdminServiceClient(http.DefaultClient, srv.URL, tc.as)
		_, getErr := admin.GetDestination(ctx(t), connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "c1-orders"}))
		_, healthErr := admin.GetDestinationHealth(ctx(t), connect.NewRequest(&rivorav1.GetDestinationHealthRequest{DestinationId: "c1-orders"}))
		for what, err := range map[string]error{"GetDestination": getErr, "GetDestinationHealth": healthErr} {
			wantErr(t, tc.name+" "+what, err, connect.CodeUnavailable, tc.wanted...)
			if tc.name == "customer" && (strings.Contains(err.Error(), "a1") || strings.Contains(err.Error(), "127.0.0.1")) {
				t.Errorf("%s: a customer token is told %q", what, err)
			}
		}
	}
}
