package cli

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// fakeDrain answers a limits change with drain and health with health.
type fakeDrain struct {
	rivorav1connect.UnimplementedAdminServiceHandler
	drain  *rivorav1.SetLimitsOverrideResponse
	mu     sync.Mutex
	health *rivorav1.DestinationHealth
}

func (f *fakeDrain) SetLimitsOverride(context.Context, *connect.Request[rivorav1.SetLimitsOverrideRequest]) (*connect.Response[rivorav1.SetLimitsOverrideResponse], error) {
	return connect.NewResponse(f.drain), nil
}

func (f *fakeDrain) GetDestinationHealth(context.Context, *connect.Request[rivorav1.GetDestinationHealthRequest]) (*connect.Response[rivorav1.GetDestinationHealthResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return connect.NewResponse(&rivorav1.GetDestinationHealthResponse{Destinations: []*rivorav1.DestinationHealth{f.health}}), nil
}

// A degraded destination keeps its cut rate under a raised limit: limits
// set says the drain time is at that rate, not at the new limit (a probe
// read "5 pending events drain in <1s at 40/s" at 0.5/s).
func TestLimitsSetDrainAtTheCutRate(t *testing.T) {
	f := &fakeDrain{
		drain: &rivorav1.SetLimitsOverrideResponse{DryRun: true, PendingEvents: 5, ProjectedDrainTime: durationpb.New(10 * time.Second), Limits: &rivorav1.GetLimitsResponse{
			DestinationId: "orders", Effective: &rivorav1.Limits{RatePerSecond: 40, Burst: 1, MaxAttempts: 5, MaxInFlight: 1, Window: durationpb.New(time.Hour), Timeout: durationpb.New(time.Second)},
		}},
		health: &rivorav1.DestinationHealth{DestinationId: "orders", State: "degraded", CurrentRate: 0.5, ConfiguredRate: 2},
	}
	_, h := rivorav1connect.NewAdminServiceHandler(f)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	r := mustSucceed(t, run(t, srv.URL, "", "limits", "set", "orders", "--rate", "40", "--dry-run"))
	if want := "5 pending events drain in 10s at 0.5/s (degraded: it keeps its cut rate under the new limit of 40/s"; !strings.Contains(r.stdout, want) {
		t.Errorf("limits set --dry-run printed:\n%s\nwant %q", r.stdout, want)
	}
	f.mu.Lock()
	f.health = &rivorav1.DestinationHealth{DestinationId: "orders", State: "healthy", CurrentRate: 2, ConfiguredRate: 2}
	f.mu.Unlock()
	r = mustSucceed(t, run(t, srv.URL, "", "limits", "set", "orders", "--rate", "40", "--dry-run"))
	if want := "5 pending events drain in 10s at 40/s\n"; !strings.Contains(r.stdout, want) {
		t.Errorf("limits set --dry-run of a healthy destination printed:\n%s\nwant %q", r.stdout, want)
	}
}
