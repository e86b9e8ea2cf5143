package owner_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/agent/ownership"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/internal/fingerprint"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
)

var errNotDirect = errors.New("appends still go through INGEST")

// BenchmarkAppend is the ingest gateway's fast path into a partition's
// lanes: appendConc callers each storing appendBatch keyed events at a
// time (as PublishBatch groups of `bench ingest` reach the writer), on an
// embedded server. cpu-ns/event is the process's CPU (the server's
// included) per event: steadier than wall time on a shared machine.
func BenchmarkAppend(b *testing.B) {
	const appendBatch, appendConc = 500, 4
	ctx, part, items := appendBench(b, appendBatch)
	var cpu time.Duration
	b.ResetTimer()
	for b.Loop() {
		// The events' preparation is the gateway's, not the writer's.
		b.StopTimer()
		round := make([][]owner.Item, appendConc)
		for c := range round {
			round[c] = items()
		}
		cpu0 := processCPU(b)
		b.StartTimer()
		var callers sync.WaitGroup
		errs := make(chan error, appendConc)
		for _, its := range round {
			callers.Go(func() {
				if _, err := part.Append(ctx, its); err != nil {
					errs <- err
				}
			})
		}
		callers.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		cpu += processCPU(b) - cpu0
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*appendBatch*appendConc), "cpu-ns/event")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*appendBatch*appendConc), "ns/event")
}

// BenchmarkAppendOne is a lone Publish's way into the lanes: one caller
// storing one keyed event at a time, each awaited (the open-loop phase of
// `bench ingest` at a rate the server keeps up with). ns/op is an
// append's latency, cpu-ns/event the process's CPU per append.
func BenchmarkAppendOne(b *testing.B) {
	ctx, part, items := appendBench(b, 1)
	// Stopping the timer reads the runtime's memory statistics, which
	// costs more than an append: an event's preparation (an encoding,
	// about 1 µs) counts here.
	cpu0 := processCPU(b)
	b.ResetTimer()
	for b.Loop() {
		if _, err := part.Append(ctx, items()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/event")
}

// appendBench opens partition 0 on an embedded server, runs it until the
// benchmark ends, and waits until appends go straight into its lanes; it
// returns a maker of batch keyed events at a time.
func appendBench(b *testing.B, batch int) (context.Context, *owner.Partition, func() []owner.Item) {
	dir := b.TempDir()
	srv := startRebuildServer(b, dir)
	deps := rebuildDeps(b, srv)
	deps.Scheduler = scheduler.New(clock.Real{})
	lease, err := ownership.NewLocal().TryAcquire(b.Context(), 0)
	if err != nil {
		b.Fatal(err)
	}
	part, err := owner.Open(b.Context(), 0, deps, lease)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	var wg sync.WaitGroup
	wg.Go(func() { _ = part.Run(ctx) })
	b.Cleanup(func() { cancel(); wg.Wait() })

	payload := make([]byte, 256)
	next := 0
	items := func() []owner.Item {
		out := make([]owner.Item, batch)
		for i := range out {
			next++
			ev := &rivorav1.Event{
				EventId: "bench-" + strconv.Itoa(next), DestinationId: "dest", CustomerId: "bench",
				LaneKey: "lane-" + strconv.Itoa(next%2000), Type: "bench.event", Payload: payload,
				ContentType: "application/json", AcceptedAt: timestamppb.Now(),
			}
			data, err := proto.Marshal(ev)
			if err != nil {
				b.Fatal(err)
			}
			out[i] = owner.Item{Event: ev, Data: data, MsgID: ev.EventId, Fingerprint: fingerprint.Of(ev)}
		}
		return out
	}
	// Until the mover found INGEST empty, appends go through INGEST.
	if err := poll.Check(30*time.Second, 10*time.Millisecond, func() error {
		at, err := part.Append(ctx, items()[:1])
		if err != nil {
			return poll.GiveUp(err)
		}
		if at[0].Stream != lanes.LanesStream(0) {
			return errNotDirect
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	return ctx, part, items
}
