package cli

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// limitsAnswer answers SetLimitsOverride with pending events past the
// window the request sets.
type limitsAnswer struct {
	rivorav1connect.UnimplementedAdminServiceHandler
}

func (limitsAnswer) SetLimitsOverride(_ context.Context, req *connect.Request[rivorav1.SetLimitsOverrideRequest]) (*connect.Response[rivorav1.SetLimitsOverrideResponse], error) {
	l := &rivorav1.GetLimitsResponse{DestinationId: req.Msg.GetDestinationId(), Effective: &rivorav1.Limits{
		RatePerSecond: 10, Burst: 10, MaxAttempts: 8, Window: req.Msg.GetWindow(), Timeout: durationpb.New(10 * time.Second), MaxInFlight: 4,
	}}
	return connect.NewResponse(&rivorav1.SetLimitsOverrideResponse{
		Limits: l, DryRun: req.Msg.GetDryRun(), Version: 2, PendingEvents: 120,
		NoDrainReason: "the destination is parked: only probes go out until its partner answers", EventsPastWindow: 120,
	}), nil
}

// limits set --window under the age of the pending events warns, dry run
// or not, as --max-attempts does: they become dead letters (reason
// window), all at once on a parked destination.
func TestLimitsSetWindowWarnsOfEventsPastIt(t *testing.T) {
	_, h := rivorav1connect.NewAdminServiceHandler(limitsAnswer{})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	want := "120 pending events are already older than the 1m window (from acceptance, paused time left out): each becomes a dead letter (reason window)"
	for _, args := range [][]string{
		{"limits", "set", "p500", "--window", "1m", "--dry-run"},
		{"limits", "set", "p500", "--window", "1m", "--reason", "shed the backlog"},
	} {
		r := mustSucceed(t, run(t, srv.URL, "", args...))
		if !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "they all become dead letters at once") {
			t.Errorf("%v: no warning of the events past the window:\n%s", args, r.stdout)
		}
	}
}
