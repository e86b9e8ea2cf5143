package scheduler

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/limits"
	"github.com/rivora/rivora/internal/rates"
	"github.com/rivora/rivora/lanes"
)

// ---------------------------------------------------------------------------
// helpers

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// unlimited is a budget that never runs dry in these tests.
var unlimited = limits.Limits{RatePerSecond: 1e9, Burst: 1 << 20, MaxInFlight: 1 << 30}

func newSched() (*Scheduler, *clock.Manual) {
	clk := clock.NewManual(t0)
	return New(clk), clk
}

func lid(dest, cust, key string) lanes.ID {
	return lanes.ID{Destination: dest, Customer: cust, Key: key}
}

// appendTo stores entries at the tail of one lane the way the partition
// writer does: through AppendAll.
func appendTo(s *Scheduler, partition int, id lanes.ID, entries ...Entry) {
	s.AppendAll(partition, []LaneAppend{{ID: id, Subject: id.Subject(partition), Entries: entries}})
}

func ev(seq uint64) Entry {
	return Entry{Seq: seq, EventID: fmt.Sprintf("ev-%d", seq), AcceptedAt: t0.Add(time.Duration(seq) * time.Millisecond)}
}

func evs(seqs ...uint64) []Entry {
	out := make([]Entry, len(seqs))
	for i, s := range seqs {
		out[i] = ev(s)
	}
	return out
}

// step is one iteration of Run's body, without the channel: promote, then
// pick, at the manual clock's current time.
func step(s *Scheduler) (*Attempt, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.promote(now)
	return s.pick(now)
}

func mustPick(t *testing.T, s *Scheduler) *Attempt {
	t.Helper()
	a, wait := step(s)
	if a == nil {
		t.Fatalf("pick: no attempt (wait %v), want one", wait)
	}
	return a
}

func mustNone(t *testing.T, s *Scheduler) time.Duration {
	t.Helper()
	a, wait := step(s)
	if a != nil {
		t.Fatalf("pick: got attempt %s seq %d (number %d), want none", a.Lane.ID, a.Entry.Seq, a.Number)
	}
	return wait
}

func wantNoneWait(t *testing.T, s *Scheduler, want time.Duration) {
	t.Helper()
	if got := mustNone(t, s); got != want {
		t.Fatalf("pick wait = %v, want %v", got, want)
	}
}

func wantAttempt(t *testing.T, a *Attempt, id lanes.ID, seq uint64, number int) {
	t.Helper()
	if a == nil {
		t.Fatalf("attempt is nil, want %s seq %d", id, seq)
	}
	if a.Lane.ID != id || a.Entry.Seq != seq || a.Number != number {
		t.Fatalf("attempt = %s seq %d number %d, want %s seq %d number %d",
			a.Lane.ID, a.Entry.Seq, a.Number, id, seq, number)
	}
	if a.Entry != ev(seq) {
		t.Fatalf("attempt entry = %+v, want %+v", a.Entry, ev(seq))
	}
}

// checkInvariants verifies the scheduler's internal bookkeeping: the waiting
// heap, the destination ring, the per-customer due queues, the DRR active
// list and every counter agree with the lanes.
func checkInvariants(t *testing.T, s *Scheduler) {
	t.Helper()
	checkHasPending(t, s)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, l := range s.waiting {
		if l.heapIdx != i {
			t.Fatalf("waiting[%d] %s has heapIdx %d", i, l.ID, l.heapIdx)
		}
		if l.state != laneWaiting {
			t.Fatalf("waiting[%d] %s has state %d", i, l.ID, l.state)
		}
		if i > 0 {
			if p := (i - 1) / 2; l.wake.Before(s.waiting[p].wake) {
				t.Fatalf("waiting heap order broken at %d", i)
			}
		}
		if s.dests[l.ID.Destination] != l.dest || l.dest.lanes[l.Subject] != l {
			t.Fatalf("waiting heap holds forgotten lane %s", l.ID)
		}
	}
	ringCount := map[*destination]int{}
	var perClass [numClasses]int
	for _, d := range s.ring {
		perClass[d.class]++
	}
	if perClass != s.ringClass {
		t.Fatalf("ring holds %v destinations per class, ringClass counts %v", perClass, s.ringClass)
	}
	for _, d := range s.ring {
		ringCount[d]++
		if s.dests[d.id] != d {
			t.Fatalf("ring holds forgotten destination %s", d.id)
		}
	}
	for id, d := range s.dests {
		if d.id != id {
			t.Fatalf("dests[%s].id = %s", id, d.id)
		}
		if ringCount[d] > 1 || d.inRing != (ringCount[d] == 1) {
			t.Fatalf("destination %s: inRing %v, in ring %d times", id, d.inRing, ringCount[d])
		}
		if d.inRing != (d.due > 0) {
			t.Fatalf("destination %s: inRing %v with due %d", id, d.inRing, d.due)
		}
		entriesOf := map[*customer]int{}
		routedOf := map[*customer]map[string]int{}
		for _, l := range d.lanes {
			entriesOf[l.cust] += len(l.entries)
			if sub := l.ID.Subscription; sub != "" {
				if routedOf[l.cust] == nil {
					routedOf[l.cust] = map[string]int{}
				}
				routedOf[l.cust][sub]++
			}
		}
		for cid, c := range d.customers {
			if c.pending != entriesOf[c] {
				t.Fatalf("destination %s: customer %s counts %d pending, its lanes hold %d", id, cid, c.pending, entriesOf[c])
			}
			if !maps.Equal(c.routed, routedOf[c]) {
				t.Fatalf("destination %s: customer %s counts its lanes by subscription as %v, they are %v", id, cid, c.routed, routedOf[c])
			}
		}
		queued := map[*Lane]int{}
		due := 0
		for cid, c := range d.customers {
			if c.id != cid {
				t.Fatalf("customer %s has id %s", cid, c.id)
			}
			for _, l := range c.firsts.items {
				queued[l]++
				if l.head.Attempts != 0 || l.cust != c {
					t.Fatalf("firsts of %s holds %s (attempts %d)", cid, l.ID, l.head.Attempts)
				}
			}
			for _, l := range c.retries.items {
				queued[l]++
				if l.head.Attempts == 0 || l.cust != c {
					t.Fatalf("retries of %s holds %s (attempts %d)", cid, l.ID, l.head.Attempts)
				}
			}
			due += c.due()
		}
		if due != d.due {
			t.Fatalf("destination %s: due %d, queues hold %d", id, d.due, due)
		}
		active := map[*customer]int{}
		for _, c := range d.active {
			active[c]++
			if d.customers[c.id] != c {
				t.Fatalf("destination %s: active customer %s forgotten", id, c.id)
			}
		}
		for cid, c := range d.customers {
			want := c.due() > 0
			if c.active != want || active[c] > 1 || (active[c] == 1) != want {
				t.Fatalf("destination %s customer %s: active %v, in active list %d times, due %d",
					id, cid, c.active, active[c], c.due())
			}
		}
		if len(d.order) != len(d.lanes) {
			t.Fatalf("destination %s: order holds %d lanes, lanes %d", id, len(d.order), len(d.lanes))
		}
		for i, sl := range d.order {
			l := sl.lane
			if l.pos != i || d.lanes[l.Subject] != l || sl.cust != l.cust {
				t.Fatalf("destination %s: order[%d] is %s with pos %d (in lanes: %v)", id, i, l.ID, l.pos, d.lanes[l.Subject] == l)
			}
			l.reslot()
			if d.order[i] != sl {
				t.Fatalf("lane %s: slot %+v, want %+v", l.ID, sl, d.order[i])
			}
			if l.headSince.IsZero() || sl.born == 0 || sl.born > s.born {
				t.Fatalf("lane %s: headSince %v, born %d of %d", l.ID, l.headSince, sl.born, s.born)
			}
		}
		pending, inFlight := 0, 0
		perCustomer := map[*customer]int{}
		for subj, l := range d.lanes {
			if l.Subject != subj || l.dest != d || d.customers[l.ID.Customer] != l.cust {
				t.Fatalf("lane %s: broken links", subj)
			}
			if len(l.entries) == 0 {
				t.Fatalf("lane %s kept with no entries", subj)
			}
			perCustomer[l.cust]++
			pending += len(l.entries)
			if s.subscriptionPaused(l) && l.state != laneSubPaused && l.state != laneInFlight {
				t.Fatalf("lane %s of a paused subscription is in play (state %d)", subj, l.state)
			}
			switch l.state {
			case laneSubPaused:
				if queued[l] != 0 || l.heapIdx != -1 || slices.Contains(s.expired, l) || !s.subscriptionPaused(l) {
					t.Fatalf("lane %s held for its subscription: queued %d, heapIdx %d, paused %v", subj, queued[l], l.heapIdx, s.subscriptionPaused(l))
				}
			case laneDue:
				if queued[l] != 1 || l.heapIdx != -1 {
					t.Fatalf("due lane %s queued %d times, heapIdx %d", subj, queued[l], l.heapIdx)
				}
			case laneWaiting:
				if queued[l] != 0 || l.heapIdx < 0 || l.heapIdx >= len(s.waiting) || s.waiting[l.heapIdx] != l {
					t.Fatalf("waiting lane %s not in heap (heapIdx %d, queued %d)", subj, l.heapIdx, queued[l])
				}
			case laneInFlight:
				inFlight++
				if queued[l] != 0 || l.heapIdx != -1 {
					t.Fatalf("in-flight lane %s queued %d times, heapIdx %d", subj, queued[l], l.heapIdx)
				}
			case laneExpired:
				if queued[l] != 0 || l.heapIdx != -1 || !slices.Contains(s.expired, l) {
					t.Fatalf("expired lane %s not (only) in the expired queue (queued %d, heapIdx %d)", subj, queued[l], l.heapIdx)
				}
			default:
				t.Fatalf("lane %s with %d entries is idle: it would never be attempted", subj, len(l.entries))
			}
		}
		for l := range queued {
			if d.lanes[l.Subject] != l {
				t.Fatalf("destination %s: due queue holds forgotten lane %s", id, l.ID)
			}
		}
		if pending != d.pending {
			t.Fatalf("destination %s: pending %d, lanes hold %d", id, d.pending, pending)
		}
		if inFlight != d.inFlight {
			t.Fatalf("destination %s: inFlight %d, lanes in flight %d", id, d.inFlight, inFlight)
		}
		for cid, c := range d.customers {
			if c.lanes != perCustomer[c] {
				t.Fatalf("destination %s customer %s: lanes %d, actual %d", id, cid, c.lanes, perCustomer[c])
			}
		}
	}
}

// ---------------------------------------------------------------------------
// 1. only a lane's head is in flight; FIFO by Seq

