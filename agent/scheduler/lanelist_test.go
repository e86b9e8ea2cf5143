package scheduler

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/limits"
	"github.com/rivora/rivora/lanes"
)

// skipModel takes a lane's head as an operator's skip does and reports it
// dead, checking TakeHead's refusals against the model.
func skipModel(t *testing.T, s *Scheduler, model map[string]*modelLane, dest, cust, key string, part int, delivered map[uint64]bool) {
	t.Helper()
	id := lid(dest, cust, key)
	ml := model[id.Subject(part)]
	_, err := s.TakeHead(id, "ev-0")
	switch {
	case ml == nil:
		if !errors.Is(err, ErrNoLane) {
			t.Fatalf("TakeHead(%s) of no lane: %v, want ErrNoLane", id, err)
		}
		return
	case ml.out != nil:
		if !errors.Is(err, ErrHeadInFlight) {
			t.Fatalf("TakeHead(%s) in flight: %v, want ErrHeadInFlight", id, err)
		}
		return
	case !errors.Is(err, ErrHeadMoved):
		t.Fatalf("TakeHead(%s) expecting another head: %v, want ErrHeadMoved", id, err)
	}
	a, err := s.TakeHead(id, ev(ml.seqs[0]).EventID)
	if err != nil {
		t.Fatalf("TakeHead(%s): %v", id, err)
	}
	if a.Entry.Seq != ml.seqs[0] || a.Head.Attempts != ml.attempts {
		t.Fatalf("TakeHead(%s) took seq %d (attempts %d), head is %d (attempts %d)", id, a.Entry.Seq, a.Head.Attempts, ml.seqs[0], ml.attempts)
	}
	out := s.Dead(a)
	delivered[a.Entry.Seq] = true
	ml.seqs, ml.attempts, ml.notBefore = ml.seqs[1:], 0, time.Time{}
	if len(ml.seqs) == 0 {
		if !out.Drained || out.PurgeLedger != ml.hasLedger {
			t.Fatalf("skip drained %s: outcome %+v, hasLedger %v", id, out, ml.hasLedger)
		}
		delete(model, id.Subject(part))
	} else if out.Drained || out.Remaining != len(ml.seqs) {
		t.Fatalf("skip of %s: outcome %+v, %d pending", id, out, len(ml.seqs))
	}
}

// checkListLanes compares ListLanes of one destination with the model.
func checkListLanes(t *testing.T, s *Scheduler, model map[string]*modelLane, dest string) {
	t.Helper()
	all := s.ListLanes(dest, LaneFilter{Limit: 1000})
	stuck := s.ListLanes(dest, LaneFilter{Stuck: true, Limit: 2})
	c0 := s.ListLanes(dest, LaneFilter{Customer: "c0", Limit: 1000})
	var want, wantStuck, wantC0 int
	for _, ml := range model {
		if ml.id.Destination != dest {
			continue
		}
		want++
		if ml.attempts > 0 {
			wantStuck++
		}
		if ml.id.Customer == "c0" {
			wantC0++
		}
	}
	if all.Matched != want || len(all.Lanes) != want || stuck.Matched != wantStuck || c0.Matched != wantC0 || len(c0.Lanes) != wantC0 {
		t.Fatalf("ListLanes(%s): %d/%d lanes, %d stuck, %d/%d of c0; model %d, %d stuck, %d of c0",
			dest, len(all.Lanes), all.Matched, stuck.Matched, len(c0.Lanes), c0.Matched, want, wantStuck, wantC0)
	}
	if len(stuck.Lanes) != min(wantStuck, 2) {
		t.Fatalf("ListLanes(%s, stuck, limit 2) returned %d lanes of %d", dest, len(stuck.Lanes), wantStuck)
	}
	for i, ls := range all.Lanes {
		ml := model[ls.ID.Subject(0)]
		if ml == nil {
			for p := 1; p < 3 && ml == nil; p++ {
				ml = model[ls.ID.Subject(p)]
			}
		}
		if ml == nil || ls.Depth != len(ml.seqs) || ls.HeadEventID != ev(ml.seqs[0]).EventID || (ls.State == LaneInFlight) != (ml.out != nil) || ls.Head.Attempts != ml.attempts {
			t.Fatalf("ListLanes(%s) lane %+v; model %+v", dest, ls, ml)
		}
		if i > 0 && longerWaiting(ls, all.Lanes[i-1]) {
			t.Fatalf("ListLanes(%s): lane %d waited longer than lane %d", dest, i, i-1)
		}
	}
	for _, ls := range stuck.Lanes {
		if !ls.Stuck() {
			t.Fatalf("ListLanes(%s, stuck) returned %+v", dest, ls)
		}
	}
}

