package scheduler

import (
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkIdleLaneMemory measures what a lane costs the scheduler once
// its events are all delivered (issue 26: at most 100 B per idle, empty
// lane; an emptied lane is forgotten). 100,000 lanes of one event each
// over 4 destinations and 1,000 customers are appended, then picked and
// delivered until nothing is due. It reports the live heap per lane while
// each holds its event (B/pending-lane) and after the drain
// (B/idle-lane), each after a forced GC, against the empty scheduler.
func BenchmarkIdleLaneMemory(b *testing.B) {
	const nLanes = 100_000
	var pending, idle float64
	for b.Loop() {
		s, _ := newSched()
		for d := range 4 {
			s.SetLimits(fmt.Sprintf("d%d", d), 0, unlimited)
		}
		base := liveHeap()
		for l := range nLanes {
			id := lid(fmt.Sprintf("d%d", l%4), fmt.Sprintf("c%d", l%1000), fmt.Sprintf("lane-%d", l))
			appendTo(s, 0, id, ev(uint64(l+1)))
		}
		full := liveHeap()
		delivered := 0
		for {
			a, _ := step(s)
			if a == nil {
				break
			}
			s.Succeeded(a)
			delivered++
		}
		if delivered != nLanes {
			b.Fatalf("delivered %d events, want %d", delivered, nLanes)
		}
		empty := liveHeap()
		runtime.KeepAlive(s)
		pending = (full - base) / nLanes
		idle = (empty - base) / nLanes
	}
	b.ReportMetric(pending, "B/pending-lane")
	b.ReportMetric(idle, "B/idle-lane")
}

// liveHeap is the heap's live bytes after a forced GC.
func liveHeap() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc)
}