func TestOnlyHeadInFlightFIFO(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d1", 0, unlimited)
	L := lid("d1", "c1", "user-1")
	appendTo(s, 0, L, ev(1), ev(2))
	appendTo(s, 0, L, ev(3))
	if got := s.Pending("d1"); got != 3 {
		t.Fatalf("Pending = %d, want 3", got)
	}
	checkInvariants(t, s)

	a1 := mustPick(t, s)
	wantAttempt(t, a1, L, 1, 1)
	if a1.Head != (Head{}) || !a1.StartedAt.Equal(t0) || a1.Lane.Partition != 0 || a1.Lane.Subject != L.Subject(0) {
		t.Fatalf("first attempt = %+v", a1)
	}
	// Nothing else from the lane while its head is out, however often we
	// ask and even after more events arrive or time passes.
	for range 3 {
		wantNoneWait(t, s, 0)
	}
	appendTo(s, 0, L, ev(4))
	wantNoneWait(t, s, 0)
	clk.Advance(time.Hour)
	wantNoneWait(t, s, 0)
	checkInvariants(t, s)
	if loc, ok := s.Find("ev-1"); !ok || !loc.InFlight || loc.Ahead != 0 {
		t.Fatalf("Find(ev-1) = %+v, %v; want in flight head", loc, ok)
	}

	// Succeeded: the next entry is handed out.
	if out := s.Succeeded(a1); out != (Outcome{Remaining: 3}) {
		t.Fatalf("Succeeded outcome = %+v, want lane not drained", out)
	}
	a2 := mustPick(t, s)
	wantAttempt(t, a2, L, 2, 1)
	wantNoneWait(t, s, 0)

	// Retry (due immediately): the same head again, still alone.
	failed := Head{Attempts: 1, NotBefore: clk.Now(), LastStatus: 500, LastError: "boom", FirstAttemptAt: clk.Now(), LastAttemptAt: clk.Now()}
	s.Retry(a2, failed)
	checkInvariants(t, s)
	a3 := mustPick(t, s)
	wantAttempt(t, a3, L, 2, 2)
	if a3.Head != failed {
		t.Fatalf("retry attempt head = %+v, want %+v", a3.Head, failed)
	}
	wantNoneWait(t, s, 0)

	// Dead: the lane advances and the new head starts with fresh state.
	if out := s.Dead(a3); out != (Outcome{Remaining: 2}) {
		t.Fatalf("Dead outcome = %+v", out)
	}
	a4 := mustPick(t, s)
	wantAttempt(t, a4, L, 3, 1)
	if a4.Head != (Head{}) {
		t.Fatalf("new head carries old state: %+v", a4.Head)
	}
	wantNoneWait(t, s, 0)
	s.Succeeded(a4)
	a5 := mustPick(t, s)
	wantAttempt(t, a5, L, 4, 1)
	wantNoneWait(t, s, 0)

	// The lane had a ledger record (from the retry): draining purges it.
	if out := s.Succeeded(a5); out != (Outcome{Drained: true, PurgeLedger: true}) {
		t.Fatalf("last Succeeded outcome = %+v, want drained + purge", out)
	}
	if got := s.Pending("d1"); got != 0 {
		t.Fatalf("Pending = %d after drain", got)
	}
	if _, ok := s.Find("ev-4"); ok {
		t.Fatal("drained event still found")
	}
	wantNoneWait(t, s, 0)
	checkInvariants(t, s)

	// A drained lane that never failed has nothing to purge; a new event
	// on the same lane starts a fresh lane.
	appendTo(s, 0, L, ev(5))
	a6 := mustPick(t, s)
	wantAttempt(t, a6, L, 5, 1)
	if out := s.Succeeded(a6); out != (Outcome{Drained: true}) {
		t.Fatalf("outcome = %+v, want drained without purge", out)
	}
	checkInvariants(t, s)
}

func TestLanesAreIndependentFIFOs(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	A, B := lid("d1", "c1", "a"), lid("d1", "c1", "b")
	appendTo(s, 0, A, ev(1))
	appendTo(s, 0, B, ev(2))
	appendTo(s, 0, A, ev(3))
	appendTo(s, 0, B, ev(4))
	appendTo(s, 0, A, ev(5))
	appendTo(s, 0, B, ev(6))

	var got []uint64
	var out []*Attempt
	for len(got) < 6 {
		for {
			a, _ := step(s)
			if a == nil {
				break
			}
			for _, o := range out {
				if o.Lane == a.Lane {
					t.Fatalf("second attempt of %s while seq %d is out", a.Lane.ID, o.Entry.Seq)
				}
			}
			out = append(out, a)
			got = append(got, a.Entry.Seq)
		}
		checkInvariants(t, s)
		if len(out) == 0 {
			t.Fatal("stuck")
		}
		// Complete the oldest attempt out.
		s.Succeeded(out[0])
		out = out[1:]
	}
	if want := []uint64{1, 2, 3, 4, 5, 6}; !slices.Equal(got, want) {
		t.Fatalf("handed out %v, want %v", got, want)
	}
	var perA, perB []uint64
	for _, seq := range got {
		if seq%2 == 1 {
			perA = append(perA, seq)
		} else {
			perB = append(perB, seq)
		}
	}
	if !slices.IsSorted(perA) || !slices.IsSorted(perB) {
		t.Fatalf("lane order broken: a %v b %v", perA, perB)
	}
}

// ---------------------------------------------------------------------------
// 2. a failed head waits for NotBefore; other lanes keep flowing

func TestRetryWaitsForNotBefore(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d1", 0, unlimited)
	s.SetLimits("d2", 0, unlimited)
	A, B, C := lid("d1", "c1", "a"), lid("d1", "c1", "b"), lid("d2", "c9", "x")
	appendTo(s, 0, A, ev(1), ev(2))
	appendTo(s, 0, B, ev(10), ev(11), ev(12))
	appendTo(s, 0, C, ev(20), ev(21))

	// Destinations take turns, so collect the three heads by lane.
	byLane := map[lanes.ID]*Attempt{}
	for range 3 {
		x := mustPick(t, s)
		byLane[x.Lane.ID] = x
	}
	a, b, c := byLane[A], byLane[B], byLane[C]
	wantAttempt(t, a, A, 1, 1)
	wantAttempt(t, b, B, 10, 1)
	wantAttempt(t, c, C, 20, 1)
	wantNoneWait(t, s, 0)

	failed := Head{Attempts: 1, NotBefore: t0.Add(5 * time.Second), LastStatus: 503, LastError: "unavailable", FirstAttemptAt: t0, LastAttemptAt: t0}
	s.Retry(a, failed)
	checkInvariants(t, s)
	// Sleep exactly until NotBefore.
	wantNoneWait(t, s, 5*time.Second)
	if loc, ok := s.Find("ev-1"); !ok || loc.InFlight || loc.Head != failed || loc.Ahead != 0 {
		t.Fatalf("Find(ev-1) = %+v, %v", loc, ok)
	}
	if loc, ok := s.Find("ev-2"); !ok || loc.Ahead != 1 || loc.InFlight {
		t.Fatalf("Find(ev-2) = %+v, %v", loc, ok)
	}

	// Other lanes, same customer and another destination, keep flowing.
	s.Succeeded(b)
	b = mustPick(t, s)
	wantAttempt(t, b, B, 11, 1)
	wantNoneWait(t, s, 5*time.Second)

	clk.Advance(2 * time.Second)
	s.Succeeded(c)
	c = mustPick(t, s)
	wantAttempt(t, c, C, 21, 1)
	wantNoneWait(t, s, 3*time.Second)

	clk.Advance(3*time.Second - time.Nanosecond)
	s.Succeeded(b)
	b = mustPick(t, s)
	wantAttempt(t, b, B, 12, 1)
	// One nanosecond before NotBefore: still held, wait is that nanosecond.
	wantNoneWait(t, s, time.Nanosecond)
	checkInvariants(t, s)

	clk.Advance(time.Nanosecond)
	a = mustPick(t, s)
	wantAttempt(t, a, A, 1, 2)
	if a.Head != failed || !a.StartedAt.Equal(failed.NotBefore) {
		t.Fatalf("retry attempt = %+v", a)
	}
	wantNoneWait(t, s, 0)
	checkInvariants(t, s)

	// Retry with NotBefore in the past is due at once.
	s.Retry(a, Head{Attempts: 2, NotBefore: clk.Now().Add(-time.Minute)})
	a = mustPick(t, s)
	wantAttempt(t, a, A, 1, 3)
}

func TestWaitingLanesPromotedInNotBeforeOrder(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d1", 0, unlimited)
	rng := rand.New(rand.NewPCG(7, 7))
	const n = 200
	offsets := rng.Perm(n) // distinct NotBefore offsets, random insertion order
	for i, off := range offsets {
		id := lid("d1", fmt.Sprintf("c%d", i%7), fmt.Sprintf("k%d", i))
		nb := t0.Add(time.Duration(off+1) * time.Second)
		s.Restore(0, id, evs(uint64(off+1)), Head{Attempts: 1, NotBefore: nb}, true)
	}
	checkInvariants(t, s)
	for want := 1; want <= n; want++ {
		wait := mustNone(t, s)
		if exp := t0.Add(time.Duration(want) * time.Second).Sub(clk.Now()); wait != exp {
			t.Fatalf("wait = %v, want %v", wait, exp)
		}
		clk.Advance(wait)
		a := mustPick(t, s)
		if a.Entry.Seq != uint64(want) || a.Number != 2 {
			t.Fatalf("promoted seq %d (number %d), want %d", a.Entry.Seq, a.Number, want)
		}
		if want%37 == 0 {
			checkInvariants(t, s)
		}
	}
	wantNoneWait(t, s, 0)
	checkInvariants(t, s)
}

func TestRestoreWithFutureNotBeforeWaits(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d1", 0, unlimited)
	L := lid("d1", "c1", "k")
	head := Head{Attempts: 3, NotBefore: t0.Add(90 * time.Second), LastStatus: 429}
	s.Restore(0, L, evs(7, 8), head, true)
	wantNoneWait(t, s, 90*time.Second)
	// Appending to a waiting lane does not make it due.
	appendTo(s, 0, L, ev(9))
	wantNoneWait(t, s, 90*time.Second)
	checkInvariants(t, s)
	clk.Advance(90 * time.Second)
	a := mustPick(t, s)
	wantAttempt(t, a, L, 7, 4)
	if a.Head != head {
		t.Fatalf("head = %+v, want %+v", a.Head, head)
	}
}

// ---------------------------------------------------------------------------
// 3. no attempt without a token

func TestNoAttemptWithoutToken(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d1", 0, limits.Limits{RatePerSecond: 2, Burst: 1, MaxInFlight: 1000})
	for i := range 40 {
		appendTo(s, 0, lid("d1", "c1", fmt.Sprintf("k%02d", i)), ev(uint64(i+1)))
	}
	a := mustPick(t, s)
	wantAttempt(t, a, lid("d1", "c1", "k00"), 1, 1)
	// The wait is the time until the next token: not 0, not a poll interval.
	// Steps chosen so the token arithmetic is exact in binary.
	wantNoneWait(t, s, 500*time.Millisecond)
	clk.Advance(250 * time.Millisecond)
	wantNoneWait(t, s, 250*time.Millisecond)
	clk.Advance(125 * time.Millisecond)
	wantNoneWait(t, s, 125*time.Millisecond)
	clk.Advance(62500 * time.Microsecond)
	wantNoneWait(t, s, 62500*time.Microsecond)
	clk.Advance(62500 * time.Microsecond)
	a = mustPick(t, s)
	wantAttempt(t, a, lid("d1", "c1", "k01"), 2, 1)
	if !a.StartedAt.Equal(t0.Add(500 * time.Millisecond)) {
		t.Fatalf("StartedAt = %v", a.StartedAt)
	}
	wantNoneWait(t, s, 500*time.Millisecond)
	checkInvariants(t, s)

	// One nanosecond short of the token: still nothing, and the wait is
	// tiny (the budget rounds it up to at least a microsecond), not a poll.
	clk.Advance(500*time.Millisecond - time.Nanosecond)
	if w := mustNone(t, s); w <= 0 || w > time.Microsecond {
		t.Fatalf("wait 1ns before the token = %v", w)
	}
}

