package cli

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// fakeEdges serves AdminService's edge RPCs from two edges: lyon,
// connected with 1,234 unforwarded events (the oldest 64.5s old when
// answered), and oslo,
// cut off from the cell and never reported since the control plane
// started. It records removals.
type fakeEdges struct {
	rivorav1connect.UnimplementedAdminServiceHandler
	mu      sync.Mutex
	edges   []*rivorav1.EdgeStatus
	removed []*rivorav1.RemoveEdgeRequest
}

func startFakeEdges(t *testing.T) (*fakeEdges, string) {
	f := &fakeEdges{edges: []*rivorav1.EdgeStatus{
		{Name: "lyon", Connected: true, Watching: true, LastSeen: fixedTime, RegisteredAt: fixedTime, Buffer: &rivorav1.EdgeBuffer{
			CellConnected: true, BufferedEvents: 1234, BufferedBytes: 3 << 20, OldestBuffered: nil, // 64.5s before each answer
			ForwardedTotal: 99, MaxBufferBytes: 1 << 30, BufferMaxAge: durationpb.New(72 * time.Hour),
		}},
		{Name: "oslo", Watching: false, RegisteredAt: fixedTime, Buffer: &rivorav1.EdgeBuffer{DisconnectedSince: fixedTime}},
	}}
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewAdminServiceHandler(f))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

// ageLocked makes lyon's oldest event 64.5s old now.
func (f *fakeEdges) ageLocked() {
	f.edges[0].Buffer.OldestBuffered = timestamppb.New(time.Now().Add(-64500 * time.Millisecond))
}

func (f *fakeEdges) ListEdges(context.Context, *connect.Request[rivorav1.ListEdgesRequest]) (*connect.Response[rivorav1.ListEdgesResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ageLocked()
	return connect.NewResponse(&rivorav1.ListEdgesResponse{Edges: f.edges}), nil
}

func (f *fakeEdges) GetEdge(_ context.Context, req *connect.Request[rivorav1.GetEdgeRequest]) (*connect.Response[rivorav1.GetEdgeResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ageLocked()
	for _, e := range f.edges {
		if e.GetName() == req.Msg.GetName() {
			return connect.NewResponse(&rivorav1.GetEdgeResponse{Edge: e}), nil
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, errors.New(`edge "`+req.Msg.GetName()+`" is not registered; see `+"`rivoractl edges list`"))
}

func (f *fakeEdges) RemoveEdge(_ context.Context, req *connect.Request[rivorav1.RemoveEdgeRequest]) (*connect.Response[rivorav1.RemoveEdgeResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, req.Msg)
	if req.Msg.GetName() == "lyon" && !req.Msg.GetForce() {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("edge lyon reported 1234 unforwarded events (3145728 bytes) in its buffer"))
	}
	return connect.NewResponse(&rivorav1.RemoveEdgeResponse{}), nil
}

func TestEdgesListJSON(t *testing.T) {
	_, srv := startFakeEdges(t)
	r := mustSucceed(t, run(t, srv, "", "edges", "list", "-o", "json"))
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("edges list -o json is not a JSON array: %v\n%s", err, r.stdout)
	}
	if len(got) != 2 {
		t.Fatalf("%d edges, want 2:\n%s", len(got), r.stdout)
	}
	lyon, oslo := got[0], got[1]
	want := map[string]any{
		"name": "lyon", "connected": true, "watching": true, "lastSeen": "2026-03-01T12:00:00Z", "registeredAt": "2026-03-01T12:00:00Z",
		"bufferedEvents": 1234.0, "bufferedBytes": float64(3 << 20), "oldestBufferedAge": "1m4s", "forwardedTotal": 99.0,
		"maxBufferBytes": float64(1 << 30), "bufferMaxAge": "72h",
	}
	for k, v := range want {
		if lyon[k] != v {
			t.Errorf("lyon %s = %v (%T), want %v", k, lyon[k], lyon[k], v)
		}
	}
	if len(lyon) != len(want) {
		t.Errorf("lyon has keys %v, want exactly %v", lyon, want)
	}
	for k, v := range map[string]any{"name": "oslo", "connected": false, "lastSeen": nil, "bufferedEvents": 0.0, "bufferedBytes": 0.0, "oldestBufferedAge": "0s", "forwardedTotal": 0.0, "disconnectedSince": "2026-03-01T12:00:00Z"} {
		if got, ok := oslo[k]; !ok || got != v {
			t.Errorf("oslo %s = %v (present %v), want %v", k, got, ok, v)
		}
	}
}

func TestEdgesListTable(t *testing.T) {
	_, srv := startFakeEdges(t)
	r := mustSucceed(t, run(t, srv, "", "edges", "list"))
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and 2 rows:\n%s", r.stdout)
	}
	for _, col := range []string{"NAME", "CONNECTED", "WATCHING", "LAST SEEN", "BUFFERED", "BYTES", "OLDEST", "FORWARDED"} {
		if !strings.Contains(lines[0], col) {
			t.Errorf("header %q lacks %s", lines[0], col)
		}
	}
	for _, s := range []string{"lyon", "true", "2026-03-01T12:00:00.000Z", "1234", "3.0 MiB", "1m4s", "99"} {
		if !strings.Contains(lines[1], s) {
			t.Errorf("lyon's row %q lacks %q", lines[1], s)
		}
	}
	for _, s := range []string{"oslo", "false (link to the cell down since 2026-03-01T12:00:00.000Z)", " - ", "0 B", "0s"} {
		if !strings.Contains(lines[2], s) {
			t.Errorf("oslo's row %q lacks %q", lines[2], s)
		}
	}
}

