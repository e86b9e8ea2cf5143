package scheduler

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkListLanes lists the 100 longest-waiting of 1M pending lanes of
// one destination; chunk-hold reports the longest hold of the lock.
func BenchmarkListLanes(b *testing.B) {
	s, clk := newSched()
	s.SetLimits("big", 0, unlimited)
	s.SetPaused("big", 0, true)
	const n = 1_000_000
	appends := make([]LaneAppend, 0, 1000)
	for i := range n {
		id := lid("big", fmt.Sprintf("c%d", i%16), fmt.Sprintf("lane-%d", i))
		appends = append(appends, LaneAppend{ID: id, Subject: id.Subject(0), Entries: []Entry{ev(uint64(i + 1))}})
		if len(appends) == cap(appends) {
			s.AppendAll(0, appends)
			appends = appends[:0]
			clk.Advance(time.Millisecond)
		}
	}
	b.ResetTimer()
	var longest time.Duration
	for b.Loop() {
		w := s.startWalk("big", LaneFilter{Limit: 100}, listChunk)
		for {
			t0 := time.Now()
			more := w.read()
			longest = max(longest, time.Since(t0))
			for _, ls := range w.batch {
				w.keep(ls)
			}
			if !more {
				break
			}
		}
		if got := w.result(); got.Matched != n || len(got.Lanes) != 100 {
			b.Fatalf("matched %d, %d lanes", got.Matched, len(got.Lanes))
		}
	}
	b.ReportMetric(float64(longest.Microseconds()), "µs-max-chunk-hold")
}