// simulateRate drives pick with a manual clock, sleeping exactly the wait
// pick returns, and returns the start times of the attempts made in
// [start, start+span].
func simulateRate(t *testing.T, lim limits.Limits, span time.Duration) []time.Duration {
	t.Helper()
	s, clk := newSched()
	s.SetLimits("d1", 0, lim)
	for i := range 1000 {
		appendTo(s, 0, lid("d1", "c1", fmt.Sprintf("k%d", i)), ev(uint64(i+1)))
	}
	end := t0.Add(span)
	var starts []time.Duration
	for !clk.Now().After(end) {
		a, wait := step(s)
		if a != nil {
			starts = append(starts, a.StartedAt.Sub(t0))
			continue
		}
		if wait <= 0 {
			t.Fatalf("no token and wait %v: the dispatcher would sleep until kicked", wait)
		}
		if wait > time.Second {
			t.Fatalf("wait %v is longer than one token interval", wait)
		}
		clk.Advance(wait)
	}
	return starts
}

func TestTokenRateOverTenSeconds(t *testing.T) {
	starts := simulateRate(t, limits.Limits{RatePerSecond: 2, Burst: 1, MaxInFlight: 1 << 20}, 10*time.Second)
	// burst 1 at t0, then one every 500ms: t0, +0.5s, …, +10s.
	if len(starts) != 21 {
		t.Fatalf("%d attempts in 10s at 2/s burst 1, want 21: %v", len(starts), starts)
	}
	for i, st := range starts {
		if want := time.Duration(i) * 500 * time.Millisecond; st != want {
			t.Fatalf("attempt %d at %v, want %v", i, st, want)
		}
	}

	// An awkward rate: 3/s burst 1 gives 1 + 30 attempts in 10s, give or
	// take the last one (token intervals are rounded up to the nanosecond).
	starts = simulateRate(t, limits.Limits{RatePerSecond: 3, Burst: 1, MaxInFlight: 1 << 20}, 10*time.Second)
	if n := len(starts); n < 30 || n > 31 {
		t.Fatalf("%d attempts in 10s at 3/s, want 30 or 31", n)
	}
	for i := 1; i < len(starts); i++ {
		if gap := starts[i] - starts[i-1]; gap < 333333333 || gap > 333333334 {
			t.Fatalf("gap %d = %v, want 1/3s", i, gap)
		}
	}

	// Burst 3: three at once, then the rate.
	starts = simulateRate(t, limits.Limits{RatePerSecond: 1, Burst: 3, MaxInFlight: 1 << 20}, 10*time.Second)
	if len(starts) != 13 || starts[0] != 0 || starts[1] != 0 || starts[2] != 0 || starts[3] != time.Second {
		t.Fatalf("burst 3 rate 1: %v", starts)
	}
}

func TestTokensDoNotAccumulateBeyondBurst(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d1", 0, limits.Limits{RatePerSecond: 2, Burst: 1, MaxInFlight: 100})
	clk.Advance(time.Minute) // idle: no lane, nothing spent, bucket capped
	for i := range 3 {
		appendTo(s, 0, lid("d1", "c1", fmt.Sprintf("k%d", i)), ev(uint64(i+1)))
	}
	mustPick(t, s)
	wantNoneWait(t, s, 500*time.Millisecond)
}

func TestTokenWaitCombinations(t *testing.T) {
	s, clk := newSched()
	// d1: out of tokens, next one in 1s.
	s.SetLimits("d1", 0, limits.Limits{RatePerSecond: 1, Burst: 1, MaxInFlight: 100})
	appendTo(s, 0, lid("d1", "c", "a"), ev(1))
	appendTo(s, 0, lid("d1", "c", "b"), ev(2))
	mustPick(t, s)
	wantNoneWait(t, s, time.Second)

	// A retry due sooner than the token wins.
	s.SetLimits("d2", 0, unlimited)
	s.Restore(0, lid("d2", "c", "r"), evs(3), Head{Attempts: 1, NotBefore: t0.Add(250 * time.Millisecond)}, true)
	wantNoneWait(t, s, 250*time.Millisecond)
	clk.Advance(250 * time.Millisecond)
	wantAttempt(t, mustPick(t, s), lid("d2", "c", "r"), 3, 2)
	wantNoneWait(t, s, 750*time.Millisecond)

	// A retry due later than the token loses.
	s.Restore(0, lid("d2", "c", "r2"), evs(4), Head{Attempts: 1, NotBefore: t0.Add(5 * time.Second)}, true)
	wantNoneWait(t, s, 750*time.Millisecond)

	// Raising the rate in place shortens the wait: 0.25s at 1/s earned
	// 0.25 token; the missing 0.75 token at 4/s takes 187.5ms.
	s.SetLimits("d1", 0, limits.Limits{RatePerSecond: 4, Burst: 1, MaxInFlight: 100})
	got := mustNone(t, s)
	if got != 187500*time.Microsecond {
		t.Fatalf("wait after raising the rate = %v, want 187.5ms", got)
	}
	clk.Advance(got)
	wantAttempt(t, mustPick(t, s), lid("d1", "c", "b"), 2, 1)

	// Rate 0 (the control plane never sends one) is held at the floor:
	// the burst, then one token in 1/rates.Min seconds.
	s2, _ := newSched()
	s2.SetLimits("z", 0, limits.Limits{RatePerSecond: 0, Burst: 1, MaxInFlight: 10})
	appendTo(s2, 0, lid("z", "c", "a"), ev(1))
	appendTo(s2, 0, lid("z", "c", "b"), ev(2))
	mustPick(t, s2)
	wantNoneWait(t, s2, time.Duration(float64(time.Second)/rates.Min))
}

func TestNoTokenSpentWhileAtMaxInFlight(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d1", 0, limits.Limits{RatePerSecond: 1, Burst: 2, MaxInFlight: 1})
	appendTo(s, 0, lid("d1", "c", "a"), ev(1))
	appendTo(s, 0, lid("d1", "c", "b"), ev(2))
	a := mustPick(t, s)
	// At the cap: no budget wait reported (a completion wakes the loop),
	// and no token spent.
	wantNoneWait(t, s, 0)
	s.mu.Lock()
	tokens := s.dests["d1"].budget.Tokens(clk.Now())
	s.mu.Unlock()
	if tokens != 1 {
		t.Fatalf("tokens = %v, want 1 (none spent at the cap)", tokens)
	}
	s.Succeeded(a)
	wantAttempt(t, mustPick(t, s), lid("d1", "c", "b"), 2, 1)
}

// ---------------------------------------------------------------------------
// 4. max in flight

func TestMaxInFlight(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d1", 0, limits.Limits{RatePerSecond: 1e9, Burst: 1 << 20, MaxInFlight: 2})
	s.SetLimits("d2", 0, limits.Limits{RatePerSecond: 1e9, Burst: 1 << 20, MaxInFlight: 1})
	var ids []lanes.ID
	for i := range 5 {
		id := lid("d1", "c1", fmt.Sprintf("k%d", i))
		ids = append(ids, id)
		appendTo(s, 0, id, ev(uint64(i+1)))
	}
	a1 := mustPick(t, s)
	a2 := mustPick(t, s)
	wantAttempt(t, a1, ids[0], 1, 1)
	wantAttempt(t, a2, ids[1], 2, 1)
	for range 3 {
		wantNoneWait(t, s, 0)
	}
	clk.Advance(time.Minute)
	wantNoneWait(t, s, 0)
	checkInvariants(t, s)

	// Another destination is not held by d1's cap.
	X := lid("d2", "c1", "x")
	appendTo(s, 0, X, ev(100), ev(101))
	x := mustPick(t, s)
	wantAttempt(t, x, X, 100, 1)
	wantNoneWait(t, s, 0)

	// Succeeded frees a slot: exactly one more.
	s.Succeeded(a1)
	a3 := mustPick(t, s)
	wantAttempt(t, a3, ids[2], 3, 1)
	wantNoneWait(t, s, 0)

	// Retry frees a slot (the retried lane itself waits).
	s.Retry(a2, Head{Attempts: 1, NotBefore: clk.Now().Add(time.Hour)})
	a4 := mustPick(t, s)
	wantAttempt(t, a4, ids[3], 4, 1)
	wantNoneWait(t, s, time.Hour)

	// Release frees a slot; the released lane queues behind k4.
	s.Release(a3)
	a5 := mustPick(t, s)
	wantAttempt(t, a5, ids[4], 5, 1)
	wantNoneWait(t, s, time.Hour)

	// Dead frees a slot.
	s.Dead(a4)
	a3 = mustPick(t, s)
	wantAttempt(t, a3, ids[2], 3, 1)
	wantNoneWait(t, s, time.Hour)

	// d2 (cap 1) after its attempt completes.
	s.Succeeded(x)
	wantAttempt(t, mustPick(t, s), X, 101, 1)
	checkInvariants(t, s)

	// A cap of 0 is treated as 1.
	s.SetLimits("d3", 0, limits.Limits{RatePerSecond: 1e9, Burst: 100, MaxInFlight: 0})
	appendTo(s, 0, lid("d3", "c", "a"), ev(200))
	appendTo(s, 0, lid("d3", "c", "b"), ev(201))
	wantAttempt(t, mustPick(t, s), lid("d3", "c", "a"), 200, 1)
	wantNoneWait(t, s, time.Hour)
}

func TestDestinationsTakeTurns(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	s.SetLimits("d2", 0, unlimited)
	for i := range 3 {
		appendTo(s, 0, lid("d1", "c", fmt.Sprintf("k%d", i)), ev(uint64(10+i)))
		appendTo(s, 0, lid("d2", "c", fmt.Sprintf("k%d", i)), ev(uint64(20+i)))
	}
	var got []string
	for range 6 {
		got = append(got, mustPick(t, s).Lane.ID.Destination)
	}
	if want := []string{"d1", "d2", "d1", "d2", "d1", "d2"}; !slices.Equal(got, want) {
		t.Fatalf("destinations in order %v, want %v", got, want)
	}
	checkInvariants(t, s)
}

// ---------------------------------------------------------------------------
// 5. first attempts before retries, oldest first

func TestFirstAttemptsBeforeRetries(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d1", 0, unlimited)
	R1, R2 := lid("d1", "c1", "r1"), lid("d1", "c1", "r2")
	F1, F2 := lid("d1", "c1", "f1"), lid("d1", "c1", "f2")
	// Two retries, the later-inserted one due first.
	s.Restore(0, R1, evs(1), Head{Attempts: 1, NotBefore: t0.Add(2 * time.Second)}, true)
	s.Restore(0, R2, evs(2), Head{Attempts: 1, NotBefore: t0.Add(1 * time.Second)}, true)
	clk.Advance(2 * time.Second)
	// Two first attempts arriving when both retries are due.
	appendTo(s, 0, F1, ev(3))
	appendTo(s, 0, F2, ev(4))
	checkInvariants(t, s)
	wantAttempt(t, mustPick(t, s), F1, 3, 1)
	wantAttempt(t, mustPick(t, s), F2, 4, 1)
	wantAttempt(t, mustPick(t, s), R2, 2, 2) // due at +1s: oldest retry
	wantAttempt(t, mustPick(t, s), R1, 1, 2)
	wantNoneWait(t, s, 0)
}

func TestFirstAttemptBeatsRetryDueAtSameInstant(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d1", 0, unlimited)
	R, F := lid("d1", "c1", "r"), lid("d1", "c1", "f")
	s.Restore(0, R, evs(1), Head{Attempts: 4, NotBefore: t0.Add(time.Second)}, true)
	clk.Advance(time.Second)
	appendTo(s, 0, F, ev(2)) // due at the same instant as R
	wantAttempt(t, mustPick(t, s), F, 2, 1)
	wantAttempt(t, mustPick(t, s), R, 1, 5)

	// A retry already due (queued earlier) still yields to a new first
	// attempt.
	s2, _ := newSched()
	s2.SetLimits("d1", 0, unlimited)
	s2.Restore(0, R, evs(1), Head{Attempts: 1, NotBefore: t0.Add(-time.Minute)}, true)
	appendTo(s2, 0, F, ev(2))
	wantAttempt(t, mustPick(t, s2), F, 2, 1)
	a := mustPick(t, s2)
	wantAttempt(t, a, R, 1, 2)

	// A released retry goes back among the retries, behind a due first
	// attempt.
	appendTo(s2, 0, lid("d1", "c1", "g"), ev(3))
	s2.Release(a)
	wantAttempt(t, mustPick(t, s2), lid("d1", "c1", "g"), 3, 1)
	wantAttempt(t, mustPick(t, s2), R, 1, 2)
	checkInvariants(t, s2)
}