func TestEdgesGet(t *testing.T) {
	f, srv := startFakeEdges(t)
	r := mustSucceed(t, run(t, srv, "", "edges", "get", "lyon"))
	for _, s := range []string{"NAME", "lyon", "CONNECTED", "true", "BUFFERED", "1234 events, 3.0 MiB", "OLDEST", "1m4s", "FORWARDED", "99", "MAX BUFFER", "1.0 GiB, 72h"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("edges get lyon lacks %q:\n%s", s, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "ACCEPTING") || !strings.Contains(r.stdout, "yes") {
		t.Errorf("edges get lyon does not say it accepts:\n%s", r.stdout)
	}
	// Full, by its last report: it refuses publishes, and says so.
	f.mu.Lock()
	f.edges[0].Buffer.BufferedBytes = f.edges[0].Buffer.MaxBufferBytes
	f.mu.Unlock()
	r = mustSucceed(t, run(t, srv, "", "edges", "get", "lyon"))
	if !strings.Contains(r.stdout, "no: its buffer is full (1.0 GiB of 1.0 GiB)") {
		t.Errorf("edges get of a full edge:\n%s", r.stdout)
	}
	// Over --buffer-max-age (its oldest is 64.5s old).
	f.mu.Lock()
	f.edges[0].Buffer.BufferedBytes, f.edges[0].Buffer.BufferMaxAge = 3<<20, durationpb.New(time.Minute)
	f.mu.Unlock()
	r = mustSucceed(t, run(t, srv, "", "edges", "get", "lyon"))
	if !strings.Contains(r.stdout, "no: its oldest unforwarded event is older than --buffer-max-age 1m") {
		t.Errorf("edges get of an edge over its max age:\n%s", r.stdout)
	}
	r = mustSucceed(t, run(t, srv, "", "edges", "get", "oslo", "-o", "json"))
	var got map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got["name"] != "oslo" || got["oldestBufferedAge"] != "0s" {
		t.Fatalf("edges get oslo -o json: %v, %v\n%s", got, err, r.stdout)
	}
	assertFailure(t, run(t, srv, "", "edges", "get", "paris"), exitError, `edge "paris" is not registered`)
	assertFailure(t, run(t, srv, "", "edges", "get"), exitUsage, "one edge NAME")
}

func TestEdgesRemove(t *testing.T) {
	f, srv := startFakeEdges(t)
	assertFailure(t, run(t, srv, "", "edges", "remove", "lyon"), exitError, "1234 unforwarded events")
	r := run(t, srv, "", "edges", "remove", "lyon")
	if !strings.Contains(r.stderr, "--force") {
		t.Errorf("a refused removal does not say --force: %q", r.stderr)
	}
	r = mustSucceed(t, run(t, srv, "", "edges", "remove", "lyon", "--force"))
	// lyon runs (its config stream is open): it registers again at once.
	if !strings.Contains(r.stdout, "Removed edge lyon, but it is running") || !strings.Contains(r.stdout, "Stop the edge") {
		t.Errorf("stdout %q, want it to say lyon is running and registers again", r.stdout)
	}
	r = mustSucceed(t, run(t, srv, "", "edges", "rm", "--force", "oslo"))
	if !strings.Contains(r.stdout, "Removed edge oslo; the cell no longer forwards its buffer.") {
		t.Errorf("stdout %q, want oslo (not running) removed plainly", r.stdout)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.removed) != 4 || !f.removed[2].GetForce() || f.removed[3].GetName() != "oslo" || !f.removed[3].GetForce() {
		t.Fatalf("removals sent: %v", f.removed)
	}
}

// An edge whose reports stopped: its buffer's figures are the last
// report's, and list, get and JSON say they are stale; a connected
// edge's are not marked.
func TestEdgesStaleReport(t *testing.T) {
	f, srv := startFakeEdges(t)
	f.mu.Lock()
	f.edges[1] = &rivorav1.EdgeStatus{Name: "oslo", Watching: false, RegisteredAt: fixedTime, LastSeen: timestamppb.New(time.Now().Add(-38 * time.Second)),
		Buffer: &rivorav1.EdgeBuffer{CellConnected: true, BufferedEvents: 50, BufferedBytes: 2048, ForwardedTotal: 7}, ReportStale: true}
	f.mu.Unlock()
	r := mustSucceed(t, run(t, srv, "", "edges", "list"))
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and 2 rows:\n%s", r.stdout)
	}
	if strings.Contains(lines[1], "stale") {
		t.Errorf("connected lyon's row is marked stale: %q", lines[1])
	}
	for _, s := range []string{"unknown (no report for 38s", "50 (stale)", "2.0 KiB (stale)", "0s (stale)", "7 (stale)"} {
		if !strings.Contains(lines[2], s) {
			t.Errorf("oslo's row %q lacks %q", lines[2], s)
		}
	}
	r = mustSucceed(t, run(t, srv, "", "edges", "get", "oslo"))
	if !strings.Contains(r.stdout, "50 events, 2.0 KiB (stale: as of its last report, ") || !strings.Contains(r.stdout, "38s ago)") {
		t.Errorf("edges get oslo does not say its figures are stale:\n%s", r.stdout)
	}
	r = mustSucceed(t, run(t, srv, "", "edges", "list", "-o", "json"))
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got[0]["stale"]; ok || got[1]["stale"] != true {
		t.Errorf("stale: lyon %v, oslo %v; want lyon's absent, oslo's true", got[0]["stale"], got[1]["stale"])
	}
}

