package controlplane

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestDrainTime(t *testing.T) {
	for _, tc := range []struct {
		pending  int64
		rate     float64
		arrivals float64
		want     time.Duration
		never    bool
	}{
		{pending: 0, rate: 0, want: 0},
		{pending: 0, rate: 5, want: 0},
		{pending: 20, rate: 2, want: 10 * time.Second},
		{pending: 20, rate: 8, want: 2500 * time.Millisecond},
		{pending: 1, rate: 3, want: 333 * time.Millisecond},
		{pending: 10, rate: 0, never: true},
		{pending: 10, rate: -1, never: true},
		{pending: 1_000_000, rate: 1e-9, never: true}, // over a century
		{pending: 20, rate: 5, arrivals: 3, want: 10 * time.Second},
		{pending: 1900, rate: 5, arrivals: 7.5, never: true}, // the backlog grows (cell probe: "7m15s")
		{pending: 20, rate: 5, arrivals: 5, never: true},
	} {
		got := drainTime(tc.pending, tc.rate, tc.arrivals)
		switch {
		case tc.never && got != nil:
			t.Errorf("drainTime(%d, %v) = %v; want unset (never drains)", tc.pending, tc.rate, got.AsDuration())
		case !tc.never && (got == nil || got.AsDuration() != tc.want):
			t.Errorf("drainTime(%d, %v) = %v; want %v", tc.pending, tc.rate, got, tc.want)
		}
	}
}

// A partner's Retry-After holds every attempt until it ends: the drain
// time counts what is left of it (a probe saw "<1s" under a 24 h hold).
func TestHeldDrainTime(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	drain := durationpb.New(8 * time.Second)
	if got := heldDrainTime(drain, timestamppb.New(now.Add(time.Hour)), now); got.AsDuration() != time.Hour+8*time.Second {
		t.Errorf("held for an hour: %v, want 1h0m8s", got.AsDuration())
	}
	if got := heldDrainTime(drain, timestamppb.New(now.Add(-time.Second)), now); got.AsDuration() != 8*time.Second {
		t.Errorf("a hold that ended: %v, want 8s", got.AsDuration())
	}
	if got := heldDrainTime(drain, nil, now); got.AsDuration() != 8*time.Second {
		t.Errorf("no hold: %v, want 8s", got.AsDuration())
	}
	if got := heldDrainTime(nil, timestamppb.New(now.Add(time.Hour)), now); got != nil {
		t.Errorf("never drains, held: %v, want unset", got)
	}
	if got := heldDrainTime(durationpb.New(0), timestamppb.New(now.Add(time.Hour)), now); got.AsDuration() != 0 {
		t.Errorf("nothing pending, held: %v, want 0", got.AsDuration())
	}
}
