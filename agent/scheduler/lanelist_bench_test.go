package scheduler

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"
)

func bigScheduler(n int) *Scheduler {
	s, clk := newSched()
	s.SetLimits("big", 0, unlimited)
	s.SetPaused("big", 0, true)
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
	return s
}

// BenchmarkLockWaitDuringListLanes measures how long taking the
// scheduler's lock (as every delivery step does) waits while ListLanes
// runs back to back over 1M lanes, against the same without it.
func BenchmarkLockWaitDuringListLanes(b *testing.B) {
	s := bigScheduler(1_000_000)
	runtime.GC()
	for _, listing := range []bool{false, true} {
		b.Run(fmt.Sprintf("listing=%v", listing), func(b *testing.B) {
			stop := make(chan struct{})
			done := make(chan int)
			go func() {
				calls := 0
				for listing {
					select {
					case <-stop:
						done <- calls
						return
					default:
					}
					s.ListLanes("big", LaneFilter{Limit: 100})
					calls++
				}
				<-stop
				done <- calls
			}()
			var waits []time.Duration
			for b.Loop() {
				t0 := time.Now()
				s.Pending("big")
				waits = append(waits, time.Since(t0))
				time.Sleep(50 * time.Microsecond)
			}
			close(stop)
			calls := <-done
			slices.Sort(waits)
			b.ReportMetric(float64(waits[len(waits)/2].Microseconds()), "µs-p50-wait")
			b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds()), "µs-p99-wait")
			b.ReportMetric(float64(waits[len(waits)-1].Microseconds()), "µs-max-wait")
			b.ReportMetric(float64(calls), "lists")
		})
	}
}

// BenchmarkListLanes lists the 100 longest-waiting of 1M pending lanes of
// one destination; chunk-hold reports the longest hold of the lock.
func BenchmarkListLanes(b *testing.B) {
	const n = 1_000_000
	s := bigScheduler(n)
	runtime.GC()
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
		if got := w.Result(); got.Matched != n || len(got.Lanes) != 100 {
			b.Fatalf("matched %d, %d lanes", got.Matched, len(got.Lanes))
		}
	}
	b.ReportMetric(float64(longest.Microseconds()), "µs-max-chunk-hold")
}
