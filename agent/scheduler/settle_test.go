package scheduler

import (
	"errors"
	"testing"

	"github.com/rivora/rivora/agent/limits"
)

// Every attempt is settled exactly once: a second settlement of any kind
// changes nothing and says so.
func TestSettleTwiceChangesNothing(t *testing.T) {
	second := []Settlement{{Kind: Advance}, {Kind: AdvanceDead}, {Kind: Retry}, {Kind: Release}}
	for _, first := range second {
		for _, again := range second {
			s, _ := newSched()
			s.SetLimits("d", 0, outageLimits)
			appendTo(s, 0, lid("d", "c", "k"), ev(1), ev(2))
			a, _ := step(s)
			if a == nil {
				t.Fatal("no attempt handed out")
			}
			if s.Settled(a) {
				t.Fatal("settled before Settle")
			}
			if _, err := s.Settle(a, first); err != nil {
				t.Fatalf("first settlement %v: %v", first.Kind, err)
			}
			before := s.Snapshot("d")[0]
			if _, err := s.Settle(a, again); !errors.Is(err, ErrSettledTwice) {
				t.Fatalf("settled %v then %v: %v, want ErrSettledTwice", first.Kind, again.Kind, err)
			}
			after := s.Snapshot("d")[0]
			if before.Pending != after.Pending || before.InFlight != after.InFlight {
				t.Fatalf("settled %v then %v: pending %d→%d, in flight %d→%d: the second settlement changed the lane",
					first.Kind, again.Kind, before.Pending, after.Pending, before.InFlight, after.InFlight)
			}
			if !s.Settled(a) {
				t.Fatal("not settled after Settle")
			}
			checkInvariants(t, s)
		}
	}
}

// A dead letter judged before anything was sent (its destination deleted,
// say) gives its budget token back: a backlog the partner never sees
// costs the destination none of its rate.
func TestAnUnsentDeadLetterGivesItsTokenBack(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d", 0, limits.Limits{RatePerSecond: 0.001, Burst: 1, MaxInFlight: 10})
	appendTo(s, 0, lid("d", "c", "a"), ev(1))
	appendTo(s, 0, lid("d", "c", "b"), ev(2))
	first := mustPick(t, s)
	mustNone(t, s) // one token, spent
	if _, err := s.Settle(first, Settlement{Kind: AdvanceDead, Unsent: true}); err != nil {
		t.Fatal(err)
	}
	second := mustPick(t, s)
	if _, err := s.Settle(second, Settlement{Kind: AdvanceDead}); err != nil {
		t.Fatal(err)
	}
	appendTo(s, 0, lid("d", "c", "c"), ev(3))
	mustNone(t, s) // a dead letter sent and refused keeps its token spent
	checkInvariants(t, s)
}
