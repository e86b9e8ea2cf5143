package controlplane_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/rig"
)

// An override has one expiry. A second `limits set` that adds a field to
// an override in force keeps its expiry (a probe found the 30-minute rate
// cut made permanent by a later burst change, with nothing in the audit);
// a ttl given with the change ends the earlier fields too, and the audit
// says so.
func TestAnOverrideChangeKeepsItsExpiry(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{NoAgent: true})
	ctx := context.Background()
	if _, err := d.Admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "beta", Url: "https://example.com/hook"})); err != nil {
		t.Fatal(err)
	}
	set := func(m *rivorav1.SetLimitsOverrideRequest) {
		t.Helper()
		m.DestinationId = "beta"
		if _, err := d.Admin.SetLimitsOverride(ctx, connect.NewRequest(m)); err != nil {
			t.Fatal(err)
		}
	}
	expiry := func(field string) time.Time {
		t.Helper()
		r, err := d.Admin.GetLimits(ctx, connect.NewRequest(&rivorav1.GetLimitsRequest{DestinationId: "beta"}))
		if err != nil {
			t.Fatal(err)
		}
		src := r.Msg.GetSources()[field]
		if src.GetSource() != "override" {
			t.Fatalf("%s: source %q, want override", field, src.GetSource())
		}
		if src.GetExpiresAt() == nil {
			return time.Time{}
		}
		return src.GetExpiresAt().AsTime()
	}
	lastAudit := func() string {
		t.Helper()
		r, err := d.Admin.ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		entries := r.Msg.GetEntries()
		return entries[len(entries)-1].GetDetail()
	}

	set(&rivorav1.SetLimitsOverrideRequest{RatePerSecond: proto.Float64(15), Ttl: durationpb.New(30 * time.Minute), Reason: "a"})
	first := expiry("rate_per_second")
	if first.IsZero() || time.Until(first) > 30*time.Minute {
		t.Fatalf("rate override expires at %v, want within 30m", first)
	}
	set(&rivorav1.SetLimitsOverrideRequest{Burst: proto.Int32(100), Reason: "b"})
	if got := expiry("rate_per_second"); !got.Equal(first) {
		t.Fatalf("after a burst change without --ttl, the rate override expires at %v, want %v kept", got, first)
	}
	if got := expiry("burst"); !got.Equal(first) {
		t.Fatalf("the burst override expires at %v, want the override's %v", got, first)
	}
	if a := lastAudit(); !strings.Contains(a, "expiry, kept") {
		t.Fatalf("audit of the second change: %q, want it to say the expiry was kept", a)
	}

	set(&rivorav1.SetLimitsOverrideRequest{MaxInFlight: proto.Int32(4), Ttl: durationpb.New(time.Minute), Reason: "c"})
	if got := expiry("rate_per_second"); !got.Before(first) {
		t.Fatalf("after a change with --ttl 1m, the rate override expires at %v, want the new, earlier expiry", got)
	}
	if a := lastAudit(); !strings.Contains(a, "ends the fields set earlier too") || !strings.Contains(a, "rate_per_second") {
		t.Fatalf("audit of the ttl change: %q, want it to name the earlier fields it now ends", a)
	}
}
