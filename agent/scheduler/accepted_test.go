package scheduler

import (
	"testing"
	"time"
)

// CountAccepted counts the pending events accepted by their lane's
// subscription's time, in flight or not, each once.
func TestCountAccepted(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	routed := lid("d1", "c1", "a")
	routed.Subscription = "sub_1"
	appendTo(s, 0, lid("d1", "c1", "a"), ev(1), ev(2), ev(5))
	appendTo(s, 0, lid("d1", "c2", "b"), ev(3))
	appendTo(s, 0, routed, ev(4), ev(6))
	appendTo(s, 0, lid("d2", "c1", "a"), ev(7)) // another destination
	mustPick(t, s)                              // a head in flight still counts
	by := map[string]time.Time{"": ev(3).AcceptedAt, "sub_1": ev(6).AcceptedAt}
	count := func(dest string) int {
		w := s.CountAccepted(dest, func(sub string) time.Time { return by[sub] })
		for w.Step() {
		}
		return w.Counted()
	}
	if n := count("d1"); n != 5 { // 1, 2, 3 published; 4, 6 routed
		t.Fatalf("counted %d, want 5", n)
	}
	delete(by, "sub_1") // no window: none of its events counted
	if n := count("d1"); n != 3 {
		t.Fatalf("counted %d without sub_1's, want 3", n)
	}
	if n := count("nope"); n != 0 {
		t.Fatalf("counted %d of a destination with no lanes, want 0", n)
	}
	checkInvariants(t, s)
}