// An edge whose link to the cell is down says why, as its NATS server said
// it, in CONNECTED: a link that never came up, or one lost after it was.
func TestEdgeLinkErrorShown(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)
	s := &rivorav1.EdgeStatus{Name: "oslo", Buffer: &rivorav1.EdgeBuffer{LinkError: "leaf connection 127.0.0.1:7422 closed before it was up: Read Error"}}
	if got := connectedText(s, now); got != "false (link to the cell down: leaf connection 127.0.0.1:7422 closed before it was up: Read Error)" {
		t.Fatalf("CONNECTED %q", got)
	}
	s = &rivorav1.EdgeStatus{Name: "oslo", Buffer: &rivorav1.EdgeBuffer{
		LinkError:         "leaf connection 127.0.0.1:7422 lost after it was up: Stale Connection",
		DisconnectedSince: timestamppb.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)),
	}}
	if got := connectedText(s, now); got != "false (link to the cell down since 2026-03-01T12:00:00.000Z: leaf connection 127.0.0.1:7422 lost after it was up: Stale Connection)" {
		t.Fatalf("CONNECTED %q", got)
	}
}

// An edge that has not reported since the control plane started (a
// restart, a new leader): its buffer is unknown, and list, get and JSON
// say so rather than show an empty buffer (an operator removing it
// would lose what it holds).
func TestEdgesUnknownBuffer(t *testing.T) {
	f, srv := startFakeEdges(t)
	f.mu.Lock()
	f.edges = append(f.edges, &rivorav1.EdgeStatus{Name: "nice", RegisteredAt: fixedTime})
	f.mu.Unlock()
	r := mustSucceed(t, run(t, srv, "", "edges", "get", "nice"))
	for _, s := range []string{"BUFFERED", "unknown: no report since the control plane started", "LAST SEEN", "- (not since the control plane started)", "OLDEST", "FORWARDED", "false (no report yet)"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("edges get nice lacks %q:\n%s", s, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "0 events") || strings.Contains(r.stdout, "0 B") {
		t.Errorf("edges get nice shows an empty buffer it knows nothing of:\n%s", r.stdout)
	}
	r = mustSucceed(t, run(t, srv, "", "edges", "list"))
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || !strings.Contains(lines[3], "nice") || !strings.Contains(lines[3], "unknown") || strings.Contains(lines[3], "0 B") {
		t.Fatalf("edges list: nice's row should say its buffer is unknown:\n%s", r.stdout)
	}
	r = mustSucceed(t, run(t, srv, "", "edges", "list", "-o", "json"))
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 3 {
		t.Fatalf("edges list -o json: %v\n%s", err, r.stdout)
	}
	for _, k := range []string{"bufferedEvents", "bufferedBytes", "oldestBufferedAge", "forwardedTotal", "maxBufferBytes"} {
		if v, ok := got[2][k]; !ok || v != nil {
			t.Errorf("nice's %s = %v (present %v), want null", k, v, ok)
		}
	}
}
