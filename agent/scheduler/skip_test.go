package scheduler

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/lanes"
)

// A lane named without its subscription (or with another) has nothing
// pending, but the same customer's lane key has events routed by a
// subscription: the refusal names it, so the operator can add
// --subscription instead of reading "nothing pending" beside a
// `lanes list` that shows the lane.
func TestTakeHeadNamesTheSubscriptionsOfALaneKey(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	routed := lid("d1", "beta", "sb")
	routed.Subscription = "sub_1"
	appendTo(s, 0, routed, ev(1))
	appendTo(s, 0, lid("d1", "other", "sb"), ev(2)) // another customer's

	_, err := s.TakeHead(lid("d1", "beta", "sb"), "")
	var others *OtherSubscriptionsError
	if !errors.As(err, &others) || !errors.Is(err, ErrNoLane) {
		t.Fatalf("TakeHead of the lane without its subscription: %v, want an OtherSubscriptionsError that is ErrNoLane", err)
	}
	if !slices.Equal(others.Subscriptions, []string{"sub_1"}) {
		t.Fatalf("subscriptions named %q, want [sub_1]", others.Subscriptions)
	}

	wrong := routed
	wrong.Subscription = "sub_2"
	if _, err := s.TakeHead(wrong, ""); !errors.As(err, &others) || !slices.Equal(others.Subscriptions, []string{"sub_1"}) {
		t.Fatalf("TakeHead under another subscription: %v, want sub_1 named", err)
	}
	// A lane key with nothing pending anywhere: plain ErrNoLane.
	if _, err := s.TakeHead(lid("d1", "beta", "none"), ""); err != ErrNoLane {
		t.Fatalf("TakeHead of an empty lane key: %v, want ErrNoLane", err)
	}
	if a, err := s.TakeHead(routed, ""); err != nil || a.Entry.Seq != 1 {
		t.Fatalf("TakeHead with its subscription: %v, %v", a, err)
	}
	checkInvariants(t, s)
}

// The refusal of a lane with nothing pending names the subscriptions of
// its lane key from the customer's count of its lanes by subscription
// (customer.routed), not from a walk over the destination's lanes: the
// count follows lanes made, drained and taken with their subscription
// (checkInvariants compares it with the lanes), and the refusal with it.
func TestTakeHeadRefusalFollowsTheCustomersRoutedLanes(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	s.SetPaused("d1", 0, true) // nothing is handed out but what TakeHead takes
	under := func(sub string) lanes.ID {
		id := lid("d1", "beta", "sb")
		id.Subscription = sub
		return id
	}
	for i, sub := range []string{"", "sub_1", "sub_2"} {
		appendTo(s, 0, under(sub), ev(uint64(i+1)))
	}
	for i := range 100 { // the customer's other lanes, some routed
		id := lid("d1", "beta", fmt.Sprint("k", i))
		id.Subscription = []string{"", "sub_1", "sub_4"}[i%3]
		appendTo(s, 0, id, ev(uint64(100+i)))
	}
	checkInvariants(t, s)
	names := func(what string, id lanes.ID, want ...string) {
		t.Helper()
		_, err := s.TakeHead(id, "")
		var others *OtherSubscriptionsError
		switch {
		case len(want) == 0 && err != ErrNoLane:
			t.Fatalf("%s: %v, want ErrNoLane", what, err)
		case len(want) > 0 && (!errors.As(err, &others) || !slices.Equal(others.Subscriptions, want)):
			t.Fatalf("%s: %v, want %q named", what, err, want)
		}
	}
	names("under a subscription that routes none of it", under("sub_3"), "", "sub_1", "sub_2")
	names("a lane key of the customer's routed lanes only", lid("d1", "beta", "k1"), "sub_1")

	// sub_1's lane of the key drains: it is no longer named.
	a, err := s.TakeHead(under("sub_1"), "")
	if err != nil {
		t.Fatal(err)
	}
	s.Dead(a)
	checkInvariants(t, s)
	names("once sub_1's lane drained", under("sub_3"), "", "sub_2")
	names("the drained lane itself", under("sub_1"), "", "sub_2")

	// sub_2's lanes are taken with their subscription (a forced delete).
	s.TakeSubscription("d1", "sub_2")
	checkInvariants(t, s)
	names("once sub_2's lanes were taken", under("sub_3"), "")
	names("a lane key with nothing pending anywhere", lid("d1", "beta", "none"))
	names("another customer's", lid("d1", "gamma", "sb"))
}

// A head in flight is refused; the refusal says whether the destination
// is parked, where its probe sends the same head again as soon as each
// attempt ends (so the operator is told to pause it first), and is not
// while the destination is healthy or degraded, where the attempt ends
// within its timeout and the lane then waits for its retry time.
func TestTakeHeadInFlightSaysWhetherItsDestinationIsParked(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d", 0, outageLimits)
	id := lid("d", "c", "a")
	appendTo(s, 0, id, ev(1), ev(2))
	refused := func(what string, wantState budget.State, wantParked bool) {
		t.Helper()
		if st := s.Snapshot("d")[0].State; st != wantState {
			t.Fatalf("%s: destination %s, want %s", what, st, wantState)
		}
		_, err := s.TakeHead(id, "")
		var inFlight *HeadInFlightError
		if !errors.As(err, &inFlight) || !errors.Is(err, ErrHeadInFlight) || inFlight.DestinationParked != wantParked {
			t.Fatalf("%s: TakeHead of the head in flight: %#v, want a HeadInFlightError (ErrHeadInFlight) with DestinationParked %v", what, err, wantParked)
		}
	}

	a := mustPick(t, s)
	refused("healthy", budget.Healthy, false)

	s.Observe(a, 429, true, 0, "HTTP 429")
	h := a.Head
	h.HeldByDestination, h.LastStatus, h.LastAttemptAt, h.NotBefore = true, 429, clk.Now(), clk.Now().Add(time.Second)
	h.WindowEnd = t0.Add(time.Hour)
	s.Retry(a, h)
	clk.Advance(2 * time.Second)
	a = mustPick(t, s)
	refused("degraded", budget.Degraded, false)
	failHeld(t, s, a, t0.Add(time.Hour))

	outage(t, s, "d", func(lanes.ID) time.Time { return t0.Add(time.Hour) })
	clk.Advance(time.Second)
	if probe := mustPick(t, s); !probe.EarlyProbe || probe.Lane.ID != id {
		t.Fatalf("parked: %s handed out (early probe %v), want the probe of %s", probe.Lane.ID, probe.EarlyProbe, id)
	}
	refused("parked", budget.Parked, true)
	// Paused with the probe in flight: nothing sends the head again, so
	// a pause is not the advice.
	s.SetPaused("d", 0, true)
	refused("parked and paused", budget.Parked, false)
	checkInvariants(t, s)
}
