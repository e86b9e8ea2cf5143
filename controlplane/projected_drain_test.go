package controlplane_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
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

// A destination disabled by its partner's 410 Gone does not drain: limits
// set says it is disabled, not paused.
func TestProjectedDrainOfADisabledDestination(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), true)
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGone) }))
	t.Cleanup(partner.Close)
	d.Create(&rivorav1.CreateDestinationRequest{Id: "gone", Url: partner.URL, Secret: secret, Limits: &rivorav1.Limits{RatePerSecond: 1, Burst: 1, MaxInFlight: 1}})
	ctx := context.Background()
	for i := range 3 {
		if _, err := d.Ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{
			DestinationId: "gone", CustomerId: "acme", LaneKey: "u", Type: "t", Payload: []byte(fmt.Sprint(`{"n":`, i, `}`)),
		})); err != nil {
			t.Fatal(err)
		}
	}
	var got *rivorav1.SetLimitsOverrideResponse
	poll.True(t, "the destination disabled, with events pending", 20*time.Second, func() bool {
		resp, err := d.Admin.SetLimitsOverride(ctx, connect.NewRequest(&rivorav1.SetLimitsOverrideRequest{DestinationId: "gone", RatePerSecond: proto.Float64(40), DryRun: true}))
		if err != nil {
			return false
		}
		got = resp.Msg
		return got.GetPendingEvents() > 0 && got.GetNoDrainReason() != ""
	})
	if !strings.Contains(got.GetNoDrainReason(), "disabled") || strings.Contains(got.GetNoDrainReason(), "paused") {
		t.Errorf("no-drain reason %q; want that the destination is disabled", got.GetNoDrainReason())
	}
}

// What drains a backlog is what the partner accepts: with a partner
// answering 503 to every attempt, health has no drain time and limits set
// says nothing drains whatever the rate (a probe read "DRAIN TIME 12s",
// and "5 pending events drain in <1s at 40/s").
func TestNoDrainWhileNothingIsDelivered(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), true)
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	t.Cleanup(partner.Close)
	d.Create(&rivorav1.CreateDestinationRequest{Id: "failing", Url: partner.URL, Secret: secret, Limits: &rivorav1.Limits{RatePerSecond: 2, Burst: 2, MaxInFlight: 2}})
	ctx := context.Background()
	for i := range 5 {
		if _, err := d.Ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{
			DestinationId: "failing", CustomerId: "acme", LaneKey: fmt.Sprint("u", i), Type: "t", Payload: []byte(`{}`),
		})); err != nil {
			t.Fatal(err)
		}
	}
	var h *rivorav1.DestinationHealth
	poll.True(t, "the destination degraded by 5xx answers, with events pending", 15*time.Second, func() bool {
		resp, err := d.Admin.GetDestinationHealth(ctx, connect.NewRequest(&rivorav1.GetDestinationHealthRequest{DestinationId: "failing"}))
		if err != nil || len(resp.Msg.GetDestinations()) != 1 {
			return false
		}
		h = resp.Msg.GetDestinations()[0]
		return h.GetState() == "degraded" && h.GetPendingEvents() == 5 && h.GetAttemptsLastMinute() > 0 && h.GetServerErrorShare() == 1
	})
	if h.GetDrainTime() != nil {
		t.Errorf("health: drain time %v with nothing delivered; want none (never drains)", h.GetDrainTime().AsDuration())
	}
	resp, err := d.Admin.SetLimitsOverride(ctx, connect.NewRequest(&rivorav1.SetLimitsOverrideRequest{DestinationId: "failing", RatePerSecond: proto.Float64(40), DryRun: true}))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Msg; got.GetProjectedDrainTime() != nil || !strings.Contains(got.GetNoDrainReason(), "none of the last minute's") {
		t.Errorf("dry run at 40/s: drain %v, no-drain reason %q; want none, as nothing was delivered", got.GetProjectedDrainTime().AsDuration(), got.GetNoDrainReason())
	}
}
