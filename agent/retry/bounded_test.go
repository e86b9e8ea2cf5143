package retry_test

import (
	"slices"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/retry"
)

// Past its bound, the oldest intervals fold into one covering them and
// the gaps between, so no paused time is forgotten (the total only
// grows: over-credited, never under-credited), the latest stay as they
// were, and the list given is not changed.
func TestBoundedFoldsTheOldest(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	// Paused 0–1, 2–3, 4–5, 6–7, and from 8 on.
	ps := retry.Pauses{{Start: m(0), End: m(1)}, {Start: m(2), End: m(3)}, {Start: m(4), End: m(5)}, {Start: m(6), End: m(7)}, {Start: m(8)}}
	given := slices.Clone(ps)

	if got := ps.Bounded(5); !slices.Equal(got, ps) {
		t.Fatalf("Bounded(5) of 5 = %v, want them unchanged", got)
	}
	got := ps.Bounded(4)
	want := retry.Pauses{{Start: m(0), End: m(3)}, {Start: m(4), End: m(5)}, {Start: m(6), End: m(7)}, {Start: m(8)}}
	if !slices.Equal(got, want) {
		t.Fatalf("Bounded(4) = %v, want the oldest two folded: %v", got, want)
	}
	if got := ps.Bounded(2); !slices.Equal(got, retry.Pauses{{Start: m(0), End: m(7)}, {Start: m(8)}}) {
		t.Fatalf("Bounded(2) = %v, want 0–7 and the open one", got)
	}
	if got := ps.Bounded(1); !slices.Equal(got, retry.Pauses{{Start: m(0)}}) {
		t.Fatalf("Bounded(1) = %v, want one open since the first start", got)
	}
	if !slices.Equal(ps, given) {
		t.Fatalf("Bounded changed the list given: %v", ps)
	}
	for limit := 1; limit <= 5; limit++ {
		b := ps.Bounded(limit)
		for from := 0; from <= 10; from++ {
			for to := from; to <= 10; to++ {
				if b.Between(m(from), m(to)) < ps.Between(m(from), m(to)) {
					t.Fatalf("Bounded(%d) under-credits %d–%d: %v < %v", limit, from, to, b.Between(m(from), m(to)), ps.Between(m(from), m(to)))
				}
			}
		}
	}
}

// Folding takes the neighbours with the shortest gap: held a minute a day
// apart, then twice in one hour, the hour's two fold, and the days between
// the first stretches are never counted as held.
func TestBoundedFoldsTheShortestGap(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	day := func(d int, minute int) time.Time {
		return t0.Add(time.Duration(d)*24*time.Hour + time.Duration(minute)*time.Minute)
	}
	ps := retry.Pauses{
		{Start: day(0, 0), End: day(0, 1)},
		{Start: day(1, 0), End: day(1, 1)},
		{Start: day(2, 0), End: day(2, 1)},
		{Start: day(2, 30), End: day(2, 31)},
	}
	got := ps.Bounded(3)
	want := retry.Pauses{{Start: day(0, 0), End: day(0, 1)}, {Start: day(1, 0), End: day(1, 1)}, {Start: day(2, 0), End: day(2, 31)}}
	if !slices.Equal(got, want) {
		t.Fatalf("Bounded(3) = %v, want the two of day 2 folded: %v", got, want)
	}
	if held, real := got.Between(t0, day(3, 0)), ps.Between(t0, day(3, 0)); held != real+29*time.Minute {
		t.Fatalf("Bounded(3) credits %v, want the real %v plus the 29-minute gap it folded", held, real)
	}
}
