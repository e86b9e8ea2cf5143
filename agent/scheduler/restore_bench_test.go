package scheduler

import (
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/rivora/rivora/lanes"
)

// BenchmarkRestoreLanes1M installs a million pending events over 100,000
// lanes into an empty scheduler, as a restart's rebuild does (the bench
// rebuild's shape): the lanes, their entries and the event id index.
func BenchmarkRestoreLanes1M(b *testing.B) {
	const nLanes, perLane = 100_000, 10
	ids := make([]lanes.ID, nLanes)
	events := make([]uuid.UUID, nLanes*perLane)
	for l := range ids {
		ids[l] = lanes.ID{Destination: fmt.Sprintf("d%d", l%4), Customer: "c", Key: fmt.Sprintf("lane-%d", l)}
	}
	for i := range events {
		events[i] = uuid.Must(uuid.NewV7())
	}
	for b.Loop() {
		s, _ := newSched()
		seq := uint64(0)
		for l, id := range ids {
			var r Restored
			for i := range perLane {
				seq++
				r.AddUUID(seq, events[l*perLane+i], t0.UnixNano()+int64(seq))
			}
			s.RestoreLane(0, id, &r, Head{}, false)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*nLanes*perLane), "ns/event")
}