func TestHeadSince(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d", 0, unlimited)
	A := lid("d", "c", "a")
	appendTo(s, 0, A, ev(1))
	clk.Advance(time.Second)
	appendTo(s, 0, A, ev(2)) // behind the head: headSince stays
	wantSince(t, s, "d", t0)
	a := mustPick(t, s)
	clk.Advance(time.Second)
	s.Retry(a, Head{Attempts: 1, NotBefore: clk.Now(), LastStatus: 500, LastAttemptAt: clk.Now()})
	wantSince(t, s, "d", t0) // a retry is still the same head
	clk.Advance(time.Second)
	s.Succeeded(mustPick(t, s))
	wantSince(t, s, "d", t0.Add(3*time.Second)) // the next head, since it became head
	s.Succeeded(mustPick(t, s))
	clk.Advance(time.Second)
	appendTo(s, 0, A, ev(3)) // appended to a drained lane
	wantSince(t, s, "d", t0.Add(4*time.Second))

	// Restored: the first attempt when there was one, else acceptance.
	s.Restore(1, lid("r", "c", "a"), evs(7), Head{Attempts: 1, FirstAttemptAt: t0.Add(-time.Hour)}, true)
	wantSince(t, s, "r", t0.Add(-time.Hour))
	s.Restore(1, lid("r2", "c", "a"), evs(8), Head{}, false)
	wantSince(t, s, "r2", ev(8).AcceptedAt)
	checkInvariants(t, s)
}

func wantSince(t *testing.T, s *Scheduler, dest string, want time.Time) {
	t.Helper()
	got := s.ListLanes(dest, LaneFilter{Limit: 10})
	if len(got.Lanes) != 1 || !got.Lanes[0].HeadSince.Equal(want) {
		t.Fatalf("ListLanes(%s) = %+v, want one lane with headSince %v", dest, got, want)
	}
}

