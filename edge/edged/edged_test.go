package edged_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/edge"
	"github.com/rivora/rivora/edge/edged"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/ports"
	"github.com/rivora/rivora/testkit/syncbuf"
)

const (
	cellSecret     = "a-cell-token-of-at-least-32-characters"
	publisherToken = "publisher-token-for-acme"
)

// controlPlane stands in for the control plane's EdgeService (served
// over real HTTP): it sends one snapshot to each WatchEdge and records
// the reports. It checks the cell token as the real one does.
type controlPlane struct {
	rivorav1connect.UnimplementedEdgeServiceHandler
	config *rivorav1.WatchResponse
	// deltas are sent to the open WatchEdge after the snapshot.
	deltas chan *rivorav1.WatchResponse

	// keepalive, when set (nanoseconds), sends an empty message that
	// often on each WatchEdge, as the control plane does, unless silent
	// (a silent cut).
	keepalive atomic.Int64
	silent    atomic.Bool
	// refuse, when set, refuses every watch and report as the control
	// plane refuses an edge process whose name another one holds;
	// refused counts those refusals.
	refuse  atomic.Bool
	refused atomic.Int32

	mu      sync.Mutex
	reports []*rivorav1.EdgeBuffer
	watches int
}

func (c *controlPlane) authorized(h http.Header) error {
	if h.Get("Authorization") != "Bearer "+cellSecret {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("not the cell token"))
	}
	return nil
}

// nameTaken is, while refuse is set, the control plane's refusal of an
// edge process whose name another running one holds.
func (c *controlPlane) nameTaken(name string) error {
	if !c.refuse.Load() {
		return nil
	}
	c.refused.Add(1)
	err := errkind.Errorf(errkind.Exists, "edge name %q is in use by another running edge (a stand-in's refusal)", name)
	return errkind.AsConnect(errkind.WithInfo(err, errkind.EdgeNameInUseReason, map[string]string{"edge": name}))
}

func (c *controlPlane) WatchEdge(ctx context.Context, req *connect.Request[rivorav1.WatchEdgeRequest], stream *connect.ServerStream[rivorav1.WatchEdgeResponse]) error {
	if err := c.authorized(req.Header()); err != nil {
		return err
	}
	if err := c.nameTaken(req.Msg.GetEdgeName()); err != nil {
		return err
	}
	c.mu.Lock()
	c.watches++
	c.mu.Unlock()
	if err := stream.Send(&rivorav1.WatchEdgeResponse{Config: c.config}); err != nil {
		return err
	}
	var keepalive <-chan time.Time
	if every := time.Duration(c.keepalive.Load()); every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		keepalive = t.C
	}
	for {
		select {
		case delta := <-c.deltas:
			if err := stream.Send(&rivorav1.WatchEdgeResponse{Config: delta}); err != nil {
				return err
			}
		case <-keepalive:
			if c.silent.Load() {
				continue
			}
			if err := stream.Send(&rivorav1.WatchEdgeResponse{}); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

func (c *controlPlane) ReportEdge(_ context.Context, req *connect.Request[rivorav1.ReportEdgeRequest]) (*connect.Response[rivorav1.ReportEdgeResponse], error) {
	if err := c.authorized(req.Header()); err != nil {
		return nil, err
	}
	if err := c.nameTaken(req.Msg.GetEdgeName()); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.reports = append(c.reports, req.Msg.GetBuffer())
	c.mu.Unlock()
	return connect.NewResponse(&rivorav1.ReportEdgeResponse{}), nil
}

func (c *controlPlane) lastReport() *rivorav1.EdgeBuffer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.reports) == 0 {
		return nil
	}
	return c.reports[len(c.reports)-1]
}

