package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/limits"
)

// A destination at its in-flight cap is saturated even with tokens left, so
// a partner that throttles it teaches its budget the partner's ceiling;
// the snapshot reports it next to the configured and current rate.
func TestSnapshotReportsTheLearnedRate(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d", 0, limits.Limits{RatePerSecond: 10_000, Burst: 10_000, MaxInFlight: 1})
	for i := range 30 {
		appendTo(s, 0, lid("d", "c", fmt.Sprintf("k%d", i)), ev(uint64(i+1)))
	}
	// One second of 20 deliveries, one at a time: the cap, not the
	// bucket, holds the other lanes back.
	for range 20 {
		a := mustPick(t, s)
		mustNone(t, s)
		clk.Advance(50 * time.Millisecond)
		s.Observe(a, 200, false, 0, "")
		s.Succeeded(a)
	}
	if got := s.Snapshot("d")[0].LearnedRate; got != 0 {
		t.Fatalf("learned rate %v before any throttling, want 0", got)
	}
	a := mustPick(t, s)
	s.Observe(a, 429, true, 0, "HTTP 429")
	s.Release(a)
	snap := s.Snapshot("d")[0]
	if snap.LearnedRate != 20 || snap.CurrentRate != 18 || snap.ConfiguredRate != 10_000 {
		t.Fatalf("after a 429 at 20 deliveries/s: learned %v current %v configured %v, want 20, 18 (90%% of it), 10000",
			snap.LearnedRate, snap.CurrentRate, snap.ConfiguredRate)
	}
}