// A retried lane does not wait for a backlog that keeps making first
// attempts: while both wait, a retry goes after firstsPerRetry first
// attempts (before, its head waited for every other lane of its customer
// to empty, and a poison event never used its attempts up).
func TestRetryNotLeftBehindABacklog(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	R := lid("d1", "c1", "r")
	s.Restore(0, R, evs(1), Head{Attempts: 1, NotBefore: t0.Add(-time.Second)}, true)
	for i := range 3 * firstsPerRetry {
		appendTo(s, 0, lid("d1", "c1", fmt.Sprintf("f%02d", i)), ev(uint64(10+i)))
	}
	for i := range firstsPerRetry {
		if a := mustPick(t, s); a.Lane.ID == R {
			t.Fatalf("pick %d was the retry, before %d first attempts went", i+1, firstsPerRetry)
		}
	}
	wantAttempt(t, mustPick(t, s), R, 1, 2)
	checkInvariants(t, s)

	// A retry that left its queue otherwise (an operator's skip) leaves
	// no count behind: the next retry waits its eight first attempts.
	R2, R3 := lid("d1", "c1", "r2"), lid("d1", "c1", "r3")
	s.Restore(0, R2, evs(2), Head{Attempts: 1, NotBefore: t0.Add(-time.Second)}, true)
	for range firstsPerRetry - 1 {
		mustPick(t, s)
	}
	if _, err := s.TakeHead(R2, ""); err != nil {
		t.Fatal(err)
	}
	s.Restore(0, R3, evs(3), Head{Attempts: 1, NotBefore: t0.Add(-time.Second)}, true)
	for i := range firstsPerRetry {
		if a := mustPick(t, s); a.Lane.ID == R3 {
			t.Fatalf("pick %d was the new retry: the count of one skipped carried over", i+1)
		}
	}
	wantAttempt(t, mustPick(t, s), R3, 3, 2)
}

func TestFirstAttemptsOldestFirst(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	for i := range 20 {
		appendTo(s, 0, lid("d1", "c1", fmt.Sprintf("k%d", 19-i)), ev(uint64(i+1)))
	}
	for i := range 20 {
		a := mustPick(t, s)
		if a.Entry.Seq != uint64(i+1) {
			t.Fatalf("pick %d got seq %d, want oldest first", i, a.Entry.Seq)
		}
	}
}

// ---------------------------------------------------------------------------
// 6. deficit round robin

func TestDRRWeightedShares(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	s.SetWeight("d1", "gold", 0, 5)
	s.SetWeight("d1", "bronze", 0, 1)
	seq := uint64(0)
	for i := range 9000 {
		seq++
		appendTo(s, 0, lid("d1", "gold", fmt.Sprintf("g%d", i)), ev(seq))
	}
	for i := range 3000 {
		seq++
		appendTo(s, 0, lid("d1", "bronze", fmt.Sprintf("b%d", i)), ev(seq))
	}
	checkInvariants(t, s)
	const picks = 10000
	count := map[string]int{}
	var first []string
	for i := range picks {
		a := mustPick(t, s)
		count[a.Lane.ID.Customer]++
		if i < 12 {
			first = append(first, a.Lane.ID.Customer)
		}
	}
	checkInvariants(t, s)
	wantPattern := []string{"gold", "gold", "gold", "gold", "gold", "bronze", "gold", "gold", "gold", "gold", "gold", "bronze"}
	if !slices.Equal(first, wantPattern) {
		t.Fatalf("first picks %v, want %v", first, wantPattern)
	}
	for cust, want := range map[string]float64{"gold": 5.0 / 6, "bronze": 1.0 / 6} {
		got := float64(count[cust]) / picks
		if math.Abs(got-want) > 0.05*want {
			t.Fatalf("%s share %.4f, want %.4f ±5%% (counts %v)", cust, got, want, count)
		}
	}
}

func TestDRRSharesWithCompletions(t *testing.T) {
	// Lanes with many entries that complete and come back: shares hold.
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	s.SetWeight("d1", "gold", 0, 5)
	seq := uint64(0)
	for _, cust := range []string{"gold", "bronze"} {
		for k := range 50 {
			var es []Entry
			for range 200 {
				seq++
				es = append(es, ev(seq))
			}
			appendTo(s, 0, lid("d1", cust, fmt.Sprintf("k%d", k)), es...)
		}
	}
	const picks = 6000
	count := map[string]int{}
	for range picks {
		a := mustPick(t, s)
		count[a.Lane.ID.Customer]++
		s.Succeeded(a)
	}
	checkInvariants(t, s)
	if got := float64(count["bronze"]) / picks; math.Abs(got-1.0/6) > 0.05/6 {
		t.Fatalf("bronze share %.4f, want 1/6 (counts %v)", got, count)
	}
}

func TestDRRWhaleDoesNotStarveSmallCustomer(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	for i := range 10000 {
		appendTo(s, 0, lid("d1", "whale", fmt.Sprintf("w%d", i)), ev(uint64(i+1)))
	}
	small := lid("d1", "small", "s")
	appendTo(s, 0, small, ev(20000))
	found := -1
	for i := range 2 {
		if a := mustPick(t, s); a.Lane.ID == small {
			found = i
		}
	}
	if found < 0 {
		t.Fatal("small customer's lane not picked within the first 2 picks")
	}

	// A small customer arriving while the whale is being served mid-way.
	for range 137 {
		if a := mustPick(t, s); a.Lane.ID.Customer != "whale" {
			t.Fatalf("unexpected %s", a.Lane.ID)
		}
	}
	late := lid("d1", "late", "l")
	appendTo(s, 0, late, ev(20001))
	found = -1
	for i := range 2 {
		if a := mustPick(t, s); a.Lane.ID == late {
			found = i
		}
	}
	if found < 0 {
		t.Fatal("late small customer's lane not picked within 2 picks")
	}
	checkInvariants(t, s)
}

func TestDRRFractionalWeights(t *testing.T) {
	// A lone customer of weight 0.5 is served at once.
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	s.SetWeight("d1", "half", 0, 0.5)
	appendTo(s, 0, lid("d1", "half", "a"), ev(1))
	wantAttempt(t, mustPick(t, s), lid("d1", "half", "a"), 1, 1)

	// Weight 0.5 against weight 1: one third of the attempts.
	s, _ = newSched()
	s.SetLimits("d1", 0, unlimited)
	s.SetWeight("d1", "half", 0, 0.5)
	seq := uint64(0)
	for _, cust := range []string{"half", "full"} {
		for i := range 3000 {
			seq++
			appendTo(s, 0, lid("d1", cust, fmt.Sprintf("k%d", i)), ev(seq))
		}
	}
	const picks = 3000
	count := map[string]int{}
	for range picks {
		count[mustPick(t, s).Lane.ID.Customer]++
	}
	if got := float64(count["half"]) / picks; math.Abs(got-1.0/3) > 0.05/3 {
		t.Fatalf("half share %.4f, want 1/3 (counts %v)", got, count)
	}

	// Weight 0 is clamped to 0.01: still served, about once per 101 picks.
	s, _ = newSched()
	s.SetLimits("d1", 0, unlimited)
	s.SetWeight("d1", "tiny", 0, 0)
	for i := range 1000 {
		appendTo(s, 0, lid("d1", "big", fmt.Sprintf("k%d", i)), ev(uint64(i+1)))
	}
	appendTo(s, 0, lid("d1", "tiny", "t"), ev(5000))
	served := -1
	for i := range 250 {
		if mustPick(t, s).Lane.ID.Customer == "tiny" {
			served = i
			break
		}
	}
	if served < 0 {
		t.Fatal("weight-0.01 customer not served within 250 picks")
	}
	checkInvariants(t, s)
}

func TestSetWeightAppliesToExistingCustomer(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	seq := uint64(0)
	for _, cust := range []string{"a", "b"} {
		for i := range 100 {
			seq++
			appendTo(s, 0, lid("d1", cust, fmt.Sprintf("k%d", i)), ev(seq))
		}
	}
	s.SetWeight("d1", "a", 0, 3)
	var got []string
	for range 8 {
		got = append(got, mustPick(t, s).Lane.ID.Customer)
	}
	if want := []string{"a", "a", "a", "b", "a", "a", "a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("picks %v, want %v", got, want)
	}
}

// ---------------------------------------------------------------------------
// 7. unconfigured destinations are held

func TestUnconfiguredDestinationHeld(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d2", 0, unlimited)
	A := lid("d1", "c1", "a")
	W := lid("d1", "c1", "w")
	B := lid("d2", "c1", "b")
	appendTo(s, 0, A, ev(1))
	s.Restore(0, W, evs(2), Head{Attempts: 1, NotBefore: t0.Add(time.Second)}, true)
	appendTo(s, 0, B, ev(3))
	wantAttempt(t, mustPick(t, s), B, 3, 1)
	wantNoneWait(t, s, time.Second)
	clk.Advance(time.Hour)
	for range 3 {
		wantNoneWait(t, s, 0)
	}
	checkInvariants(t, s)
	if got := s.Pending("d1"); got != 2 {
		t.Fatalf("Pending(d1) = %d", got)
	}
	// SetWeight alone does not configure a destination.
	s.SetWeight("d1", "c1", 0, 2)
	wantNoneWait(t, s, 0)

	s.SetLimits("d1", 0, unlimited)
	got := map[uint64]bool{}
	for range 2 {
		got[mustPick(t, s).Entry.Seq] = true
	}
	if !got[1] || !got[2] {
		t.Fatalf("after SetLimits got %v, want seqs 1 and 2", got)
	}
	wantNoneWait(t, s, 0)
	checkInvariants(t, s)
}

// ---------------------------------------------------------------------------
// 8. TakeDestination and DropPartition