// startControlPlane serves a control plane stand-in whose config knows
// destination "orders" (redacted: no secret) and a publisher token for
// customer acme.
func startControlPlane(t *testing.T) (*controlPlane, *httptest.Server) {
	t.Helper()
	cp := &controlPlane{deltas: make(chan *rivorav1.WatchResponse, 1), config: &rivorav1.WatchResponse{
		Version: 3, Snapshot: true, PartitionCount: 4,
		Destinations: []*rivorav1.Destination{{Id: "orders", Url: "https://partner.example/hook"}},
		Tokens: []*rivorav1.ApiToken{{
			Id: "tok_1", Name: "acme-publisher", Role: rivorav1.Role_ROLE_PUBLISHER, Customers: []string{"acme"}, Hash: auth.Hash(publisherToken),
		}},
		TokensChanged: true,
	}}
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewEdgeServiceHandler(cp))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return cp, srv
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := ports.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// runningEdge is an edge started by edged.New, run until stop, its API
// served over real HTTP.
type runningEdge struct {
	*edged.Edge
	api  *httptest.Server
	stop func()
}

// addSourceOnceReachable gives the cell's INGEST a source for edge name
// once the cell reaches the edge's buffer across the leaf connection, as
// the agent's keeper of sources does (edge.SetSources): the source listens
// where the buffer's consumer delivers, which names the buffer.
func addSourceOnceReachable(t *testing.T, js jetstream.JetStream, name string) {
	t.Helper()
	poll.True(t, "the cell reaches edge "+name+"'s buffer", 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := edge.DeliverSubject(ctx, js, name)
		return err == nil
	})
	if err := edge.AddSource(context.Background(), js, name); err != nil {
		t.Fatal(err)
	}
}

func startEdge(t *testing.T, cfg edged.Config) *runningEdge {
	t.Helper()
	return startEdgeWithKeys(t, cfg, auth.NewKeys(auth.CellTokenOf(cellSecret)))
}

func startEdgeWithKeys(t *testing.T, cfg edged.Config, keys *auth.Keys) *runningEdge {
	t.Helper()
	cfg.Keys = keys
	e, err := edged.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Run(ctx)
	}()
	mux := http.NewServeMux()
	e.Handle(mux)
	api := httptest.NewServer(mux)
	r := &runningEdge{Edge: e, api: api}
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			api.Close()
			cancel()
			<-done
		})
	}
	t.Cleanup(r.stop)
	return r
}

