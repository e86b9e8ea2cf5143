package ingest_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/internal/tracing"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// BenchmarkPublish is one Publish stored in INGEST (tracing off: what
// every Publish costs when no OTEL_* variable is set).
func BenchmarkPublish(b *testing.B) {
	f := newFixture(b)
	req := valid()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		req.LaneKey = "lane-" + strconv.Itoa(i%100)
		r := connect.NewRequest(req)
		r.Header() // made, as a server's request has it
		if _, err := f.gw.Publish(context.Background(), r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublishTraced is BenchmarkPublish with tracing on (spans
// batched to an exporter that drops them) and a caller's traceparent.
func BenchmarkPublishTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer tracing.Use(tp)()
	defer tp.Shutdown(context.Background())
	f := newFixture(b)
	req := valid()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		req.LaneKey = "lane-" + strconv.Itoa(i%100)
		r := connect.NewRequest(req)
		r.Header().Set("Traceparent", callerTP)
		if _, err := f.gw.Publish(context.Background(), r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublishBatchFanOut is a PublishBatch of 100 events stored in
// INGEST, each naming its destination (direct), or without destination
// matching 1, 3 or 10 of its customer's subscriptions (among 20, half of
// them by a glob, half with a filter). deliveries/s is what is stored per
// second; compare it with direct's to get the fan-out's cost per delivery.
func BenchmarkPublishBatchFanOut(b *testing.B) {
	const batchSize = 100
	for _, matching := range []int{0, 1, 3, 10} {
		name := "direct"
		if matching > 0 {
			name = "subs=" + strconv.Itoa(matching)
		}
		b.Run(name, func(b *testing.B) {
			f := newFixture(b)
			subs := make([]*rivorav1.Subscription, 20)
			for i := range subs {
				typ, filter := "invoice.*", ""
				if i < matching {
					typ = "order.*"
				}
				if i%2 == 1 {
					filter = "data.order > 0"
				}
				subs[i] = &rivorav1.Subscription{
					Id: fmt.Sprintf("sub_%016x", i), CustomerId: "acme", DestinationId: []string{"orders", "billing"}[i%2],
					Types: []string{typ}, Filter: filter,
				}
			}
			f.withSubscriptions(b, subs...)
			gw := f.with(b, ingest.Config{MaxBatch: batchSize})
			events := make([]*rivorav1.PublishRequest, batchSize)
			for i := range events {
				events[i] = valid()
				if matching > 0 {
					events[i].DestinationId = ""
				}
			}
			deliveries := batchSize * max(matching, 1)
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				for i, ev := range events {
					ev.LaneKey = "lane-" + strconv.Itoa((n+i)%100)
				}
				n++
				resp, err := gw.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{Events: events}))
				if err != nil {
					b.Fatal(err)
				}
				if matching > 0 && len(resp.Msg.GetResults()[0].GetRoutes()) != matching {
					b.Fatalf("an event matched %d subscriptions, want %d", len(resp.Msg.GetResults()[0].GetRoutes()), matching)
				}
			}
			b.ReportMetric(float64(deliveries*b.N)/b.Elapsed().Seconds(), "deliveries/s")
		})
	}
}

// BenchmarkPublishKeyed is BenchmarkPublish with an idempotency key per
// event, as the SDKs send: the idempotency check's cost on top.
func BenchmarkPublishKeyed(b *testing.B) {
	f := newFixture(b)
	req := valid()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		req.LaneKey = "lane-" + strconv.Itoa(i%100)
		req.IdempotencyKey = "key-" + strconv.Itoa(i)
		if _, err := f.gw.Publish(context.Background(), connect.NewRequest(req)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublishBatchKeyed is a PublishBatch of 50 keyed events stored
// in INGEST.
func BenchmarkPublishBatchKeyed(b *testing.B) {
	f := newFixture(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		events := make([]*rivorav1.PublishRequest, 50)
		for j := range events {
			i++
			events[j] = valid()
			events[j].LaneKey = "lane-" + strconv.Itoa(i%100)
			events[j].IdempotencyKey = "key-" + strconv.Itoa(i)
		}
		if _, err := f.gw.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{Events: events})); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*50)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkPublishBatchKeyedOwned is a PublishBatch of 500 keyed events,
// 256-byte payloads, into partitions this agent owns, whose lanes answer
// at once (ownedStore): the gateway's own work per event, as `bench
// ingest`'s PublishBatch phase has it, without the store's.
func BenchmarkPublishBatchKeyedOwned(b *testing.B) {
	const batchSize = 500
	f := newFixture(b)
	gw := f.with(b, ingest.Config{MaxBatch: batchSize, Local: &ownedStore{}})
	payload := []byte(`{"order":1,"pad":"` + strings.Repeat("a", 256-20) + `"}`)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		events := make([]*rivorav1.PublishRequest, batchSize)
		for j := range events {
			i++
			events[j] = valid()
			events[j].Payload = payload
			events[j].LaneKey = "lane-" + strconv.Itoa(i%2000)
			events[j].IdempotencyKey = "key-" + strconv.Itoa(i)
		}
		if _, err := gw.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{Events: events})); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batchSize), "ns/event")
}

// ownedStore owns every partition; its lanes store every event at once,
// at the next sequence, and never held an id before.
type ownedStore struct{ seq atomic.Uint64 }

func (s *ownedStore) AppendLocal(_ context.Context, p int, events []ingest.LocalEvent) ([]ingest.Stored, bool, error) {
	out := make([]ingest.Stored, len(events))
	last := s.seq.Add(uint64(len(events)))
	for i := range out {
		out[i] = ingest.Stored{Stream: lanes.LanesStream(p), Seq: last - uint64(len(events)-1-i)}
	}
	return out, true, nil
}

func (*ownedStore) Owns(int) bool { return true }

func (*ownedStore) MayHold(int, string) bool                         { return false }
func (*ownedStore) WaitsInIngest(context.Context, int) (bool, error) { return false, nil }
