package owner_test

import (
	"context"
	"fmt"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/agent/ownership"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// BenchmarkRebuild opens a partition whose lane store holds
// rebuildEvents pending events over rebuildLanes lanes (as `bench
// rebuild` has them: 10 per lane, 64-byte payloads): the rebuild alone,
// on an embedded server, without the process restart around it.
func BenchmarkRebuild(b *testing.B) {
	const rebuildEvents, rebuildLanes = 100_000, 10_000
	dir := b.TempDir()
	srv := startRebuildServer(b, dir)
	deps := rebuildDeps(b, srv)
	lease, err := ownership.NewLocal().TryAcquire(b.Context(), 0)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := owner.Open(b.Context(), 0, deps, lease); err != nil {
		b.Fatal(err)
	}
	fillLanes(b, srv.JetStream(), rebuildEvents, rebuildLanes)
	b.ResetTimer()
	cpu0 := processCPU(b)
	for b.Loop() {
		deps.Scheduler = scheduler.New(clock.Real{})
		if _, err := owner.Open(b.Context(), 0, deps, lease); err != nil {
			b.Fatal(err)
		}
		if got := deps.Scheduler.Pending("dest"); got != rebuildEvents {
			b.Fatalf("rebuilt %d pending, want %d", got, rebuildEvents)
		}
	}
	// CPU time (the embedded server's included) is steadier than wall
	// time on a shared machine.
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N*rebuildEvents), "cpu-ns/event")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rebuildEvents), "ns/event")
}

// processCPU is the user and system CPU time of this process so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startRebuildServer(b *testing.B, dir string) *natsd.Server {
	srv, err := natsd.Start(natsd.Config{DataDir: dir}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Shutdown)
	return srv
}

func rebuildDeps(b *testing.B, srv *natsd.Server) owner.Deps {
	log := slog.New(slog.DiscardHandler)
	js := srv.JetStream()
	if _, err := ingest.New(b.Context(), js, destinations.NewRegistry(), ingest.Config{Partitions: ingest.FixedCount(1)}, log); err != nil {
		b.Fatal(err)
	}
	return owner.Deps{JS: js, Registry: destinations.NewRegistry(), Clock: clock.Real{}, Log: log, DedupWindow: ingest.DefaultDedupWindow}
}

// fillLanes stores events in partition 0's lane store as its writer would.
func fillLanes(b *testing.B, js jetstream.JetStream, events, nLanes int) {
	ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
	defer cancel()
	payload := make([]byte, 64)
	for i := range events {
		ev := &rivorav1.Event{
			EventId: uuid.Must(uuid.NewV7()).String(), DestinationId: "dest", CustomerId: "bench",
			LaneKey: fmt.Sprintf("lane-%d", i%nLanes), Type: "bench.rebuild", Payload: payload,
			ContentType: "application/json", AcceptedAt: timestamppb.Now(),
		}
		data, err := proto.Marshal(ev)
		if err != nil {
			b.Fatal(err)
		}
		msg := nats.NewMsg(lanes.EventLane(ev).Subject(0))
		msg.Data = data
		msg.Header.Set(jetstream.MsgIDHeader, ev.EventId)
		if _, err := js.PublishMsgAsync(msg); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		b.Fatal("lane store writes not acknowledged")
	}
}
