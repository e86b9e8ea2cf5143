package scheduler

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/limits"
	"github.com/rivora/rivora/lanes"
)

func subLane(dest, cust, key, sub string) lanes.ID {
	return lanes.ID{Destination: dest, Customer: cust, Key: key, Subscription: sub}
}

// drainSeqs picks and delivers until nothing is due, and returns the
// sequences delivered in order.
func drainSeqs(t *testing.T, s *Scheduler) []uint64 {
	t.Helper()
	var got []uint64
	for {
		a, _ := step(s)
		if a == nil {
			return got
		}
		got = append(got, a.Entry.Seq)
		s.Succeeded(a)
	}
}

// A paused subscription holds its lanes, while another subscription's
// lanes and the direct lanes at the same destination keep flowing; on
// resume its lanes drain in lane order, oldest head first.
func TestPausedSubscriptionHoldsItsLanesOnly(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	s.SetSubscriptionPaused("d1", "sub_a", true)
	A1 := subLane("d1", "c1", "u1", "sub_a")
	A2 := subLane("d1", "c1", "u2", "sub_a")
	B := subLane("d1", "c1", "u1", "sub_b")
	direct := lid("d1", "c1", "u1")
	appendTo(s, 0, A2, ev(1), ev(4))
	appendTo(s, 0, A1, ev(2), ev(5))
	appendTo(s, 0, B, ev(3), ev(6))
	appendTo(s, 0, direct, ev(7))
	checkInvariants(t, s)

	got := drainSeqs(t, s)
	slices.Sort(got)
	if !slices.Equal(got, []uint64{3, 6, 7}) {
		t.Fatalf("delivered %v while sub_a is paused, want sub_b's and the direct lane's (3, 6, 7)", got)
	}
	if n := s.PendingOf("d1", "sub_a"); n != 4 {
		t.Fatalf("PendingOf(sub_a) = %d, want its 4 events held", n)
	}
	if n := s.Pending("d1"); n != 4 {
		t.Fatalf("Pending(d1) = %d, want 4", n)
	}
	list := s.ListLanes("d1", LaneFilter{Subscription: "sub_a", Limit: 10})
	if list.Matched != 2 || !list.Lanes[0].SubscriptionPaused || list.Lanes[0].State != LaneWaiting {
		t.Fatalf("ListLanes(sub_a) = %+v, want its 2 lanes waiting for the resume", list)
	}
	if loc, ok := s.Find("ev-1"); !ok || !loc.SubscriptionPaused {
		t.Fatalf("Find(ev-1) = %+v, %v: want it held by its subscription's pause", loc, ok)
	}
	checkInvariants(t, s)

	s.SetSubscriptionPaused("", "sub_a", false)
	checkInvariants(t, s)
	// One customer: its lanes go oldest head first, each in its order.
	if got := drainSeqs(t, s); !slices.Equal(got, []uint64{1, 2, 4, 5}) {
		t.Fatalf("after resume delivered %v, want 1, 2, 4, 5", got)
	}
	if len(s.PausedSubscriptions()) != 0 {
		t.Fatalf("paused subscriptions %v after resume", s.PausedSubscriptions())
	}
	checkInvariants(t, s)
}

// A pause that arrives while a head is in flight, or while heads wait for
// their retry, holds them once their attempts settle; events that arrive
// while paused are held too; a paused lane's retry time passing does not
// hand it out.
func TestSubscriptionPauseCatchesEveryLaneState(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d1", 0, unlimited)
	inFlight := subLane("d1", "c1", "a", "sub_a")
	retrying := subLane("d1", "c1", "b", "sub_a")
	appendTo(s, 0, inFlight, ev(1), ev(2))
	s.Restore(0, retrying, evs(3), Head{Attempts: 1, NotBefore: t0.Add(time.Minute), LastAttemptAt: t0}, true)
	a := mustPick(t, s)
	wantAttempt(t, a, inFlight, 1, 1)

	s.SetSubscriptionPaused("d1", "sub_a", true)
	checkInvariants(t, s)
	s.Succeeded(a) // its next head is held
	late := subLane("d1", "c2", "c", "sub_a")
	appendTo(s, 0, late, ev(4))
	clk.Advance(time.Hour)
	wantNoneWait(t, s, 0)
	checkInvariants(t, s)

	// A retry settled while paused is held, whatever its retry time.
	s.SetSubscriptionPaused("d1", "sub_a", false)
	b := mustPick(t, s)
	s.SetSubscriptionPaused("d1", "sub_a", true)
	s.Retry(b, Head{Attempts: b.Number, NotBefore: clk.Now(), LastAttemptAt: clk.Now()})
	wantNoneWait(t, s, 0)
	checkInvariants(t, s)

	s.SetSubscriptionPaused("d1", "sub_a", false)
	got := drainSeqs(t, s)
	slices.Sort(got)
	if !slices.Equal(got, []uint64{2, 3, 4}) {
		t.Fatalf("after resume delivered %v, want 2, 3, 4", got)
	}
	checkInvariants(t, s)
}

