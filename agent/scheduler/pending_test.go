package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/rivora/rivora/lanes"
)

// PendingEvents against a model: every matching entry, sorted newest
// first, cut at the limit.
func TestPendingEventsAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 12))
	for round := range 200 {
		s, _ := newSched()
		s.SetLimits("d1", 0, unlimited)
		type kept struct {
			lane  string
			cust  string
			entry Entry
		}
		var all []kept
		seq := uint64(0)
		at := make(map[string]time.Duration)
		accepted := make(map[string]time.Time)
		for range 1 + rng.IntN(60) {
			cust, key := fmt.Sprintf("c%d", rng.IntN(3)), fmt.Sprintf("k%d", rng.IntN(8))
			dest := "d1"
			if rng.IntN(5) == 0 {
				dest = "d2"
			}
			seq++
			lane := dest + "/" + cust + "/" + key
			// Acceptance times grow within a lane, in any order across lanes.
			at[lane] += time.Duration(1+rng.IntN(1000)) * time.Millisecond
			e := Entry{Seq: seq, EventID: fmt.Sprintf("ev-%d", seq), AcceptedAt: t0.Add(at[lane]).Add(time.Duration(seq) * time.Nanosecond)}
			appendTo(s, 0, lid(dest, cust, key), e)
			accepted[e.EventID] = e.AcceptedAt
			if dest == "d1" {
				all = append(all, kept{lane: key, cust: cust, entry: e})
			}
		}
		f := PendingFilter{Destination: "d1", Limit: 1 + rng.IntN(20)}
		if rng.IntN(2) == 0 {
			f.Customer = fmt.Sprintf("c%d", rng.IntN(3))
			if rng.IntN(2) == 0 {
				f.Lane = fmt.Sprintf("k%d", rng.IntN(8))
			}
		}
		if rng.IntN(3) == 0 {
			f.Since = t0.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
		}
		var want []string
		for _, k := range all {
			if (f.Customer != "" && k.cust != f.Customer) || (f.Lane != "" && k.lane != f.Lane) || (!f.Since.IsZero() && k.entry.AcceptedAt.Before(f.Since)) {
				continue
			}
			want = append(want, k.entry.EventID)
		}
		slices.SortFunc(want, func(x, y string) int {
			return accepted[y].Compare(accepted[x])
		})
		wantTruncated := len(want) > f.Limit
		want = want[:min(len(want), f.Limit)]

		got, truncated := s.PendingEvents(f)
		var ids []string
		for _, p := range got {
			ids = append(ids, p.Entry.EventID)
		}
		if fmt.Sprint(ids) != fmt.Sprint(want) || truncated != wantTruncated {
			t.Fatalf("round %d, %+v:\n got %v truncated %v\nwant %v truncated %v", round, f, ids, truncated, want, wantTruncated)
		}
	}
}

func TestPendingEventsMarksHeadAndInFlight(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	A := lid("d1", "c", "a")
	appendTo(s, 0, A, ev(1), ev(2))
	mustPick(t, s)
	got, truncated := s.PendingEvents(PendingFilter{Destination: "d1", Limit: 10})
	if truncated || len(got) != 2 {
		t.Fatalf("PendingEvents = %d events, truncated %v; want 2", len(got), truncated)
	}
	if got[0].Entry.Seq != 2 || got[0].IsHead || got[0].InFlight {
		t.Fatalf("newest = %+v; want seq 2, behind the head", got[0])
	}
	if got[1].Entry.Seq != 1 || !got[1].IsHead || !got[1].InFlight || got[1].Lane != A {
		t.Fatalf("oldest = %+v; want seq 1, the head, in flight", got[1])
	}
	if got, _ := s.PendingEvents(PendingFilter{Destination: "d1", Limit: 10, InFlightOnly: true}); len(got) != 1 || got[0].Entry.Seq != 1 {
		t.Fatalf("PendingEvents(in flight only) = %+v; want the head in flight alone", got)
	}
	if got, _ := s.PendingEvents(PendingFilter{Destination: "nope", Limit: 10}); len(got) != 0 {
		t.Fatalf("PendingEvents(unknown destination) = %v", got)
	}
}

// TestPendingEventsWalkConsistency mutates a destination's lanes between
// the chunks of a PendingEvents walk: every event of a lane pending
// throughout is listed exactly once, none of a lane made during the walk,
// none twice.
func TestPendingEventsWalkConsistency(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { pendingWalkConsistency(t, seed) })
	}
}