func TestTakeDestination(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d1", 0, unlimited)
	s.SetLimits("d2", 0, unlimited)
	A := lid("d1", "c1", "a") // in flight
	B := lid("d1", "c1", "b") // due
	C := lid("d1", "c2", "c") // waiting
	D := lid("d1", "c3", "d") // due retry
	E := lid("d2", "c1", "e") // other destination, waiting
	F := lid("d2", "c1", "f") // other destination, due
	appendTo(s, 0, A, ev(1), ev(2))
	a := mustPick(t, s)
	wantAttempt(t, a, A, 1, 1)
	appendTo(s, 0, B, ev(3), ev(4))
	s.Restore(0, C, evs(5, 6), Head{Attempts: 2, NotBefore: t0.Add(3 * time.Second)}, true)
	s.Restore(0, D, evs(7), Head{Attempts: 1, NotBefore: t0}, true)
	s.Restore(0, E, evs(8), Head{Attempts: 1, NotBefore: t0.Add(2 * time.Second)}, true)
	s.Restore(0, lid("d2", "c1", "e2"), evs(9), Head{Attempts: 1, NotBefore: t0.Add(4 * time.Second)}, true)
	checkInvariants(t, s)

	taken, _ := s.TakeDestination("d1")
	checkInvariants(t, s)
	got := map[lanes.ID][]uint64{}
	for l, es := range taken {
		for _, e := range es {
			got[l.ID] = append(got[l.ID], e.Seq)
		}
	}
	want := map[lanes.ID][]uint64{B: {3, 4}, C: {5, 6}, D: {7}}
	if len(got) != len(want) {
		t.Fatalf("taken %v, want %v", got, want)
	}
	for id, seqs := range want {
		if !slices.Equal(got[id], seqs) {
			t.Fatalf("taken %v, want %v", got, want)
		}
	}
	if n := s.Pending("d1"); n != 2 {
		t.Fatalf("Pending(d1) = %d, want 2 (the in-flight lane)", n)
	}
	for _, id := range []string{"ev-3", "ev-4", "ev-5", "ev-7"} {
		if _, ok := s.Find(id); ok {
			t.Fatalf("taken event %s still found", id)
		}
	}
	if loc, ok := s.Find("ev-1"); !ok || !loc.InFlight {
		t.Fatalf("in-flight head: %+v %v", loc, ok)
	}

	// Other destinations keep working; the heap is intact.
	appendTo(s, 0, F, ev(10))
	wantAttempt(t, mustPick(t, s), F, 10, 1)
	wantNoneWait(t, s, 2*time.Second)
	clk.Advance(2 * time.Second)
	wantAttempt(t, mustPick(t, s), E, 8, 2)
	wantNoneWait(t, s, 2*time.Second) // C (3s) is gone; e2 at 4s
	clk.Advance(2 * time.Second)
	wantAttempt(t, mustPick(t, s), lid("d2", "c1", "e2"), 9, 2)
	wantNoneWait(t, s, 0)

	// The in-flight lane finishing does not hand d1 out again.
	if out := s.Succeeded(a); out.Drained {
		t.Fatalf("outcome %+v", out)
	}
	clk.Advance(time.Hour)
	wantNoneWait(t, s, 0)
	checkInvariants(t, s)
	// Neither does a new event for the taken destination.
	appendTo(s, 0, B, ev(11))
	wantNoneWait(t, s, 0)
	if n := s.Pending("d1"); n != 2 {
		t.Fatalf("Pending(d1) = %d, want 2", n)
	}

	// A second take gets the rest.
	taken, _ = s.TakeDestination("d1")
	got = map[lanes.ID][]uint64{}
	for l, es := range taken {
		for _, e := range es {
			got[l.ID] = append(got[l.ID], e.Seq)
		}
	}
	if len(got) != 2 || !slices.Equal(got[A], []uint64{2}) || !slices.Equal(got[B], []uint64{11}) {
		t.Fatalf("second take %v", got)
	}
	if n := s.Pending("d1"); n != 0 {
		t.Fatalf("Pending(d1) = %d", n)
	}
	checkInvariants(t, s)
	if taken, _ := s.TakeDestination("nope"); taken != nil {
		t.Fatal("TakeDestination of an unknown destination returned lanes")
	}

	// Reconfigured, the destination works again.
	s.SetLimits("d1", 0, unlimited)
	appendTo(s, 0, A, ev(12))
	wantAttempt(t, mustPick(t, s), A, 12, 1)
	checkInvariants(t, s)
}

func TestTakeDestinationInFlightRetryStaysHeld(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d1", 0, unlimited)
	A := lid("d1", "c1", "a")
	appendTo(s, 0, A, ev(1))
	a := mustPick(t, s)
	if taken, _ := s.TakeDestination("d1"); len(taken) != 0 {
		t.Fatalf("took %d lanes, want none (only lane in flight)", len(taken))
	}
	s.Retry(a, Head{Attempts: 1, NotBefore: t0.Add(time.Second)})
	clk.Advance(time.Second)
	wantNoneWait(t, s, 0)
	checkInvariants(t, s)
	if n := s.Pending("d1"); n != 1 {
		t.Fatalf("Pending = %d", n)
	}
	taken, _ := s.TakeDestination("d1")
	if len(taken) != 1 {
		t.Fatalf("second take got %d lanes, want 1", len(taken))
	}
	checkInvariants(t, s)
}

func TestDropPartition(t *testing.T) {
	s, clk := newSched()
	// Partition 1: destinations d1a and d1b; partition 2: d2.
	for _, d := range []struct {
		id string
		p  int
	}{{"d1a", 1}, {"d1b", 1}, {"d2", 2}} {
		s.SetLimits(d.id, d.p, unlimited)
	}
	X, Y, Z := lid("d1a", "c", "x"), lid("d1a", "c", "y"), lid("d1b", "c", "z")
	appendTo(s, 1, X, ev(1), ev(2))
	appendTo(s, 1, Y, ev(3), ev(4))
	appendTo(s, 1, Z, ev(5), ev(6))
	byLane := map[lanes.ID]*Attempt{}
	for range 3 {
		a := mustPick(t, s)
		byLane[a.Lane.ID] = a
	}
	ax, ay, az := byLane[X], byLane[Y], byLane[Z]
	wantAttempt(t, ax, X, 1, 1)
	wantAttempt(t, ay, Y, 3, 1)
	wantAttempt(t, az, Z, 5, 1)
	appendTo(s, 1, lid("d1a", "c", "due"), ev(7))
	// Interleaved waiting lanes of both partitions.
	rng := rand.New(rand.NewPCG(3, 4))
	for i, off := range rng.Perm(60) {
		nb := t0.Add(time.Duration(off+1) * time.Second)
		seq := uint64(1000 + off)
		if off%2 == 0 {
			s.Restore(1, lid([]string{"d1a", "d1b"}[i%2], "w", fmt.Sprintf("w%d", i)), evs(seq), Head{Attempts: 1, NotBefore: nb}, true)
		} else {
			s.Restore(2, lid("d2", "w", fmt.Sprintf("w%d", i)), evs(seq), Head{Attempts: 1, NotBefore: nb}, true)
		}
	}
	checkInvariants(t, s)
	if got := s.LowWater(1); got != 1 {
		t.Fatalf("LowWater(1) = %d", got)
	}

	s.DropPartition(1)
	checkInvariants(t, s)
	if got := s.LowWater(1); got != 0 {
		t.Fatalf("LowWater(1) after drop = %d", got)
	}
	if got := s.Pending("d1a"); got != 0 {
		t.Fatalf("Pending(d1a) after drop = %d", got)
	}
	if _, ok := s.Find("ev-2"); ok {
		t.Fatal("dropped event still found")
	}
	// Partition 1's waiting lane at +1s is gone: next is partition 2's at +2s.
	wantNoneWait(t, s, 2*time.Second)

	// Outcomes of attempts still in flight are ignored: nothing of the
	// dropped partition is handed out again.
	if out := s.Succeeded(ax); out.Drained || out.PurgeLedger {
		t.Fatalf("Succeeded after drop = %+v", out)
	}
	s.Retry(ay, Head{Attempts: 1, NotBefore: clk.Now().Add(500 * time.Millisecond)})
	s.Release(az)
	checkInvariants(t, s)
	wantNoneWait(t, s, 2*time.Second)

	// Partition 2's lanes come out in NotBefore order, and only they do.
	var got []uint64
	for {
		a, wait := step(s)
		if a != nil {
			if a.Lane.Partition != 2 {
				t.Fatalf("dropped partition's lane %s seq %d handed out", a.Lane.ID, a.Entry.Seq)
			}
			got = append(got, a.Entry.Seq)
			continue
		}
		if wait == 0 {
			break
		}
		clk.Advance(wait)
	}
	if len(got) != 30 || !slices.IsSorted(got) {
		t.Fatalf("partition 2 handed out %v", got)
	}
	checkInvariants(t, s)
	// Every head of partition 2 is in flight; in-flight heads still count.
	if got := s.LowWater(2); got != 1001 {
		t.Fatalf("LowWater(2) = %d, want 1001", got)
	}
}

func TestDropPartitionThenReacquire(t *testing.T) {
	// The partition comes back (rebuilt from the store) while an attempt
	// of the old incarnation is still out: the old attempt's outcome must
	// not put a second copy of the lane in play.
	s, _ := newSched()
	s.SetLimits("d1", 1, unlimited)
	X := lid("d1", "c", "x")
	appendTo(s, 1, X, ev(1), ev(2), ev(3))
	old := mustPick(t, s)
	wantAttempt(t, old, X, 1, 1)

	s.DropPartition(1)
	s.SetLimits("d1", 1, unlimited)
	s.Restore(1, X, evs(1, 2, 3), Head{}, false)
	cur := mustPick(t, s)
	wantAttempt(t, cur, X, 1, 1)
	if cur.Lane == old.Lane {
		t.Fatal("rebuilt lane is the dropped lane object")
	}

	s.Succeeded(old) // stale outcome: ignored
	checkInvariants(t, s)
	wantNoneWait(t, s, 0)
	s.Succeeded(cur)
	wantAttempt(t, mustPick(t, s), X, 2, 1)
	wantNoneWait(t, s, 0)
	if got := s.LowWater(1); got != 2 {
		t.Fatalf("LowWater(1) = %d, want 2", got)
	}
	checkInvariants(t, s)
}

// ---------------------------------------------------------------------------
// 9. LowWater and Find

// checkHasPending asserts that HasPending says what LowWater != 0 says,
// for every partition with a destination (the reclaimer asks the cheap
// one between purges).
func checkHasPending(t *testing.T, s *Scheduler) {
	t.Helper()
	s.mu.Lock()
	parts := map[int]bool{}
	for _, d := range s.dests {
		parts[d.partition] = true
	}
	s.mu.Unlock()
	for p := range parts {
		if has, low := s.HasPending(p), s.LowWater(p); has != (low != 0) {
			t.Fatalf("partition %d: HasPending %v, LowWater %d", p, has, low)
		}
	}
}

func TestLowWater(t *testing.T) {
	s, clk := newSched()
	if got := s.LowWater(0); got != 0 {
		t.Fatalf("LowWater of empty partition = %d", got)
	}
	s.SetLimits("d1", 0, unlimited)
	s.SetLimits("d3", 0, unlimited)
	s.SetLimits("d2", 1, unlimited)
	A, B, C, D := lid("d1", "c", "a"), lid("d1", "c", "b"), lid("d3", "c", "c"), lid("d2", "c", "d")
	appendTo(s, 0, A, ev(5), ev(9))
	appendTo(s, 0, B, ev(3), ev(7))
	s.Restore(0, C, evs(12), Head{Attempts: 1, NotBefore: t0.Add(time.Minute)}, true)
	appendTo(s, 1, D, ev(1))
	if got := s.LowWater(0); got != 3 {
		t.Fatalf("LowWater(0) = %d, want 3", got)
	}
	if got := s.LowWater(1); got != 1 {
		t.Fatalf("LowWater(1) = %d, want 1", got)
	}
	if got := s.LowWater(7); got != 0 {
		t.Fatalf("LowWater(7) = %d, want 0", got)
	}
	if low, pending := s.Backlog(0); low != 3 || pending != 5 {
		t.Fatalf("Backlog(0) = %d, %d; want 3, 5", low, pending)
	}
	if low, pending := s.Backlog(7); low != 0 || pending != 0 {
		t.Fatalf("Backlog(7) = %d, %d; want 0, 0", low, pending)
	}
	byLane := map[lanes.ID]*Attempt{}
	for {
		a, _ := step(s)
		if a == nil {
			break
		}
		byLane[a.Lane.ID] = a
	}
	// In-flight heads still count.
	if got := s.LowWater(0); got != 3 {
		t.Fatalf("LowWater(0) with heads in flight = %d, want 3", got)
	}
	s.Succeeded(byLane[B])
	if got := s.LowWater(0); got != 5 {
		t.Fatalf("LowWater(0) = %d, want 5", got)
	}
	if _, pending := s.Backlog(0); pending != 4 {
		t.Fatalf("Backlog(0) after a success: %d pending, want 4", pending)
	}
	s.Succeeded(byLane[A])
	if got := s.LowWater(0); got != 7 {
		t.Fatalf("LowWater(0) = %d, want 7", got)
	}
	s.Succeeded(byLane[D])
	if got := s.LowWater(1); got != 0 {
		t.Fatalf("LowWater(1) drained = %d, want 0", got)
	}
	for {
		a, wait := step(s)
		if a == nil && wait == 0 {
			break
		}
		if a == nil {
			clk.Advance(wait)
			continue
		}
		s.Succeeded(a)
	}
	if got := s.LowWater(0); got != 0 {
		t.Fatalf("LowWater(0) drained = %d, want 0", got)
	}
	checkInvariants(t, s)
}