// Fairness between customers is per customer, not per subscription: a
// customer with 10 subscriptions to a destination gets one share against
// a customer with 1.
func TestManySubscriptionsDoNotMultiplyACustomersShare(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	seq := uint64(0)
	for sub := range 10 {
		for k := range 200 {
			seq++
			appendTo(s, 0, subLane("d1", "many", fmt.Sprintf("k%d", k), fmt.Sprintf("sub_m%d", sub)), ev(seq))
		}
	}
	for k := range 2000 {
		seq++
		appendTo(s, 0, subLane("d1", "one", fmt.Sprintf("k%d", k), "sub_o"), ev(seq))
	}
	checkInvariants(t, s)
	const picks = 2000
	count := map[string]int{}
	for range picks {
		a := mustPick(t, s)
		count[a.Lane.ID.Customer]++
		s.Succeeded(a)
	}
	checkInvariants(t, s)
	if got := float64(count["one"]) / picks; math.Abs(got-0.5) > 0.01 {
		t.Fatalf("the one-subscription customer's share is %.3f, want 1/2 (counts %v)", got, count)
	}
}

// A paused subscription's events are held, not lost, across a limits
// change and a partition dropped and rebuilt: the pause is the
// scheduler's, not the destination's.
func TestSubscriptionPauseOutlivesAPartitionRebuild(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	s.SetSubscriptionPaused("d1", "sub_a", true)
	id := subLane("d1", "c1", "a", "sub_a")
	appendTo(s, 0, id, ev(1))
	s.DropPartition(0)
	s.SetLimits("d1", 0, limits.Limits{RatePerSecond: 1e6, Burst: 1000, MaxInFlight: 10})
	s.Restore(0, id, evs(1), Head{}, false)
	wantNoneWait(t, s, 0)
	checkInvariants(t, s)
	s.SetSubscriptionPaused("d1", "sub_a", false)
	wantAttempt(t, mustPick(t, s), id, 1, 1)
}

// TakeSubscription takes one subscription's lanes (not the one in
// flight), paused or not, and leaves the destination's other lanes.
func TestTakeSubscription(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	out := subLane("d1", "c1", "a", "sub_a")
	held := subLane("d1", "c2", "b", "sub_a")
	other := subLane("d1", "c1", "a", "sub_b")
	appendTo(s, 0, out, ev(1), ev(2))
	a := mustPick(t, s)
	wantAttempt(t, a, out, 1, 1)
	s.SetSubscriptionPaused("d1", "sub_a", true)
	appendTo(s, 0, held, ev(3), ev(4))
	appendTo(s, 0, other, ev(5))

	taken, _ := s.TakeSubscription("d1", "sub_a")
	var got []uint64
	for l, entries := range taken {
		if l.ID.Subscription != "sub_a" {
			t.Fatalf("took lane %s", l.ID)
		}
		for _, e := range entries {
			got = append(got, e.Seq)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, []uint64{3, 4}) {
		t.Fatalf("taken %v, want the held lane's 3 and 4 (the lane in flight stays)", got)
	}
	checkInvariants(t, s)
	if n := s.PendingOf("d1", "sub_a"); n != 2 {
		t.Fatalf("PendingOf(sub_a) = %d, want the in-flight lane's 2", n)
	}
	s.Succeeded(a)
	s.SetSubscriptionPaused("", "sub_a", false)
	got = drainSeqs(t, s)
	slices.Sort(got)
	if !slices.Equal(got, []uint64{2, 5}) {
		t.Fatalf("delivered %v, want 2 and 5", got)
	}
	checkInvariants(t, s)
}

// TakeSubscription counts what it leaves to the attempts in flight: the
// subscription's heads in flight and the entries queued behind them
// (which their lanes hand out once the attempts end), not another
// subscription's. A forced delete reports them (it said "no pending
// events were archived" while two were dead-lettered after the attempt).
func TestTakeSubscriptionCountsWhatItLeavesInFlight(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	out := subLane("d1", "c1", "a", "sub_a")
	alone := subLane("d1", "c2", "b", "sub_a")
	other := subLane("d1", "c1", "c", "sub_b")
	idle := subLane("d1", "c1", "z", "sub_a")
	appendTo(s, 0, out, ev(1))
	appendTo(s, 0, alone, ev(4))
	appendTo(s, 0, other, ev(5))
	attempts := []*Attempt{mustPick(t, s), mustPick(t, s), mustPick(t, s)}
	appendTo(s, 0, out, ev(2), ev(3))
	appendTo(s, 0, other, ev(6))
	appendTo(s, 0, idle, ev(7))

	taken, left := s.TakeSubscription("d1", "sub_a")
	if seqs := takenSeqs(taken); !slices.Equal(seqs, []uint64{7}) {
		t.Fatalf("taken %v, want the idle lane's 7 alone", seqs)
	}
	if left != (Left{InFlight: 2, Behind: 2}) {
		t.Fatalf("left %+v, want 2 heads in flight (1 and 4) and 2 entries behind them (2 and 3)", left)
	}
	checkInvariants(t, s)
	for _, a := range attempts {
		s.Succeeded(a)
	}
	got := drainSeqs(t, s)
	slices.Sort(got)
	if !slices.Equal(got, []uint64{2, 3, 6}) {
		t.Fatalf("handed out %v after the attempts, want 2 and 3 (left behind the head) and 6", got)
	}
	checkInvariants(t, s)
}

// takenSeqs are the sequences of the entries a take returned, in order.
func takenSeqs(taken map[*Lane][]Entry) []uint64 {
	var seqs []uint64
	for _, entries := range taken {
		for _, e := range entries {
			seqs = append(seqs, e.Seq)
		}
	}
	slices.Sort(seqs)
	return seqs
}