func pendingWalkConsistency(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x9e4d))
	s, clk := newSched()
	s.SetLimits("d", 0, unlimited)
	var seq uint64
	key := 0
	events := map[lanes.ID][]string{}
	add := func() lanes.ID {
		key++
		id := lid("d", fmt.Sprintf("c%d", rng.IntN(3)), fmt.Sprintf("k%d", key))
		for range 1 + rng.IntN(3) {
			seq++
			appendTo(s, 0, id, ev(seq))
			events[id] = append(events[id], ev(seq).EventID)
		}
		return id
	}
	live := map[lanes.ID]bool{}
	for range 20 + rng.IntN(60) {
		live[add()] = true
		clk.Advance(time.Duration(rng.IntN(3)) * time.Millisecond)
	}
	throughout, during := map[lanes.ID]bool{}, map[lanes.ID]bool{}
	for id := range live {
		throughout[id] = true
	}
	w := s.startPendingWalk(PendingFilter{Destination: "d", Limit: 1000}, 1+rng.IntN(7))
	for more := true; more; {
		more = w.Step()
		for range rng.IntN(6) {
			switch rng.IntN(3) {
			case 0: // a new lane
				id := add()
				live[id], during[id] = true, true
			default: // a lane drains (its events skipped)
				for id := range live {
					drain(t, s, id)
					delete(live, id)
					delete(throughout, id)
					break
				}
			}
		}
		checkInvariants(t, s)
	}
	got, truncated := w.Result()
	seen := map[string]int{}
	for _, p := range got {
		seen[p.Entry.EventID]++
		if seen[p.Entry.EventID] > 1 || during[p.Lane] {
			t.Fatalf("event %s listed twice, or of a lane made during the walk (%v)", p.Entry.EventID, during[p.Lane])
		}
	}
	for id := range throughout {
		for _, e := range events[id] {
			if seen[e] != 1 {
				t.Fatalf("event %s of lane %s pending throughout the walk listed %d times", e, id, seen[e])
			}
		}
	}
	if truncated {
		t.Fatalf("%d events listed, truncated", len(got))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.dests["d"].walks) != 0 {
		t.Fatal("finished walk still registered")
	}
}

// drain skips every event of a lane, as an operator's skips do.
func drain(t *testing.T, s *Scheduler, id lanes.ID) {
	t.Helper()
	for {
		a, err := s.TakeHead(id, "")
		if err != nil {
			t.Fatalf("TakeHead(%s): %v", id, err)
		}
		if s.Dead(a).Drained {
			return
		}
	}
}

// A chunk of deep lanes ends once it has looked at pendingChunkEntries
// entries, so one hold of the lock stays short however deep the lanes.
func TestPendingEventsChunkBoundedByEntries(t *testing.T) {
	s, _ := newSched()
	var seq uint64
	for k := range 3 {
		entries := make([]Entry, pendingChunkEntries)
		for i := range entries {
			seq++
			entries[i] = ev(seq)
		}
		appendTo(s, 0, lid("d", "c", fmt.Sprintf("k%d", k)), entries...)
	}
	w := s.WalkPending(PendingFilter{Destination: "d", Limit: 10 * pendingChunkEntries})
	steps := 1
	for w.Step() {
		steps++
	}
	if got, truncated := w.Result(); len(got) != int(seq) || truncated || got[0].Entry.Seq != seq {
		t.Fatalf("listed %d events (truncated %v), newest %+v; want all %d", len(got), truncated, got[0], seq)
	}
	if steps != 3 {
		t.Fatalf("walk took %d chunks, want one per deep lane (3)", steps)
	}
}

// A walk given up before its end is forgotten once closed.
func TestPendingEventsWalkClose(t *testing.T) {
	s, _ := newSched()
	for i := range 10 {
		appendTo(s, 0, lid("d", "c", fmt.Sprintf("k%d", i)), ev(uint64(i+1)))
	}
	w := s.startPendingWalk(PendingFilter{Destination: "d", Limit: 100}, 3)
	if !w.Step() {
		t.Fatal("walk over 10 lanes ended after one chunk of 3")
	}
	w.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.dests["d"].walks) != 0 {
		t.Fatalf("closed walk still tracked: %d walks", len(s.dests["d"].walks))
	}
}
