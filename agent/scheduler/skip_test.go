package scheduler

import (
	"errors"
	"slices"
	"testing"
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
