package gone

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/agent/upstream"
	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/poll"
)

// flakyControlPlane answers ReportGone Unavailable fail times, then with
// version.
type flakyControlPlane struct {
	rivorav1connect.UnimplementedAgentServiceHandler
	fail    int
	version uint64

	mu    sync.Mutex
	calls []*rivorav1.ReportGoneRequest
}

func (f *flakyControlPlane) ReportGone(_ context.Context, req *connect.Request[rivorav1.ReportGoneRequest]) (*connect.Response[rivorav1.ReportGoneResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, req.Msg)
	if len(f.calls) <= f.fail {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("electing a leader"))
	}
	return connect.NewResponse(&rivorav1.ReportGoneResponse{Disabled: true, Version: f.version}), nil
}

func (f *flakyControlPlane) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// A 410 report reaches a control plane that refuses it at first: it is
// sent again until answered, once per destination however many 410s
// arrive, and the local hold lasts until the agent applied the version
// the answer names.
func TestGoneReportRetriedUntilAnswered(t *testing.T) {
	cp := &flakyControlPlane{fail: 2, version: 7}
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewAgentServiceHandler(cp))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	registry := destinations.NewRegistry()
	var applied atomic.Uint64
	g := New(Config{
		Name: "a1", Scheduler: scheduler.New(clock.Real{}), Upstream: upstream.New(srv.URL, auth.NewKeys(auth.CellToken{}), nil, nil),
		Destination: func(id string) (int, bool, bool) {
			d, ok := registry.Get(id)
			if !ok {
				return 0, false, false
			}
			return 0, d.Paused, true
		},
		Applied: applied.Load, Log: slog.New(slog.DiscardHandler),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	report := &rivorav1.ReportGoneRequest{AgentName: "a1", DestinationId: "orders", EventId: "ev-1", Status: 410, At: timestamppb.Now()}
	if !g.hold(0, report) {
		t.Fatal("first 410: not held")
	}
	if g.hold(0, report) {
		t.Fatal("second 410 while held: held again (a second report)")
	}
	poll.True(t, "report answered after two refusals", 10*time.Second, func() bool {
		return len(g.unanswered()) == 0
	})
	if n := cp.callCount(); n != 3 {
		t.Fatalf("control plane got %d reports, want 3 (two refused, one answered)", n)
	}
	g.Release()
	if !g.isHeld("orders") {
		t.Fatal("hold released before the agent applied version 7")
	}
	applied.Store(7)
	g.Release()
	if g.isHeld("orders") {
		t.Fatal("hold kept after the agent applied version 7")
	}
}

func (g *Holds) isHeld(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held[id] != nil
}