func TestFind(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	A, B := lid("d1", "c", "a"), lid("d1", "c", "b")
	W := lid("d1", "c", "w")
	appendTo(s, 0, A, ev(1), ev(2), ev(3))
	a := mustPick(t, s)
	appendTo(s, 3, lid("dx", "c", "u"), ev(50)) // unconfigured, partition 3
	appendTo(s, 0, B, ev(4))
	wh := Head{Attempts: 2, NotBefore: t0.Add(time.Minute), LastStatus: 500, LastError: "e"}
	s.Restore(0, W, evs(5, 6), wh, true)

	cases := []struct {
		id   string
		want Location
	}{
		{"ev-1", Location{Lane: A, Partition: 0, Entry: ev(1), Ahead: 0, InFlight: true}},
		{"ev-2", Location{Lane: A, Partition: 0, Entry: ev(2), Ahead: 1}},
		{"ev-3", Location{Lane: A, Partition: 0, Entry: ev(3), Ahead: 2}},
		{"ev-4", Location{Lane: B, Partition: 0, Entry: ev(4), Ahead: 0, Due: true}},
		{"ev-5", Location{Lane: W, Partition: 0, Entry: ev(5), Ahead: 0, Head: wh}},
		{"ev-6", Location{Lane: W, Partition: 0, Entry: ev(6), Ahead: 1}},
		{"ev-50", Location{Lane: lid("dx", "c", "u"), Partition: 3, Entry: ev(50), Due: true}},
	}
	for _, c := range cases {
		got, ok := s.Find(c.id)
		if !ok || got != c.want {
			t.Fatalf("Find(%s) = %+v, %v; want %+v", c.id, got, ok, c.want)
		}
	}
	if _, ok := s.Find("ev-999"); ok {
		t.Fatal("Find of an unknown event succeeded")
	}
	s.Succeeded(a)
	if _, ok := s.Find("ev-1"); ok {
		t.Fatal("delivered event still found")
	}
	if got, ok := s.Find("ev-3"); !ok || got.Ahead != 1 {
		t.Fatalf("Find(ev-3) = %+v %v, want 1 ahead", got, ok)
	}
}

// ---------------------------------------------------------------------------
// 10. Release

func TestReleaseKeepsAttemptState(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	L := lid("d1", "c", "l")
	head := Head{Attempts: 3, NotBefore: t0.Add(-time.Second), LastStatus: 502, LastError: "bad gateway",
		FirstAttemptAt: t0.Add(-time.Hour), LastAttemptAt: t0.Add(-time.Minute)}
	s.Restore(0, L, evs(1, 2), head, true)
	a := mustPick(t, s)
	wantAttempt(t, a, L, 1, 4)
	s.Release(a)
	checkInvariants(t, s)
	if loc, ok := s.Find("ev-1"); !ok || loc.InFlight || loc.Head != head {
		t.Fatalf("after Release Find = %+v %v", loc, ok)
	}
	if n := s.Pending("d1"); n != 2 {
		t.Fatalf("Pending = %d", n)
	}
	b := mustPick(t, s)
	wantAttempt(t, b, L, 1, 4)
	if b.Head != head {
		t.Fatalf("released head = %+v, want %+v", b.Head, head)
	}
	wantNoneWait(t, s, 0)
	s.Succeeded(b)
	c := mustPick(t, s)
	wantAttempt(t, c, L, 2, 1)
	if out := s.Succeeded(c); out != (Outcome{Drained: true, PurgeLedger: true}) {
		t.Fatalf("outcome %+v", out)
	}

	// A released first attempt is a first attempt again.
	appendTo(s, 0, L, ev(3))
	a = mustPick(t, s)
	s.Release(a)
	a = mustPick(t, s)
	wantAttempt(t, a, L, 3, 1)
	if a.Head != (Head{}) {
		t.Fatalf("head %+v", a.Head)
	}
	if out := s.Succeeded(a); out != (Outcome{Drained: true}) {
		t.Fatalf("outcome %+v", out)
	}
	checkInvariants(t, s)
}

// ---------------------------------------------------------------------------
// randomized model check

type modelLane struct {
	id        lanes.ID
	part      int
	seqs      []uint64
	attempts  int
	notBefore time.Time
	hasLedger bool
	out       *Attempt
}

func TestRandomizedAgainstModel(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed) })
	}
}

// model is one randomized run against the model: the scheduler, its
// clock, and what the model expects of every lane.
type model struct {
	t           *testing.T
	rng         *rand.Rand
	s           *Scheduler
	clk         *clock.Manual
	dests       []modelDest
	custs       []string
	keys        []string
	maxIF       map[string]int  // configured destinations
	forgotten   map[string]bool // deleted (ForgetDestination), not configured since
	lanes       map[string]*modelLane
	outstanding []*Attempt
	stale       map[*Attempt]bool
	owner       map[*Attempt]*modelLane
	delivered   map[uint64]bool
	nextSeq     uint64
}

type modelDest struct {
	id   string
	part int
}

func runModel(t *testing.T, seed uint64) {
	s, clk := newSched()
	m := &model{t: t, rng: rand.New(rand.NewPCG(seed, 0x5eed)), s: s, clk: clk,
		dests: []modelDest{{"d0", 0}, {"d1", 0}, {"d2", 1}, {"d3", 2}},
		custs: []string{"c0", "c1", "c2"}, keys: []string{"k0", "k1", "k2", "k3"},
		maxIF: map[string]int{}, forgotten: map[string]bool{}, lanes: map[string]*modelLane{},
		stale: map[*Attempt]bool{}, owner: map[*Attempt]*modelLane{}, delivered: map[uint64]bool{}}
	for range 2500 {
		d := m.dests[m.rng.IntN(len(m.dests))]
		m.act(d, m.rng.IntN(100))
		m.check(d)
	}
	m.drain()
}

// act does one random thing (r of 100) to destination d.
func (m *model) act(d modelDest, r int) {
	t, s, rng := m.t, m.s, m.rng
	switch {
	case r < 22: // new events
		m.newEvents(d)
	case r < 26: // rebuilt lane with ledger state
		m.rebuiltLane(d)
	case r < 55: // dispatcher
		a, wait := step(s)
		if a != nil {
			m.onAttempt(a)
		} else {
			m.onIdle(wait)
		}
	case r < 75: // a worker reports
		if len(m.outstanding) > 0 {
			m.complete(rng.IntN(len(m.outstanding)), rng.IntN(4))
		}
	case r < 82:
		m.clk.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
	case r < 85: // an operator skips a lane's head
		skipModel(t, s, m.lanes, d.id, m.custs[rng.IntN(len(m.custs))], m.keys[rng.IntN(len(m.keys))], d.part, m.delivered)
	case r < 92:
		lim := limits.Limits{RatePerSecond: 1e9, Burst: 1 << 20, MaxInFlight: 1 + rng.IntN(3)}
		s.SetLimits(d.id, d.part, lim)
		m.maxIF[d.id] = lim.MaxInFlight
		delete(m.forgotten, d.id)
	case r < 94:
		m.forgetUnknown(d)
	case r < 97:
		m.takeDestination(d)
	default:
		m.dropPartition(d)
	}
}

func (m *model) newEvents(d modelDest) {
	s, rng := m.s, m.rng
	id := lid(d.id, m.custs[rng.IntN(len(m.custs))], m.keys[rng.IntN(len(m.keys))])
	var es []Entry
	for range 1 + rng.IntN(3) {
		m.nextSeq++
		es = append(es, ev(m.nextSeq))
	}
	if len(s.Snapshot(d.id)) == 0 {
		delete(m.forgotten, d.id) // a destination anew, not the one deleted
	}
	appendTo(s, d.part, id, es...)
	ml := m.lanes[id.Subject(d.part)]
	if ml == nil {
		ml = &modelLane{id: id, part: d.part}
		m.lanes[id.Subject(d.part)] = ml
	}
	for _, e := range es {
		ml.seqs = append(ml.seqs, e.Seq)
	}
}

func (m *model) rebuiltLane(d modelDest) {
	s, rng := m.s, m.rng
	id := lid(d.id, m.custs[rng.IntN(len(m.custs))], "r"+m.keys[rng.IntN(len(m.keys))])
	if m.lanes[id.Subject(d.part)] != nil {
		return
	}
	m.nextSeq++
	nb := m.clk.Now().Add(time.Duration(rng.IntN(4000)-1000) * time.Millisecond)
	head := Head{Attempts: 1 + rng.IntN(5), NotBefore: nb}
	if len(s.Snapshot(d.id)) == 0 {
		delete(m.forgotten, d.id)
	}
	s.Restore(d.part, id, evs(m.nextSeq), head, true)
	m.lanes[id.Subject(d.part)] = &modelLane{id: id, part: d.part, seqs: []uint64{m.nextSeq},
		attempts: head.Attempts, notBefore: nb, hasLedger: true}
}

func (m *model) takeDestination(d modelDest) {
	t, s := m.t, m.s
	taken, _ := s.TakeDestination(d.id)
	want := 0
	for subj, ml := range m.lanes {
		if ml.id.Destination != d.id || ml.out != nil {
			continue
		}
		want++
		var got []uint64
		for l, es := range taken {
			if l.Subject == subj {
				for _, e := range es {
					got = append(got, e.Seq)
				}
			}
		}
		if !slices.Equal(got, ml.seqs) {
			t.Fatalf("TakeDestination(%s) lane %s: got %v, want %v", d.id, ml.id, got, ml.seqs)
		}
		delete(m.lanes, subj)
	}
	if len(taken) != want {
		t.Fatalf("TakeDestination(%s) took %d lanes, want %d", d.id, len(taken), want)
	}
	delete(m.maxIF, d.id)
	if m.rng.IntN(2) == 0 { // deleted: the config without it applied
		s.ForgetDestination(d.id)
		m.forgotten[d.id] = true
	}
}

// forgetUnknown tells the scheduler the config does not have d: a no-op
// unless d has events and was neither configured nor forgotten; else its
// lanes go at once, without a token.
func (m *model) forgetUnknown(d modelDest) {
	_, configured := m.maxIF[d.id]
	known := len(m.s.Snapshot(d.id)) != 0
	m.s.ForgetUnknown(d.id)
	if configured || m.forgotten[d.id] || !known {
		return
	}
	m.forgotten[d.id] = true
	now := m.clk.Now()
	for _, ml := range m.lanes {
		if ml.id.Destination == d.id && ml.out == nil && ml.notBefore.After(now) {
			ml.notBefore = now
		}
	}
}

// capOf is how many attempts of dest may be out, and whether any may.
func (m *model) capOf(dest string) (int, bool) {
	if m.forgotten[dest] {
		return deletedInFlight, true
	}
	lim, configured := m.maxIF[dest]
	return lim, configured
}

func (m *model) dropPartition(d modelDest) {
	s := m.s
	s.DropPartition(d.part)
	for subj, ml := range m.lanes {
		if ml.part != d.part {
			continue
		}
		if ml.out != nil {
			m.stale[ml.out] = true
		}
		delete(m.lanes, subj)
	}
	for _, x := range m.dests {
		if x.part == d.part {
			delete(m.maxIF, x.id)
		}
	}
	if got := s.LowWater(d.part); got != 0 {
		m.t.Fatalf("LowWater(%d) after drop = %d", d.part, got)
	}
}

