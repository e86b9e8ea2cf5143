package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
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