// publish publishes one event to orders for acme through the edge's API,
// with token.
func (r *runningEdge) publish(token, lane string, payload []byte) (*rivorav1.PublishResponse, error) {
	client := rivorav1connect.NewIngestServiceClient(http.DefaultClient, r.api.URL, connect.WithInterceptors(auth.Bearer(token)))
	resp, err := client.Publish(context.Background(), connect.NewRequest(&rivorav1.PublishRequest{
		DestinationId: "orders", CustomerId: "acme", LaneKey: lane, Type: "order.created", Payload: payload,
	}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

func startCell(t *testing.T, leaf, dataDir string) *natsd.Server {
	t.Helper()
	cell, err := natsd.Start(natsd.Config{
		Name: "cell", DataDir: dataDir, LeafListen: leaf, LeafPassword: agent.LeafPassword(auth.CellTokenOf(cellSecret)),
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cell.Shutdown)
	if _, err := ingest.New(context.Background(), cell.JetStream(), destinations.NewRegistry(), ingest.Config{}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	return cell
}

// An edge accepts while the cell is down, reports its buffer, forwards
// everything into the cell's INGEST once its source exists, and, restarted
// on its data dir with neither cell nor control plane reachable, accepts
// at once by the config it kept, authenticating publishers by its tokens.
func TestEdgeAcceptsForwardsAndRestartsCutOff(t *testing.T) {
	ctx := context.Background()
	cp, cpServer := startControlPlane(t)
	leaf, dataDir := freeAddr(t), t.TempDir()
	cfg := edged.Config{
		Name: "edge-1", DataDir: dataDir, CellLeaf: []string{"nats-leaf://" + leaf}, ControlPlanes: []string{cpServer.URL},
		MaxBuffer: 1 << 20, BufferMaxAge: time.Hour,
	}
	e := startEdge(t, cfg)
	poll.True(t, "the edge applied the control plane's config", 10*time.Second, func() bool { return e.Healthy() == nil })

	// The cell is down: every publish is acknowledged at the edge.
	ids := map[string]bool{}
	for i := range 5 {
		resp, err := e.publish(publisherToken, "user-1", []byte(`{"n":`+string(rune('0'+i))+`}`))
		if err != nil {
			t.Fatalf("publish %d with the cell down: %v", i, err)
		}
		ids[resp.GetEventId()] = true
	}
	if _, err := e.publish("not-a-token", "user-1", []byte(`{}`)); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("publish with an unknown token: %v, want unauthenticated", err)
	}
	poll.True(t, "the edge reported 5 buffered events, cut off from the cell", 10*time.Second, func() bool {
		r := cp.lastReport()
		return r != nil && r.GetBufferedEvents() == 5 && !r.GetCellConnected() && r.GetAppliedVersion() == 3 && r.GetMaxBufferBytes() == 1<<20
	})

	// The cell comes up and forwards the buffer through the edge's source.
	cell := startCell(t, leaf, t.TempDir())
	addSourceOnceReachable(t, cell.JetStream(), "edge-1")
	ingestStream, err := cell.JetStream().Stream(ctx, lanes.IngestStream)
	if err != nil {
		t.Fatal(err)
	}
	poll.True(t, "the cell took the 5 events and the edge's buffer emptied", 30*time.Second, func() bool {
		info, err := ingestStream.Info(ctx)
		st := e.Status()
		return err == nil && info.State.Msgs == 5 && st.CellConnected && st.Buffer.Events == 0 && st.Buffer.Forwarded() == 5
	})
	checkForwarded(t, ingestStream, "edge-1", ids)
	poll.True(t, "the edge reported itself connected, all forwarded", 10*time.Second, func() bool {
		r := cp.lastReport()
		return r.GetCellConnected() && r.GetBufferedEvents() == 0 && r.GetForwardedTotal() == 5
	})

	// Cut off from both: the edge restarts on its data dir and accepts
	// at once, by the config it kept.
	e.stop()
	cell.Shutdown()
	cpServer.Close()
	e = startEdge(t, cfg)
	if err := e.Healthy(); err != nil {
		t.Fatalf("restarted cut off, the edge is not healthy: %v", err)
	}
	if _, err := e.publish(publisherToken, "user-1", []byte(`{"after":"restart"}`)); err != nil {
		t.Fatalf("publish after a restart cut off: %v", err)
	}
	// Cut off from its control plane, the edge may lack a token created
	// since: it says so.
	if _, err := e.publish("not-a-token", "user-1", []byte(`{}`)); connect.CodeOf(err) != connect.CodeUnauthenticated ||
		!strings.Contains(err.Error(), "edge edge-1 has not reached its control plane since it started") {
		t.Fatalf("publish with an unknown token after the restart: %v, want unauthenticated, saying the edge has not reached its control plane", err)
	}
	poll.True(t, "the restarted edge's buffer holds the new event, 5 forwarded before", 5*time.Second, func() bool {
		st := e.Status()
		return st.Buffer.Events == 1 && st.Buffer.Forwarded() == 5 && !st.CellConnected
	})
}

// checkForwarded checks INGEST's messages: the events published (ids),
// on INGEST's subjects, each with the edge's header and its dedup id
// "edge:<event id>".
func checkForwarded(t *testing.T, s jetstream.Stream, name string, ids map[string]bool) {
	t.Helper()
	ctx := context.Background()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		id, ok := strings.CutPrefix(m.Header.Get(jetstream.MsgIDHeader), edge.MsgIDPrefix)
		if !ok || !ids[id] || m.Header.Get(edge.Header) != name || !strings.HasPrefix(m.Subject, "ingest.") {
			t.Fatalf("INGEST message %d: subject %s, headers %v; want an event of %s on ingest.> with its header and an edge: dedup id", seq, m.Subject, m.Header, name)
		}
	}
}

// A full buffer refuses (resource_exhausted) naming the buffer, how much
// is unforwarded and since when the cell is unreachable; so does a buffer
// whose oldest event is older than --buffer-max-age. Nothing is dropped.
func TestEdgeRefusesWhenFullOrOverAge(t *testing.T) {
	_, cpServer := startControlPlane(t)
	e := startEdge(t, edged.Config{
		Name: "edge-2", DataDir: t.TempDir(), CellLeaf: []string{"nats-leaf://" + freeAddr(t)}, ControlPlanes: []string{cpServer.URL},
		MaxBuffer: 64 << 10, BufferMaxAge: 3 * time.Second,
	})
	poll.True(t, "the edge applied the control plane's config", 10*time.Second, func() bool { return e.Healthy() == nil })
	big := []byte(`"` + strings.Repeat("x", 8<<10) + `"`)
	var err error
	accepted := 0
	for range 20 {
		if _, err = e.publish(publisherToken, "user-1", big); err != nil {
			break
		}
		accepted++
	}
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("publish into a full buffer: %v, want resource_exhausted", err)
	}
	t.Logf("full: %v", err)
	for _, want := range []string{"EDGE_BUFFER of edge edge-2 is full", "events (", "bytes) not yet forwarded", "unreachable since"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("full buffer's answer %q does not say %q", err, want)
		}
	}
	// Small events still fit, until the oldest is too old.
	poll.True(t, "a publish is refused once the oldest event is older than --buffer-max-age", 10*time.Second, func() bool {
		_, err = e.publish(publisherToken, "user-1", []byte(`{}`))
		if err == nil {
			accepted++
		}
		return connect.CodeOf(err) == connect.CodeResourceExhausted && strings.Contains(err.Error(), "older than --buffer-max-age")
	})
	t.Logf("over age: %v", err)
	// Told from a full buffer by its ErrorInfo, which names the edge, the
	// max age and the oldest event's age.
	if name, ok := sdk.EdgeBufferTooOld(err); !ok || name != "edge-2" {
		t.Fatalf("sdk.EdgeBufferTooOld of the over-age refusal: %q, %t", name, ok)
	}
	md, ok := errkind.Info(err, edge.BufferTooOldReason)
	if age, aerr := strconv.Atoi(md["oldest_unforwarded_seconds"]); !ok || md["buffer_max_age_seconds"] != "3" || aerr != nil || age < 3 {
		t.Fatalf("the over-age refusal's ErrorInfo metadata: %v (%t); want buffer_max_age_seconds 3, oldest_unforwarded_seconds at least 3", md, ok)
	}
	poll.True(t, "the buffer keeps every acknowledged event, over age", 5*time.Second, func() bool {
		return e.Status().Buffer.Events == uint64(accepted)
	})
}

// Under steady traffic on a healthy link, the cell confirms what it took
// only in bulk (every 1,000 events, or after a second with nothing to
// send), so the buffer holds events the cell already stored. They are not
// over age: an edge whose publishes never pause a second is not refused
// by --buffer-max-age while the cell takes everything.
func TestEdgeUnderSteadyTrafficIsNotOverAge(t *testing.T) {
	ctx := context.Background()
	_, cpServer := startControlPlane(t)
	leaf := freeAddr(t)
	cell := startCell(t, leaf, t.TempDir())
	const maxAge = 2 * time.Second
	e := startEdge(t, edged.Config{
		Name: "edge-steady", DataDir: t.TempDir(), CellLeaf: []string{"nats-leaf://" + leaf}, ControlPlanes: []string{cpServer.URL},
		MaxBuffer: 1 << 20, BufferMaxAge: maxAge,
	})
	poll.True(t, "the edge applied the control plane's config and reached the cell", 10*time.Second, func() bool {
		return e.Healthy() == nil && e.Status().CellConnected
	})
	addSourceOnceReachable(t, cell.JetStream(), "edge-steady")
	ingestStream, err := cell.JetStream().Stream(ctx, lanes.IngestStream)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for start := time.Now(); time.Since(start) < 3*maxAge; <-tick.C {
		resp, err := e.publish(publisherToken, "user-1", []byte(`{}`))
		if err != nil {
			t.Fatalf("publish %d, %s into steady traffic with the cell taking everything: %v (buffer %+v)", len(ids), time.Since(start).Round(time.Millisecond), err, e.Status().Buffer)
		}
		ids[resp.GetEventId()] = true
	}
	poll.True(t, "the cell took every event", 10*time.Second, func() bool {
		info, err := ingestStream.Info(ctx)
		return err == nil && info.State.Msgs == uint64(len(ids))
	})
	checkForwarded(t, ingestStream, "edge-steady", ids)
}

// An edge restarted during a cut still knows since when its link is
// down (kept in its data dir), and forgets it once the link is back.
func TestEdgeRestartedDuringACutKnowsSinceWhen(t *testing.T) {
	_, cpServer := startControlPlane(t)
	leaf := freeAddr(t)
	cellDir := t.TempDir()
	cell := startCell(t, leaf, cellDir)
	cfg := edged.Config{
		Name: "edge-lost", DataDir: t.TempDir(), CellLeaf: []string{"nats-leaf://" + leaf}, ControlPlanes: []string{cpServer.URL},
		MaxBuffer: 1 << 20, BufferMaxAge: time.Hour,
	}
	e := startEdge(t, cfg)
	poll.True(t, "the edge reached the cell", 10*time.Second, func() bool { return e.Status().CellConnected })
	cell.Shutdown()
	poll.True(t, "the edge saw its link go down", 30*time.Second, func() bool { return !e.Status().DisconnectedSince.IsZero() })
	lost := e.Status().DisconnectedSince

	e.stop()
	e = startEdge(t, cfg)
	if st := e.Status(); st.CellConnected || !st.DisconnectedSince.Equal(lost) {
		t.Fatalf("restarted during the cut: connected %t, down since %v; want down since %v", st.CellConnected, st.DisconnectedSince, lost)
	}

	startCell(t, leaf, cellDir)
	poll.True(t, "the edge reached the cell again, its cut forgotten", 30*time.Second, func() bool {
		st := e.Status()
		return st.CellConnected && st.DisconnectedSince.IsZero()
	})
	if _, err := os.Stat(filepath.Join(cfg.DataDir, edged.LinkLostFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s after the link came back: %v, want it gone", edged.LinkLostFile, err)
	}
}

// A delta from the control plane applies at once (a revoked token is
// refused) and is kept: restarted cut off, the edge still refuses it.
func TestEdgeAppliesAndKeepsDeltas(t *testing.T) {
	cp, cpServer := startControlPlane(t)
	cfg := edged.Config{
		Name: "edge-3", DataDir: t.TempDir(), CellLeaf: []string{"nats-leaf://" + freeAddr(t)}, ControlPlanes: []string{cpServer.URL},
		MaxBuffer: 1 << 20, BufferMaxAge: time.Hour,
	}
	e := startEdge(t, cfg)
	poll.True(t, "the edge applied the control plane's config", 10*time.Second, func() bool { return e.Healthy() == nil })
	if _, err := e.publish(publisherToken, "user-1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	cp.deltas <- &rivorav1.WatchResponse{Version: 4, Tokens: nil, TokensChanged: true}
	poll.True(t, "the revoked token is refused", 10*time.Second, func() bool {
		_, err := e.publish(publisherToken, "user-1", []byte(`{}`))
		return connect.CodeOf(err) == connect.CodeUnauthenticated
	})
	e.stop()
	cpServer.Close()
	e = startEdge(t, cfg)
	if _, err := e.publish(publisherToken, "user-1", []byte(`{}`)); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("restarted cut off, a token revoked before: %v, want unauthenticated", err)
	}
}

// A cut is silent: the edge's watch stays open for a while after its
// control plane's last message. A token the edge does not know is then
// refused with when it last heard from its control plane, at once, not
// only once the watch is taken for dead.
func TestEdgeSaysWhenItLastHeardFromItsControlPlane(t *testing.T) {
	cp, cpServer := startControlPlane(t)
	cfg := edged.Config{
		Name: "edge-4", DataDir: t.TempDir(), CellLeaf: []string{"nats-leaf://" + freeAddr(t)}, ControlPlanes: []string{cpServer.URL},
		MaxBuffer: 1 << 20, BufferMaxAge: time.Hour,
	}
	e := startEdge(t, cfg)
	poll.True(t, "the edge applied the control plane's config", 10*time.Second, func() bool { return e.Healthy() == nil })
	// The stand-in sends nothing after its snapshot: the watch stays
	// open and silent, as through a cut.
	var last error
	poll.True(t, "an unknown token is refused, saying when the edge last heard from its control plane", 10*time.Second, func() bool {
		_, last = e.publish("not-a-token", "user-1", []byte(`{}`))
		return connect.CodeOf(last) == connect.CodeUnauthenticated && strings.Contains(last.Error(), "edge edge-4 has not heard from its control plane since")
	})
	cp.mu.Lock()
	watches := cp.watches
	cp.mu.Unlock()
	if watches != 1 {
		t.Fatalf("%d watches, want the first still open (the note must not wait for the watch to be taken for dead): %v", watches, last)
	}
}

// The edge's /metrics has its own series, ingest's and the process's,
// not the cell's (lanes, dead letters, history, edge sources), which the
// packages it links register in the default registry and which are
// always 0 at an edge.
func TestEdgeExportsOnlyItsOwnMetrics(t *testing.T) {
	_, cpServer := startControlPlane(t)
	e := startEdge(t, edged.Config{
		Name: "edge-5", DataDir: t.TempDir(), CellLeaf: []string{"nats-leaf://" + freeAddr(t)}, ControlPlanes: []string{cpServer.URL},
		MaxBuffer: 1 << 20, BufferMaxAge: time.Hour,
	})
	poll.True(t, "the edge applied the control plane's config", 10*time.Second, func() bool { return e.Healthy() == nil })
	if _, err := e.publish(publisherToken, "user-1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	e.Metrics().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	exported := map[string]bool{}
	for line := range strings.Lines(rec.Body.String()) {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			exported[strings.Fields(name)[0]] = true
		}
	}
	for _, want := range []string{"rivora_edge_buffered_events", "rivora_edge_cell_connected", "rivora_edge_forwarded_total", "rivora_ingest_events_total", "rivora_store_syncs_total", "go_goroutines", "process_cpu_seconds_total"} {
		if !exported[want] {
			t.Errorf("the edge does not export %s", want)
		}
	}
	for _, cells := range []string{"rivora_edge_sources", "rivora_edge_reforwarded_events_total", "rivora_lanes_moved_events_total", "rivora_deadletters_unarchived", "rivora_history_record_errors_total"} {
		if exported[cells] {
			t.Errorf("the edge exports the cell's %s", cells)
		}
	}
}

// A --cell-leaf that is not the cell's leaf port (here an HTTP port) is
// said at once, with the NATS server's reason, in the edge's log and its
// status: it was said by no one for 30 s, then only as a guess.
func TestEdgeSaysWhyItCannotReachTheCell(t *testing.T) {
	_, cpServer := startControlPlane(t)
	httpPort := strings.TrimPrefix(cpServer.URL, "http://")
	var logs syncbuf.Buffer
	e, err := edged.New(context.Background(), edged.Config{
		Name: "edge-6", DataDir: t.TempDir(), CellLeaf: []string{"nats-leaf://" + httpPort}, ControlPlanes: []string{cpServer.URL},
		MaxBuffer: 1 << 20, BufferMaxAge: time.Hour, Keys: auth.NewKeys(auth.CellTokenOf(cellSecret)),
	}, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	poll.True(t, "the edge logged why its leaf connection fails", 15*time.Second, func() bool {
		return strings.Contains(logs.String(), "cannot connect to the cell's leaf port") && strings.Contains(logs.String(), httpPort)
	})
	if st := e.Status(); st.CellConnected || !strings.Contains(st.LinkError, httpPort) {
		t.Fatalf("status: connected %t, link error %q; want down, naming %s", st.CellConnected, st.LinkError, httpPort)
	}
	t.Log(e.Status().LinkError)
}
