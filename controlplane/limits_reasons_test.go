package controlplane_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Each field of an override keeps its own reason (limits get showed the
// latest change's on every field: a rate cut for "slow drain INC-6" read
// "extend window INC-6"), and with no limits file, limits diff lists the
// runtime overrides only (it listed every setting a destination was made
// with as drift from the built-in defaults: 13 rows).
func TestOverrideReasonsPerFieldAndDiffWithoutAFile(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	ctx := context.Background()
	d.create(&rivorav1.CreateDestinationRequest{Id: "shared", Url: "https://example.com/hook", Secret: secret, Limits: &rivorav1.Limits{
		RatePerSecond: 7, Burst: 10, MaxInFlight: 4, Timeout: durationpb.New(5 * time.Second),
	}})
	for _, o := range []*rivorav1.SetLimitsOverrideRequest{
		{DestinationId: "shared", RatePerSecond: proto.Float64(2), Reason: "slow drain INC-6"},
		{DestinationId: "shared", Window: durationpb.New(96 * time.Hour), Reason: "extend window INC-6"},
	} {
		if _, err := d.Admin.SetLimitsOverride(ctx, connect.NewRequest(o)); err != nil {
			t.Fatal(err)
		}
	}
	lim, err := d.Admin.GetLimits(ctx, connect.NewRequest(&rivorav1.GetLimitsRequest{DestinationId: "shared"}))
	if err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]string{"rate_per_second": "slow drain INC-6", "window": "extend window INC-6"} {
		if src := lim.Msg.GetSources()[field]; src.GetSource() != "override" || src.GetReason() != want {
			t.Errorf("limits get: %s from %v, want the override's with reason %q", field, src, want)
		}
	}

	diff, err := d.Admin.DiffLimits(ctx, connect.NewRequest(&rivorav1.DiffLimitsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*rivorav1.LimitsDrift{}
	for _, dr := range diff.Msg.GetDrifts() {
		got[dr.GetDestinationId()+" "+dr.GetField()] = dr
	}
	if diff.Msg.GetLimitsFile() != "" || len(got) != 2 || got["shared rate_per_second"] == nil || got["shared window"] == nil {
		t.Fatalf("limits diff without a file: file %q, drifts %v; want only the override's rate_per_second and window of shared", diff.Msg.GetLimitsFile(), diff.Msg.GetDrifts())
	}
	// Beside each, what the destination has without the override.
	if r, w := got["shared rate_per_second"], got["shared window"]; r.GetFileValue() != "7" || r.GetEffectiveValue() != "2" || r.GetSource().GetReason() != "slow drain INC-6" ||
		w.GetFileValue() != "72h" || w.GetEffectiveValue() != "96h" || w.GetSource().GetReason() != "extend window INC-6" {
		t.Errorf("drifts %v and %v; want rate 7 → 2 (slow drain INC-6), window 72h → 96h (extend window INC-6)", r, w)
	}
}
