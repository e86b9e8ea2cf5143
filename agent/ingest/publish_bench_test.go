package ingest_test

import (
	"context"
	"strconv"
	"testing"

	"connectrpc.com/connect"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/rivora/rivora/internal/tracing"
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