func TestListLanesOrderFiltersAndStates(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d", 0, limits.Limits{RatePerSecond: 1e9, Burst: 1 << 20, MaxInFlight: 1})
	A, B, C, D := lid("d", "acme", "a"), lid("d", "acme", "b"), lid("d", "zeta", "c"), lid("d", "zeta", "d")
	appendTo(s, 0, A, ev(1), ev(2), ev(3))
	clk.Advance(time.Second)
	appendTo(s, 0, B, ev(4))
	clk.Advance(time.Second)
	appendTo(s, 0, C, ev(5))
	appendTo(s, 0, D, ev(6)) // same headSince as C: accepted later, so after it
	appendTo(s, 0, lid("other", "acme", "a"), ev(7))

	a := mustPick(t, s) // A's head in flight
	wantAttempt(t, a, A, 1, 1)
	nb := clk.Now().Add(time.Minute)
	s.Retry(a, Head{Attempts: 1, NotBefore: nb, LastStatus: 500, LastError: "boom", LastAttemptAt: clk.Now(), FirstAttemptAt: clk.Now()})
	inflight := mustPick(t, s) // B

	got := s.ListLanes("d", LaneFilter{Limit: 10})
	if got.Matched != 4 || len(got.Lanes) != 4 {
		t.Fatalf("ListLanes = %+v, want the 4 lanes of d", got)
	}
	order := []lanes.ID{A, B, C, D}
	for i, ls := range got.Lanes {
		want := LaneDue
		switch ls.ID {
		case A:
			want = LaneWaiting
		case inflight.Lane.ID:
			want = LaneInFlight
		}
		if ls.ID != order[i] || ls.State != want {
			t.Fatalf("lane %d = %s state %d, want %s state %d", i, ls.ID, ls.State, order[i], want)
		}
	}
	if ls := got.Lanes[0]; ls.Depth != 3 || ls.HeadEventID != "ev-1" || ls.Head.LastStatus != 500 || ls.Head.LastError != "boom" || !ls.NextAttemptAt.Equal(nb) || !ls.Stuck() {
		t.Fatalf("stuck lane = %+v", ls)
	}
	if got.Lanes[3].Stuck() || !got.Lanes[3].NextAttemptAt.IsZero() {
		t.Fatalf("fresh lane = %+v", got.Lanes[2])
	}

	if got := s.ListLanes("d", LaneFilter{Stuck: true, Limit: 10}); got.Matched != 1 || got.Lanes[0].ID != A {
		t.Fatalf("stuck lanes = %+v, want only A", got)
	}
	if got := s.ListLanes("d", LaneFilter{Customer: "zeta", Limit: 1}); got.Matched != 2 || len(got.Lanes) != 1 || got.Lanes[0].ID != C {
		t.Fatalf("zeta, limit 1 = %+v, want C of 2 matched", got)
	}
	if got := s.ListLanes("d", LaneFilter{Limit: 2}); got.Matched != 4 || len(got.Lanes) != 2 || got.Lanes[1].ID != B {
		t.Fatalf("limit 2 = %+v, want A, B of 4", got)
	}
	if got := s.ListLanes("nope", LaneFilter{Limit: 2}); got.Matched != 0 || len(got.Lanes) != 0 {
		t.Fatalf("unknown destination = %+v", got)
	}
	s.Succeeded(inflight)
	checkInvariants(t, s)
}

// TestListLanesWalkConsistency mutates a destination's lanes between the
// chunks of a walk: every lane pending throughout is reported exactly
// once, no lane made during the walk is reported, none twice.
func TestListLanesWalkConsistency(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { walkConsistency(t, seed) })
	}
}

func walkConsistency(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x1a9e))
	s, clk := newSched()
	s.SetLimits("d", 0, unlimited)
	var seq uint64
	key := 0
	add := func() lanes.ID {
		seq++
		key++
		id := lid("d", fmt.Sprintf("c%d", rng.IntN(3)), fmt.Sprintf("k%d", key))
		appendTo(s, 0, id, ev(seq))
		return id
	}
	live := map[lanes.ID]bool{}
	for range 20 + rng.IntN(60) {
		live[add()] = true
		clk.Advance(time.Duration(rng.IntN(3)) * time.Millisecond)
	}
	w := s.startWalk("d", LaneFilter{Limit: 1000}, 1+rng.IntN(7))
	throughout, during := map[lanes.ID]bool{}, map[lanes.ID]bool{}
	for id := range live {
		throughout[id] = true
	}
	for more := true; more; {
		more = w.Step()
		for range rng.IntN(6) {
			switch rng.IntN(3) {
			case 0: // a new lane
				id := add()
				live[id], during[id] = true, true
			default: // a lane drains (its one event skipped)
				for id := range live {
					a, err := s.TakeHead(id, "")
					if err != nil {
						t.Fatalf("TakeHead(%s): %v", id, err)
					}
					if !s.Dead(a).Drained {
						t.Fatalf("lane %s did not drain", id)
					}
					delete(live, id)
					delete(throughout, id)
					break
				}
			}
		}
		checkInvariants(t, s)
	}
	seen := map[lanes.ID]int{}
	for _, ls := range w.Result().Lanes {
		seen[ls.ID]++
		if seen[ls.ID] > 1 || during[ls.ID] {
			t.Fatalf("lane %s reported twice, or made during the walk (%v)", ls.ID, during[ls.ID])
		}
	}
	for id := range throughout {
		if seen[id] != 1 {
			t.Fatalf("lane %s pending throughout the walk reported %d times", id, seen[id])
		}
	}
	if w.Result().Matched != len(w.Result().Lanes) {
		t.Fatalf("matched %d, reported %d", w.Result().Matched, len(w.Result().Lanes))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.dests["d"].walks) != 0 {
		t.Fatal("finished walk still registered")
	}
}

