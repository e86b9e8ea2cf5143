package scheduler

import (
	"testing"
	"time"
)

func TestRateRingCountsBucketsAndForgets(t *testing.T) {
	var r rateRing
	t0 := time.Unix(1_800_000_000, 0) // on a bucket boundary
	r.observe(t0, 200, 10, 10)
	r.observe(t0.Add(time.Second), 429, 10, 5)
	r.observe(t0.Add(2*time.Second), 503, 10, 5)
	r.observe(t0.Add(3*time.Second), 0, 10, 5)
	r.observe(t0.Add(25*time.Second), 200, 10, 6) // two buckets later

	now := t0.Add(29 * time.Second)
	if m := r.lastMinute(now); m.attempts != 5 || m.throttled != 1 || m.serverErrors != 1 || m.noAnswer != 1 {
		t.Fatalf("last minute = %+v; want 5 attempts, 1 429, 1 5xx, 1 without an answer", m)
	}
	h := r.history(now, 10, 7)
	if len(h) != rateBuckets {
		t.Fatalf("history has %d buckets, want %d", len(h), rateBuckets)
	}
	last := len(h) - 1
	if !h[last].Start.Equal(t0.Add(20*time.Second)) || h[last-2].Start != t0 {
		t.Fatalf("buckets start at %v (last) and %v (two before); want %v and %v", h[last].Start, h[last-2].Start, t0.Add(20*time.Second), t0)
	}
	first := h[last-2]
	if first.Attempts != 4 || first.Delivered != 1 || first.Throttled != 1 || first.ServerErrors != 1 || first.CurrentRate != 5 || first.ConfiguredRate != 10 {
		t.Fatalf("first bucket = %+v; want 4 attempts (1 delivered, 1 throttled, 1 5xx) at 5 of 10/s", first)
	}
	// The bucket with no attempt carries the rates before it; the
	// current one has now's; those before any sample, the first one's.
	if quiet := h[last-1]; quiet.Attempts != 0 || quiet.CurrentRate != 5 {
		t.Fatalf("quiet bucket = %+v; want no attempts at the previous 5/s", quiet)
	}
	if h[last].Attempts != 1 || h[last].CurrentRate != 7 {
		t.Fatalf("current bucket = %+v; want 1 attempt, now's rate 7", h[last])
	}
	if h[0].Attempts != 0 || h[0].CurrentRate != 5 || h[0].ConfiguredRate != 10 {
		t.Fatalf("oldest bucket = %+v; want the first sample's rates", h[0])
	}

	// A minute later the last minute is empty; 15 minutes later every
	// bucket is, though the ring's slots still hold old counts.
	if a := r.lastMinute(now.Add(time.Minute)).attempts; a != 0 {
		t.Fatalf("a minute later, %d attempts in the last minute; want 0", a)
	}
	later := r.history(now.Add(15*time.Minute), 10, 10)
	for i, s := range later {
		if s.Attempts != 0 {
			t.Fatalf("15 minutes later, bucket %d has %d attempts", i, s.Attempts)
		}
	}
}

// The last minute counts the events that joined a destination's lanes
// (its drain time is net of them), and the attempts the partner refused
// with another 4xx than 429 (a partner refusing everything shows there,
// its state staying healthy).
func TestLastMinuteArrivalsAndRefusals(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("orders", 0, unlimited)
	appendTo(s, 0, lid("orders", "acme", "u1"), evs(1, 2, 3)...)
	appendTo(s, 0, lid("orders", "acme", "u2"), evs(4)...)
	a := mustPick(t, s)
	s.Observe(a, 400, false, 0, "HTTP 400")
	snap := s.Snapshot("orders")[0]
	if snap.LastMinuteArrivals != 4 || snap.LastMinuteClientErrors != 1 || snap.LastMinuteAttempts != 1 {
		t.Fatalf("last minute: %d arrivals, %d refusals of %d attempts; want 4, 1 of 1", snap.LastMinuteArrivals, snap.LastMinuteClientErrors, snap.LastMinuteAttempts)
	}
	clk.Advance(2 * time.Minute)
	if snap := s.Snapshot("orders")[0]; snap.LastMinuteArrivals != 0 {
		t.Fatalf("%d arrivals two minutes later, want 0", snap.LastMinuteArrivals)
	}
}

// A destination's history starts where this scheduler began to keep it
// (after a restart, or a partition's move, what came before is unknown
// here): it was drawn as 15 quiet minutes at the first sample's rates.
func TestRateHistoryStartsWhenTheDestinationWasTakenUp(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("orders", 0, unlimited)
	if rates, _ := s.RateHistory("orders"); len(rates) != 1 {
		t.Fatalf("just taken up: %d buckets, want 1 (now's)", len(rates))
	}
	clk.Advance(3 * RateBucket)
	rates, _ := s.RateHistory("orders")
	if len(rates) != 4 || rates[3].Start.After(clk.Now()) || clk.Now().Sub(rates[0].Start) < 3*RateBucket {
		t.Fatalf("30 s later: %d buckets from %v; want 4, from the bucket it was taken up in", len(rates), rates[0].Start)
	}
	clk.Advance(time.Hour)
	if rates, _ := s.RateHistory("orders"); len(rates) != rateBuckets {
		t.Fatalf("an hour later: %d buckets, want %d (15 minutes)", len(rates), rateBuckets)
	}
}