// check compares the scheduler with the model after a step on d.
func (m *model) check(d modelDest) {
	t, s := m.t, m.s
	checkInvariants(t, s)
	checkListLanes(t, s, m.lanes, d.id)
	for _, x := range m.dests {
		want := 0
		for _, ml := range m.lanes {
			if ml.id.Destination == x.id {
				want += len(ml.seqs)
			}
		}
		if got := s.Pending(x.id); got != want {
			t.Fatalf("Pending(%s) = %d, want %d", x.id, got, want)
		}
		// A deleted destination is gone once nothing of it is left.
		if m.forgotten[x.id] && want == 0 && len(s.Snapshot(x.id)) != 0 {
			t.Fatalf("%s was deleted and has nothing pending, yet is in the snapshot", x.id)
		}
		_, configured := m.maxIF[x.id]
		if listed, unknown := slices.Contains(s.Unconfigured(), x.id), want > 0 && !configured && !m.forgotten[x.id]; listed != unknown {
			t.Fatalf("Unconfigured() lists %s: %v, want %v (%d pending, configured %v, forgotten %v)", x.id, listed, unknown, want, configured, m.forgotten[x.id])
		}
	}
	for p := range 3 {
		var want uint64
		for _, ml := range m.lanes {
			if ml.part == p && (want == 0 || ml.seqs[0] < want) {
				want = ml.seqs[0]
			}
		}
		if got := s.LowWater(p); got != want {
			t.Fatalf("LowWater(%d) = %d, want %d", p, got, want)
		}
	}
}

// drain delivers everything still pending: in order, exactly once.
func (m *model) drain() {
	t, s := m.t, m.s
	for _, x := range m.dests {
		s.SetLimits(x.id, x.part, unlimited)
		m.maxIF[x.id] = unlimited.MaxInFlight
		delete(m.forgotten, x.id)
	}
	for range 100000 {
		for len(m.outstanding) > 0 {
			m.complete(0, 0)
		}
		a, wait := step(s)
		switch {
		case a != nil:
			m.onAttempt(a)
		case wait > 0:
			m.onIdle(wait)
			m.clk.Advance(wait)
		default:
			m.onIdle(wait)
			if len(m.lanes) != 0 {
				t.Fatalf("idle with %d lanes pending", len(m.lanes))
			}
			checkInvariants(t, s)
			for _, x := range m.dests {
				if n := s.Pending(x.id); n != 0 {
					t.Fatalf("Pending(%s) = %d after drain", x.id, n)
				}
			}
			return
		}
	}
	t.Fatal("drain did not finish")
}

func (m *model) inFlight(dest string) int {
	n := 0
	for _, ml := range m.lanes {
		if ml.id.Destination == dest && ml.out != nil {
			n++
		}
	}
	return n
}

// onAttempt checks an attempt handed out against the model.
func (m *model) onAttempt(a *Attempt) {
	t, s := m.t, m.s
	t.Helper()
	now := m.clk.Now()
	ml := m.lanes[a.Lane.Subject]
	if ml == nil {
		t.Fatalf("handed out %s seq %d: lane is not pending (dropped, taken or drained)", a.Lane.ID, a.Entry.Seq)
	}
	s.mu.Lock()
	live := s.dests[a.Lane.ID.Destination]
	ok := live != nil && live == a.Lane.dest && live.lanes[a.Lane.Subject] == a.Lane
	s.mu.Unlock()
	if !ok {
		t.Fatalf("handed out a forgotten copy of lane %s", a.Lane.ID)
	}
	if ml.out != nil {
		t.Fatalf("second attempt of %s (seq %d) while seq %d is out", a.Lane.ID, a.Entry.Seq, ml.out.Entry.Seq)
	}
	if a.Entry.Seq != ml.seqs[0] {
		t.Fatalf("lane %s handed out seq %d, head is %d", a.Lane.ID, a.Entry.Seq, ml.seqs[0])
	}
	if now.Before(ml.notBefore) {
		t.Fatalf("lane %s attempted at %v before not_before %v", a.Lane.ID, now, ml.notBefore)
	}
	lim, configured := m.capOf(a.Lane.ID.Destination)
	if !configured {
		t.Fatalf("lane %s of an unconfigured destination handed out", a.Lane.ID)
	}
	if a.Unconfigured != m.forgotten[a.Lane.ID.Destination] {
		t.Fatalf("lane %s handed out with Unconfigured %v, its destination forgotten %v", a.Lane.ID, a.Unconfigured, m.forgotten[a.Lane.ID.Destination])
	}
	if n := m.inFlight(a.Lane.ID.Destination); n >= lim {
		t.Fatalf("destination %s: attempt with %d in flight, max %d", a.Lane.ID.Destination, n, lim)
	}
	if a.Number != ml.attempts+1 || a.Head.Attempts != ml.attempts || !a.StartedAt.Equal(now) {
		t.Fatalf("attempt %+v, model attempts %d", a, ml.attempts)
	}
	ml.out = a
	m.owner[a] = ml
	m.outstanding = append(m.outstanding, a)
}

// onIdle checks that nothing was due when the dispatcher idled for wait.
func (m *model) onIdle(wait time.Duration) {
	t := m.t
	t.Helper()
	now := m.clk.Now()
	var want time.Duration
	for _, ml := range m.lanes {
		if ml.out != nil || len(ml.seqs) == 0 {
			continue
		}
		if ml.notBefore.After(now) {
			if d := ml.notBefore.Sub(now); want == 0 || d < want {
				want = d
			}
			continue
		}
		lim, configured := m.capOf(ml.id.Destination)
		if configured && m.inFlight(ml.id.Destination) < lim {
			t.Fatalf("idle while lane %s (head %d) is due", ml.id, ml.seqs[0])
		}
	}
	if wait != want {
		t.Fatalf("wait %v, want %v (earliest not_before)", wait, want)
	}
}

// complete reports outstanding attempt i: kind 0 succeeded, 1 dead, 2
// retry, 3 release.
func (m *model) complete(i int, kind int) {
	t, s := m.t, m.s
	t.Helper()
	a := m.outstanding[i]
	m.outstanding = slices.Delete(m.outstanding, i, i+1)
	ml, isStale := m.owner[a], m.stale[a]
	delete(m.owner, a)
	delete(m.stale, a)
	now := m.clk.Now()
	switch kind {
	case 0, 1:
		var out Outcome
		if kind == 0 {
			out = s.Succeeded(a)
		} else {
			out = s.Dead(a)
		}
		if isStale {
			if out != (Outcome{}) {
				t.Fatalf("stale outcome reported %+v", out)
			}
			return
		}
		if m.delivered[a.Entry.Seq] {
			t.Fatalf("seq %d completed twice", a.Entry.Seq)
		}
		m.delivered[a.Entry.Seq] = true
		ml.seqs = ml.seqs[1:]
		ml.attempts = 0
		ml.notBefore = time.Time{}
		ml.out = nil
		if len(ml.seqs) == 0 {
			if !out.Drained || out.PurgeLedger != ml.hasLedger {
				t.Fatalf("drained lane %s outcome %+v, hasLedger %v", ml.id, out, ml.hasLedger)
			}
			delete(m.lanes, ml.id.Subject(ml.part))
		} else if out.Drained || out.Remaining != len(ml.seqs) {
			t.Fatalf("lane %s reported %+v with %d pending", ml.id, out, len(ml.seqs))
		}
	case 2:
		nb := now.Add(time.Duration(m.rng.IntN(3000)) * time.Millisecond)
		s.Retry(a, Head{Attempts: a.Number, NotBefore: nb, LastStatus: 500, LastAttemptAt: now})
		if !isStale {
			ml.attempts, ml.notBefore, ml.hasLedger, ml.out = a.Number, nb, true, nil
		}
	default:
		s.Release(a)
		if !isStale {
			ml.out = nil
		}
	}
}

// ---------------------------------------------------------------------------
// Run with a manual clock

// armClock is a manual clock that reports every timer Run arms. Run arms a
// timer only right before it blocks, so a report means Run is parked (as
// long as the test has not kicked it since).
type armClock struct {
	*clock.Manual
	armed chan time.Duration
}

func (c *armClock) NewTimer(d time.Duration) clock.Timer {
	tm := c.Manual.NewTimer(d)
	c.armed <- d
	return tm
}

const bound = 10 * time.Second // failure bound, never reached when green

func newRunSched() (*Scheduler, *armClock) {
	clk := &armClock{Manual: clock.NewManual(t0), armed: make(chan time.Duration, 1024)}
	return New(clk), clk
}

// startRun drains the kick left by the setup calls, so that from here on
// every wake-up of Run is one the test caused, and starts Run.
func startRun(t *testing.T, s *Scheduler) (cancel func()) {
	t.Helper()
	select {
	case <-s.kick:
	default:
	}
	ctx, cancelCtx := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancelCtx()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(bound):
			t.Error("Run did not return after cancel")
		}
	}
	t.Cleanup(stop)
	return stop
}

func recvAttempt(t *testing.T, s *Scheduler) *Attempt {
	t.Helper()
	select {
	case a := <-s.Attempts():
		return a
	case <-time.After(bound):
		t.Fatal("no attempt from Run")
		return nil
	}
}

func recvArmed(t *testing.T, c *armClock) time.Duration {
	t.Helper()
	select {
	case d := <-c.armed:
		return d
	case <-time.After(bound):
		t.Fatal("Run armed no timer")
		return 0
	}
}

// noAttempt checks that Run, known to be parked, has nothing to send.
func noAttempt(t *testing.T, s *Scheduler) {
	t.Helper()
	select {
	case a := <-s.Attempts():
		t.Fatalf("unexpected attempt %s seq %d", a.Lane.ID, a.Entry.Seq)
	default:
	}
}

func TestRunSleepsUntilNextToken(t *testing.T) {
	s, clk := newRunSched()
	s.SetLimits("d1", 0, limits.Limits{RatePerSecond: 2, Burst: 1, MaxInFlight: 1000})
	for i := range 40 {
		appendTo(s, 0, lid("d1", "c1", fmt.Sprintf("k%02d", i)), ev(uint64(i+1)))
	}
	startRun(t, s)
	end := t0.Add(10 * time.Second)
	var starts []time.Duration
	for {
		a := recvAttempt(t, s)
		if !a.StartedAt.Equal(clk.Now()) {
			t.Fatalf("StartedAt %v, clock %v", a.StartedAt, clk.Now())
		}
		if want := uint64(len(starts) + 1); a.Entry.Seq != want {
			t.Fatalf("seq %d, want %d", a.Entry.Seq, want)
		}
		starts = append(starts, a.StartedAt.Sub(t0))
		d := recvArmed(t, clk)
		if d != 500*time.Millisecond {
			t.Fatalf("Run sleeps %v, want 500ms until the next token", d)
		}
		noAttempt(t, s)
		if clk.Now().Add(d).After(end) {
			break
		}
		if len(starts) == 1 {
			// Short of the token: Run stays parked.
			clk.Advance(d - time.Millisecond)
			noAttempt(t, s)
			clk.Advance(time.Millisecond)
			continue
		}
		clk.Advance(d)
	}
	if len(starts) != 21 {
		t.Fatalf("%d attempts in 10s at 2/s burst 1, want 21", len(starts))
	}
	for i, st := range starts {
		if st != time.Duration(i)*500*time.Millisecond {
			t.Fatalf("attempt %d at %v", i, st)
		}
	}
}

