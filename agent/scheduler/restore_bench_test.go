package scheduler

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/rivora/rivora/lanes"
)

// restoreShape is the bench rebuild's shape: a million pending events
// over 100,000 lanes.
const restoreLanes, restorePerLane = 100_000, 10

// restoreInput makes the lane ids and event ids of restoreShape.
func restoreInput() ([]lanes.ID, []uuid.UUID) {
	ids := make([]lanes.ID, restoreLanes)
	events := make([]uuid.UUID, restoreLanes*restorePerLane)
	for l := range ids {
		ids[l] = lanes.ID{Destination: fmt.Sprintf("d%d", l%4), Customer: "c", Key: fmt.Sprintf("lane-%d", l)}
	}
	for i := range events {
		events[i] = uuid.Must(uuid.NewV7())
	}
	return ids, events
}

// restoreAll installs restoreShape into s as partition 0, as a rebuild
// from a snapshot does (it knows the count: ExpectPending).
func restoreAll(s *Scheduler, ids []lanes.ID, events []uuid.UUID) {
	s.ExpectPending(0, len(events))
	seq := uint64(0)
	for l, id := range ids {
		var r Restored
		r.Grow(restorePerLane)
		for i := range restorePerLane {
			seq++
			r.AddUUID(seq, events[l*restorePerLane+i], t0.UnixNano()+int64(seq))
		}
		s.RestoreLane(0, id, &r, Head{}, false)
	}
}

// BenchmarkRestoreLanes1M installs a million pending events over 100,000
// lanes into an empty scheduler, as a restart's rebuild does (the bench
// rebuild's shape): the lanes, their entries and the event id index.
func BenchmarkRestoreLanes1M(b *testing.B) {
	ids, events := restoreInput()
	var cpu time.Duration
	for b.Loop() {
		s, _ := newSched()
		cpu0 := processCPU(b)
		restoreAll(s, ids, events)
		cpu += processCPU(b) - cpu0
	}
	reportPerEvent(b, cpu, len(events))
}

// BenchmarkDropPartition1M drops a partition holding a million pending
// events, as its handoff at the agent's stop does.
func BenchmarkDropPartition1M(b *testing.B) {
	ids, events := restoreInput()
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		s, _ := newSched()
		restoreAll(s, ids, events)
		b.StartTimer()
		cpu0 := processCPU(b)
		s.DropPartition(0)
		cpu += processCPU(b) - cpu0
	}
	reportPerEvent(b, cpu, len(events))
}

// reportPerEvent reports the wall and process CPU time (its garbage
// collector's included, steadier on a shared machine) per event.
func reportPerEvent(b *testing.B, cpu time.Duration, events int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*events), "cpu-ns/event")
}

// processCPU is the user and system CPU time of this process so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
