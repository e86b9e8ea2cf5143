package api

import (
	"testing"
	"time"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/agent/scheduler"
)

// What `rivoractl events get` says about a pending event.
func TestWaitingReason(t *testing.T) {
	parkedAt := time.Date(2026, 12, 1, 9, 12, 3, 0, time.UTC)
	failed := scheduler.Head{Attempts: 2, LastStatus: 503, LastAttemptAt: parkedAt, NotBefore: parkedAt.Add(time.Second), HeldByDestination: true}
	later := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	for _, c := range []struct {
		name string
		loc  scheduler.Location
		want string
	}{
		{"parked", scheduler.Location{Head: failed, Destination: scheduler.DestinationState{Health: budget.Parked, Since: parkedAt}},
			"held: destination parked since 2026-12-01T09:12:03Z; 2 of 8 attempts used"},
		{"degraded", scheduler.Location{Head: failed, Destination: scheduler.DestinationState{Health: budget.Degraded, Since: parkedAt}},
			"held: destination degraded since 2026-12-01T09:12:03Z; 2 of 8 attempts used"},
		{"paused", scheduler.Location{Head: failed, Destination: scheduler.DestinationState{Paused: true}},
			"held: destination paused; 2 of 8 attempts used"},
		{"behind", scheduler.Location{Ahead: 3}, "behind 3 earlier events in its lane"},
		{"in flight", scheduler.Location{InFlight: true}, ""},
		{"never tried", scheduler.Location{}, "due: waiting for its destination's budget"},
		{"event's fault", scheduler.Location{Head: scheduler.Head{Attempts: 1, LastStatus: 400, LastAttemptAt: parkedAt, NotBefore: later}},
			"retry at " + later.Format(time.RFC3339) + " after HTTP 400; 1 of 8 attempts used"},
	} {
		if got := waitingReason(c.loc, 8, "destination paused"); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	// A pause that is Rivora's after a 410 Gone says so, also before the
	// config does (the agent holds the destination at once).
	held := scheduler.Location{Head: failed, Destination: scheduler.DestinationState{Paused: true}}
	disabled := "destination disabled: its partner answered 410 Gone (rivoractl destinations resume orders sends again)"
	if got, want := waitingReason(held, 8, disabled), "held: "+disabled+"; 2 of 8 attempts used"; got != want {
		t.Errorf("disabled: %q, want %q", got, want)
	}
	if got, want := waitingReason(held, 8, ""), "held: its partner answered 410 Gone; the destination is being disabled; 2 of 8 attempts used"; got != want {
		t.Errorf("held after a 410, not yet disabled: %q, want %q", got, want)
	}
}