// A walk given up before its end is forgotten once closed: swap-removes
// no longer hand it lanes.
func TestListLanesWalkClose(t *testing.T) {
	s, _ := newSched()
	for i := range 10 {
		appendTo(s, 0, lid("d", "c", fmt.Sprintf("k%d", i)), ev(uint64(i+1)))
	}
	w := s.startWalk("d", LaneFilter{Limit: 100}, 3)
	w.Step()
	w.Close()
	a, err := s.TakeHead(lid("d", "c", "k0"), "")
	if err != nil {
		t.Fatal(err)
	}
	s.Dead(a) // swap-removes k0: k9 moves behind the closed walk's cursor
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.dests["d"].walks) != 0 || len(w.moved) != 0 {
		t.Fatalf("closed walk still tracked: %d walks, %d moved", len(s.dests["d"].walks), len(w.moved))
	}
}

func TestTakeHead(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d", 0, unlimited)
	A := lid("d", "c", "a")
	if _, err := s.TakeHead(A, ""); !errors.Is(err, ErrNoLane) {
		t.Fatalf("TakeHead of an unknown lane: %v", err)
	}
	appendTo(s, 0, A, ev(1), ev(2))
	a := mustPick(t, s)
	if _, err := s.TakeHead(A, ""); !errors.Is(err, ErrHeadInFlight) {
		t.Fatalf("TakeHead in flight: %v", err)
	}
	head := Head{Attempts: 1, NotBefore: clk.Now().Add(time.Hour), LastStatus: 500, LastAttemptAt: clk.Now()}
	s.Retry(a, head)
	mustNone(t, s)
	if _, err := s.TakeHead(A, "ev-2"); !errors.Is(err, ErrHeadMoved) {
		t.Fatalf("TakeHead expecting ev-2: %v", err)
	}
	taken, err := s.TakeHead(A, "ev-1")
	if err != nil || taken.Entry != ev(1) || taken.Head != head {
		t.Fatalf("TakeHead = %+v, %v", taken, err)
	}
	checkInvariants(t, s)
	mustNone(t, s) // taken: not handed out, and its retry timer is gone
	if out := s.Dead(taken); out.Drained || out.Remaining != 1 {
		t.Fatalf("Dead after skip = %+v", out)
	}
	wantAttempt(t, mustPick(t, s), A, 2, 1) // the next head is due at once
	checkInvariants(t, s)
}

// A walk whose destination is dropped mid-way (its partition handed off)
// stops with what it has read.
func TestListLanesWalkStopsWhenDropped(t *testing.T) {
	s, _ := newSched()
	for i := range 10 {
		appendTo(s, 0, lid("d", "c", fmt.Sprintf("k%d", i)), ev(uint64(i+1)))
	}
	w := s.startWalk("d", LaneFilter{Limit: 100}, 3)
	if !w.Step() {
		t.Fatal("walk over 10 lanes ended after one chunk of 3")
	}
	s.DropPartition(0)
	if w.Step() {
		t.Fatal("walk went on after its destination was dropped")
	}
	if got := w.Result(); got.Matched != 3 || len(got.Lanes) != 3 {
		t.Fatalf("result = %+v, want the 3 lanes read before the drop", got)
	}
	w.Close() // closing an ended walk is harmless
	if got := s.ListLanes("d", LaneFilter{Limit: 100}); got.Matched != 0 {
		t.Fatalf("ListLanes after the drop = %+v", got)
	}
}
