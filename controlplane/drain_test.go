package controlplane

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func TestDrainTime(t *testing.T) {
	young, old := durationpb.New(20*time.Second), durationpb.New(5*time.Minute)
	for _, tc := range []struct {
		name  string
		h     *rivorav1.DestinationHealth
		rate  float64
		want  time.Duration
		never bool
	}{
		{name: "nothing pending", h: &rivorav1.DestinationHealth{}, want: 0},
		{name: "nothing pending, a rate", h: &rivorav1.DestinationHealth{}, rate: 5, want: 0},
		{name: "20 at 2/s", h: &rivorav1.DestinationHealth{PendingEvents: 20}, rate: 2, want: 10 * time.Second},
		{name: "20 at 8/s", h: &rivorav1.DestinationHealth{PendingEvents: 20}, rate: 8, want: 2500 * time.Millisecond},
		{name: "1 at 3/s", h: &rivorav1.DestinationHealth{PendingEvents: 1}, rate: 3, want: 333 * time.Millisecond},
		{name: "no rate", h: &rivorav1.DestinationHealth{PendingEvents: 10}, rate: 0, never: true},
		{name: "negative rate", h: &rivorav1.DestinationHealth{PendingEvents: 10}, rate: -1, never: true},
		{name: "over a century", h: &rivorav1.DestinationHealth{PendingEvents: 1_000_000}, rate: 1e-9, never: true},
		// A stream keeps coming while the backlog drains.
		{name: "old backlog, a stream slower", h: &rivorav1.DestinationHealth{PendingEvents: 20, ArrivalsLastMinute: 180, OldestPendingAge: old}, rate: 5, want: 10 * time.Second},
		// The cell probe's "7m15s" for a backlog that grew.
		{name: "old backlog, a stream faster", h: &rivorav1.DestinationHealth{PendingEvents: 1900, ArrivalsLastMinute: 450, OldestPendingAge: old}, rate: 5, never: true},
		{name: "old backlog, a stream as fast", h: &rivorav1.DestinationHealth{PendingEvents: 20, ArrivalsLastMinute: 300, OldestPendingAge: old}, rate: 5, never: true},
		// Arrivals are taken as a stream that goes on, even those of a
		// burst that has stopped (both pending and arriving): the figure
		// errs on the long side, as documented (a backlog's age does not
		// tell a stopped burst from a stream).
		{name: "burst after a resume", h: &rivorav1.DestinationHealth{PendingEvents: 45, ArrivalsLastMinute: 150, OldestPendingAge: young}, rate: 5, want: 18 * time.Second},
		{name: "held events at 0.5/s, arrivals faster", h: &rivorav1.DestinationHealth{PendingEvents: 27, ArrivalsLastMinute: 40, OldestPendingAge: young}, rate: 0.5, never: true},
		// What drains is what is delivered: a partner answering 503 to
		// every attempt never drains it (a probe read 12s).
		{name: "every attempt 5xx", h: &rivorav1.DestinationHealth{PendingEvents: 5, AttemptsLastMinute: 30, ServerErrorShare: 1, OldestPendingAge: young}, rate: 0.5, never: true},
		{name: "half delivered", h: &rivorav1.DestinationHealth{PendingEvents: 20, AttemptsLastMinute: 30, ThrottledShare: 0.2, ServerErrorShare: 0.2, NoAnswerShare: 0.1, OldestPendingAge: young}, rate: 4, want: 10 * time.Second},
		{name: "refused by the partner", h: &rivorav1.DestinationHealth{PendingEvents: 20, AttemptsLastMinute: 3, ClientErrorShare: 1.0 / 3, NoAnswerShare: 1.0 / 3, ThrottledShare: 1.0 / 3}, rate: 4, never: true},
	} {
		got := drainTime(tc.h, tc.rate)
		switch {
		case tc.never && got != nil:
			t.Errorf("%s: drainTime = %v; want unset (never drains)", tc.name, got.AsDuration())
		case !tc.never && (got == nil || got.AsDuration() != tc.want):
			t.Errorf("%s: drainTime = %v; want %v", tc.name, got.AsDuration(), tc.want)
		}
	}
}

// A degraded budget keeps its cut rate when its limit is raised (the
// budget's SetLimits): limits set projects at that rate, not the new
// limit (a probe read "5 pending events drain in <1s at 40/s" at 0.5/s).
func TestRunRate(t *testing.T) {
	for _, tc := range []struct {
		state         string
		current, rate float64
		want          float64
	}{
		{state: "healthy", current: 10, rate: 40, want: 40},
		{state: "healthy", current: 10, rate: 4, want: 4},
		{state: "degraded", current: 0.5, rate: 40, want: 0.5},
		{state: "degraded", current: 5, rate: 2, want: 2},
	} {
		if got := runRate(&rivorav1.DestinationHealth{State: tc.state, CurrentRate: tc.current}, tc.rate); got != tc.want {
			t.Errorf("%s at %g/s, limit %g/s: runs at %g/s, want %g/s", tc.state, tc.current, tc.rate, got, tc.want)
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
