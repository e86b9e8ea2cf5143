package controlplane_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
)

// limits set's drain time (its --dry-run, the console's Check) is the
// health's at the new rate: pending events less those still arriving. An
// operator read "52 pending events drain in 26s at 2/s" from a dry run
// while destinations health said they never drain (4.13/s arriving).
func TestProjectedDrainCountsTheArrivals(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), true)
	// The partner holds the one attempt allowed out: the backlog stays.
	release := make(chan struct{})
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); partner.Close() })
	d.Create(&rivorav1.CreateDestinationRequest{Id: "shared", Url: partner.URL, Secret: secret, Limits: &rivorav1.Limits{
		RatePerSecond: 50, Burst: 50, MaxInFlight: 1, Timeout: durationpb.New(time.Minute),
	}})
	ctx := context.Background()
	const events = 90 // in the last minute: 1.5/s arriving
	for i := range events {
		if _, err := d.Ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{
			DestinationId: "shared", CustomerId: "acme", LaneKey: fmt.Sprint("u", i), Type: "t", Payload: []byte(`{}`),
		})); err != nil {
			t.Fatal(err)
		}
	}
	poll.True(t, "health counts every event pending and arrived", 10*time.Second, func() bool {
		resp, err := d.Admin.GetDestinationHealth(ctx, connect.NewRequest(&rivorav1.GetDestinationHealthRequest{DestinationId: "shared"}))
		if err != nil || len(resp.Msg.GetDestinations()) != 1 {
			return false
		}
		h := resp.Msg.GetDestinations()[0]
		return h.GetPendingEvents() == events && h.GetArrivalsLastMinute() == events
	})
	dryRun := func(rate float64) *rivorav1.SetLimitsOverrideResponse {
		t.Helper()
		resp, err := d.Admin.SetLimitsOverride(ctx, connect.NewRequest(&rivorav1.SetLimitsOverrideRequest{DestinationId: "shared", RatePerSecond: proto.Float64(rate), DryRun: true}))
		if err != nil {
			t.Fatalf("dry run at %g/s: %v", rate, err)
		}
		return resp.Msg
	}
	// 90 events at 4/s less the 1.5/s arriving: 36 s (not 22.5 s).
	if got := dryRun(4); got.GetPendingEvents() != events || got.GetArrivalsPerSecond() != 1.5 || got.GetProjectedDrainTime().AsDuration() != 36*time.Second {
		t.Errorf("dry run at 4/s: %d pending, %g/s arriving, drain %v; want %d, 1.5/s, 36s", got.GetPendingEvents(), got.GetArrivalsPerSecond(), got.GetProjectedDrainTime().AsDuration(), events)
	}
	// At 1/s, slower than the arrivals, they never drain (not 1m30s).
	if got := dryRun(1); got.GetProjectedDrainTime() != nil || got.GetNoDrainReason() != "" || got.GetArrivalsPerSecond() != 1.5 {
		t.Errorf("dry run at 1/s: drain %v, no-drain reason %q, %g/s arriving; want no drain time (the backlog grows), 1.5/s", got.GetProjectedDrainTime().AsDuration(), got.GetNoDrainReason(), got.GetArrivalsPerSecond())
	}
}