func TestRunRetryAndLaneFlow(t *testing.T) {
	s, clk := newRunSched()
	s.SetLimits("d1", 0, unlimited)
	L, M, S := lid("d1", "c1", "l"), lid("d1", "c2", "m"), lid("d1", "c3", "sentinel")
	failed := Head{Attempts: 2, NotBefore: t0.Add(5 * time.Second), LastStatus: 503}
	s.Restore(0, L, evs(1, 2, 3), failed, true)
	appendTo(s, 0, M, ev(10))
	// A lane waiting an hour keeps Run arming a timer whenever it parks.
	s.Restore(0, S, evs(99), Head{Attempts: 1, NotBefore: t0.Add(time.Hour)}, true)
	startRun(t, s)

	m := recvAttempt(t, s)
	wantAttempt(t, m, M, 10, 1)
	if d := recvArmed(t, clk); d != 5*time.Second {
		t.Fatalf("Run sleeps %v, want 5s until L's not_before", d)
	}
	noAttempt(t, s)
	clk.Advance(5*time.Second - time.Nanosecond)
	noAttempt(t, s)
	clk.Advance(time.Nanosecond)
	l := recvAttempt(t, s)
	wantAttempt(t, l, L, 1, 3)
	if l.Head != failed || !l.StartedAt.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("retry attempt %+v", l)
	}
	recvArmed(t, clk)
	noAttempt(t, s)

	// Succeeded: the next entry of L.
	s.Succeeded(l)
	l = recvAttempt(t, s)
	wantAttempt(t, l, L, 2, 1)
	recvArmed(t, clk)
	noAttempt(t, s)

	// Retry in 2s: Run sleeps exactly that.
	s.Retry(l, Head{Attempts: 1, NotBefore: clk.Now().Add(2 * time.Second)})
	if d := recvArmed(t, clk); d != 2*time.Second {
		t.Fatalf("Run sleeps %v, want 2s", d)
	}
	noAttempt(t, s)
	clk.Advance(2 * time.Second)
	l = recvAttempt(t, s)
	wantAttempt(t, l, L, 2, 2)
	recvArmed(t, clk)

	// Dead advances the lane.
	s.Dead(l)
	l = recvAttempt(t, s)
	wantAttempt(t, l, L, 3, 1)
	recvArmed(t, clk)

	// Release hands the same head out again.
	s.Release(l)
	l2 := recvAttempt(t, s)
	wantAttempt(t, l2, L, 3, 1)
	if l2.Head != l.Head {
		t.Fatalf("released head changed: %+v -> %+v", l.Head, l2.Head)
	}
	recvArmed(t, clk)
	noAttempt(t, s)

	if out := s.Succeeded(l2); out != (Outcome{Drained: true, PurgeLedger: true}) {
		t.Fatalf("outcome %+v", out)
	}
	recvArmed(t, clk)
	if out := s.Succeeded(m); out != (Outcome{Drained: true}) {
		t.Fatalf("outcome %+v", out)
	}
	recvArmed(t, clk)
	noAttempt(t, s)
}

func TestRunMaxInFlightAndUnconfigured(t *testing.T) {
	s, clk := newRunSched()
	s.SetLimits("d1", 0, limits.Limits{RatePerSecond: 1e9, Burst: 1 << 20, MaxInFlight: 2})
	for i := range 5 {
		appendTo(s, 0, lid("d1", "c", fmt.Sprintf("k%d", i)), ev(uint64(i+1)))
	}
	U := lid("d2", "c", "u") // d2 has no limits yet
	appendTo(s, 0, U, ev(50))
	s.SetLimits("ds", 0, unlimited)
	s.Restore(0, lid("ds", "c", "sentinel"), evs(99), Head{Attempts: 1, NotBefore: t0.Add(time.Hour)}, true)
	startRun(t, s)

	a1 := recvAttempt(t, s)
	a2 := recvAttempt(t, s)
	if a1.Entry.Seq != 1 || a2.Entry.Seq != 2 {
		t.Fatalf("got seqs %d, %d", a1.Entry.Seq, a2.Entry.Seq)
	}
	if d := recvArmed(t, clk); d != time.Hour {
		t.Fatalf("armed %v", d)
	}
	noAttempt(t, s) // 2 out, d2 unconfigured: nothing

	s.Succeeded(a1)
	a3 := recvAttempt(t, s)
	if a3.Entry.Seq != 3 {
		t.Fatalf("seq %d, want 3", a3.Entry.Seq)
	}
	recvArmed(t, clk)
	noAttempt(t, s)

	s.SetLimits("d2", 0, unlimited)
	u := recvAttempt(t, s)
	wantAttempt(t, u, U, 50, 1)
	recvArmed(t, clk)
	noAttempt(t, s)
}

func TestRunCancelReleasesUnsentAttempt(t *testing.T) {
	s, _ := newRunSched()
	s.SetLimits("d1", 0, unlimited)
	L := lid("d1", "c", "l")
	head := Head{Attempts: 4, NotBefore: t0.Add(-time.Second), LastStatus: 500}
	s.Restore(0, L, evs(1), head, true)
	stop := startRun(t, s)
	stop() // nobody receives: Run must give the attempt back
	if loc, ok := s.Find("ev-1"); !ok || loc.InFlight || loc.Head != head {
		t.Fatalf("after cancel Find = %+v %v", loc, ok)
	}
	checkInvariants(t, s)
	a := mustPick(t, s)
	wantAttempt(t, a, L, 1, 5)
	if a.Head != head {
		t.Fatalf("head %+v", a.Head)
	}
}

// A deleted destination is forgotten at once when nothing of it is in
// flight, else when its in-flight attempt ends; either way it leaves no
// snapshot, budget or rate history, and the other destinations go on.
func TestForgetDestination(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	s.SetLimits("d2", 0, unlimited)
	s.SetLimits("d3", 0, unlimited)
	A, B := lid("d1", "c1", "a"), lid("d2", "c1", "b")
	appendTo(s, 0, A, ev(1))
	a := mustPick(t, s)
	wantAttempt(t, a, A, 1, 1)
	s.Observe(a, 200, false, 0, "")
	s.Succeeded(a)
	appendTo(s, 0, B, ev(2))
	b := mustPick(t, s)
	wantAttempt(t, b, B, 2, 1)

	ids := func() []string {
		var out []string
		for _, snap := range s.Snapshot("") {
			out = append(out, snap.ID)
		}
		slices.Sort(out)
		return out
	}
	s.ForgetDestination("d1") // idle
	s.ForgetDestination("d2") // an attempt in flight
	checkInvariants(t, s)
	if got := ids(); !slices.Equal(got, []string{"d2", "d3"}) {
		t.Fatalf("after forgetting d1 (idle) and d2 (in flight): snapshot of %v, want d2 (until its attempt ends) and d3", got)
	}
	if rates, transitions := s.RateHistory("d1"); len(rates) != 0 || len(transitions) != 0 {
		t.Fatalf("d1's rate history survived: %d rates, %d transitions", len(rates), len(transitions))
	}
	s.Observe(b, 200, false, 0, "")
	s.Succeeded(b)
	checkInvariants(t, s)
	if got := ids(); !slices.Equal(got, []string{"d3"}) {
		t.Fatalf("after d2's attempt ended: snapshot of %v, want d3", got)
	}
	// Created again, it starts afresh.
	s.SetLimits("d1", 0, unlimited)
	appendTo(s, 0, A, ev(3))
	wantAttempt(t, mustPick(t, s), A, 3, 1)
}

// A destination the config does not have hands its heads out without a
// token (Attempt.Unconfigured) for the owner to dead-letter: the ones
// that arrived after it was deleted (an edge's, forwarded after a cut)
// and the ones that were waiting for a retry, at most deletedInFlight at
// a time. One not configured yet holds its lanes until ForgetUnknown says
// the config does not have it; ForgetUnknown leaves a configured one be.
func TestForgottenDestinationHandsItsHeadsOut(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("gone", 0, limits.Limits{RatePerSecond: 0.001, Burst: 1, MaxInFlight: 1})
	A := lid("gone", "c1", "a")
	appendTo(s, 0, A, ev(1))
	a := mustPick(t, s) // the only token
	s.Retry(a, Head{Attempts: 1, NotBefore: clk.Now().Add(time.Hour), LastStatus: 500})
	s.ForgetDestination("gone")
	var late []lanes.ID
	for i := range deletedInFlight + 2 {
		id := lid("gone", "c1", fmt.Sprint("late", i))
		late = append(late, id)
		appendTo(s, 0, id, ev(uint64(10+i)))
	}
	var out []*Attempt
	for range deletedInFlight {
		a := mustPick(t, s)
		if !a.Unconfigured {
			t.Fatalf("%s handed out without Unconfigured", a.Lane.ID)
		}
		out = append(out, a)
	}
	mustNone(t, s) // deletedInFlight out
	checkInvariants(t, s)
	seen := map[string]bool{}
	for len(out) > 0 {
		seen[out[0].Lane.ID.Key] = true
		s.Dead(out[0])
		out = out[1:]
		if a, _ := step(s); a != nil {
			out = append(out, a)
		}
	}
	if len(seen) != len(late)+1 || !seen["a"] {
		t.Fatalf("handed out %v; want every late lane's head, and at once the one waiting an hour for its retry", seen)
	}
	if n := s.Pending("gone"); n != 0 || len(s.Snapshot("gone")) != 0 {
		t.Fatalf("gone still has %d pending (or a snapshot) once every head died", n)
	}

	s.AppendAll(0, []LaneAppend{{ID: lid("new", "c1", "k"), Subject: lid("new", "c1", "k").Subject(0), Entries: evs(30)}})
	s.SetLimits("known", 0, unlimited)
	appendTo(s, 0, lid("known", "c1", "k"), ev(31))
	if got := s.Unconfigured(); !slices.Equal(got, []string{"new"}) {
		t.Fatalf("Unconfigured() = %v, want [new]", got)
	}
	s.ForgetUnknown("known") // configured: nothing happens
	b := mustPick(t, s)
	if b.Lane.ID.Destination != "known" || b.Unconfigured {
		t.Fatalf("handed out %s (unconfigured %v), want known's head, configured", b.Lane.ID, b.Unconfigured)
	}
	mustNone(t, s) // new's lane is held
	s.ForgetUnknown("new")
	if c := mustPick(t, s); c.Lane.ID.Destination != "new" || !c.Unconfigured {
		t.Fatalf("handed out %s (unconfigured %v), want new's head, unconfigured", c.Lane.ID, c.Unconfigured)
	}
	if got := s.Unconfigured(); len(got) != 0 {
		t.Fatalf("Unconfigured() = %v after ForgetUnknown, want none", got)
	}
	checkInvariants(t, s)
}

// TakeDestination counts what it leaves to the attempts in flight: the
// heads in flight and the entries queued behind them.
func TestTakeDestinationCountsWhatItLeavesInFlight(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	A, B := lid("d1", "c1", "a"), lid("d1", "c2", "b")
	appendTo(s, 0, A, ev(1))
	a := mustPick(t, s)
	appendTo(s, 0, A, ev(2), ev(3))
	appendTo(s, 0, B, ev(4))
	taken, left := s.TakeDestination("d1")
	if seqs := takenSeqs(taken); !slices.Equal(seqs, []uint64{4}) {
		t.Fatalf("taken %v, want lane b's 4 alone", seqs)
	}
	if left != (Left{InFlight: 1, Behind: 2}) {
		t.Fatalf("left %+v, want 1 head in flight and the 2 entries behind it", left)
	}
	checkInvariants(t, s)
	if n := s.Pending("d1"); n != 3 {
		t.Fatalf("Pending = %d, want the lane in flight's 3", n)
	}
	s.Succeeded(a)
	checkInvariants(t, s)
}
