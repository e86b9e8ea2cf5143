package scheduler

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/clock"
)

// BenchmarkDeliveryCycle is the scheduler's share of one delivery, as
// `go run ./e2e/bench deliver` drives it: an event appended (in the
// partition writer's batches), its lane's head picked, its 2xx observed
// and its success reported. One op is one event. depth is how many events each lane holds
// in the steady state: at depth 1 every success drains its lane and every
// append makes one (the bookkeeping of lanes coming and going); deeper,
// a success moves the lane on to its next head. On the wall clock, as in
// production. cpu-ns/op is the process's CPU time per op (garbage
// collection included): on a shared machine it varies less than ns/op,
// which counts the time others hold the CPU.
func BenchmarkDeliveryCycle(b *testing.B) {
	for _, depth := range []int{1, 10} {
		b.Run(fmt.Sprintf("lanes=5000/depth=%d", depth), func(b *testing.B) {
			deliveryCycle(b, 5000, depth)
		})
	}
}

func deliveryCycle(b *testing.B, nLanes, depth int) {
	s := New(clock.Real{})
	s.SetLimits("d", 0, unlimited)
	const batch = 500
	ids := make([]LaneAppend, nLanes)
	for i := range ids {
		id := lid("d", "c", fmt.Sprintf("lane-%d", i))
		ids[i] = LaneAppend{ID: id, Subject: id.Subject(0)}
	}
	entries := make([]Entry, 0, batch)
	appends := make([]LaneAppend, 0, batch)
	seq := uint64(0)
	next := 0
	// appendBatch appends one event to each of the next n lanes.
	appendBatch := func(n int) {
		entries, appends = entries[:0], appends[:0]
		for range n {
			seq++
			entries = append(entries, Entry{Seq: seq, EventID: "ev"})
			a := ids[next]
			a.Entries = entries[len(entries)-1:]
			appends = append(appends, a)
			next = (next + 1) % nLanes
		}
		s.AppendAll(0, appends)
	}
	for range nLanes * (depth - 1) / batch {
		appendBatch(batch)
	}
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	n := 0
	for b.Loop() {
		if n%batch == 0 {
			appendBatch(batch)
		}
		n++
		s.mu.Lock()
		now := s.clock.Now()
		s.promote(now)
		a, _ := s.pick(now)
		s.mu.Unlock()
		if a == nil {
			b.Fatal("nothing to pick")
		}
		s.Observe(a, 200, false, 0, "")
		s.Succeeded(a)
	}
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
