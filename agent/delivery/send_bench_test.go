package delivery_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/internal/tracing"
	"github.com/rivora/rivora/sdk/webhook"
)

// BenchmarkSend is one attempt against a partner on 127.0.0.1 (tracing
// off: what every delivery costs when no OTEL_* variable is set).
func BenchmarkSend(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	s := delivery.NewSender("rivora/bench", loopbackOnly)
	signer, err := webhook.NewSigner(secret)
	if err != nil {
		b.Fatal(err)
	}
	ep := destinations.Endpoint{URL: srv.URL, Signer: signer}
	ev := event()
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	for b.Loop() {
		if res := s.Send(context.Background(), delivery.Request{Endpoint: ep, Event: ev, Attempt: 1, Timeout: 5 * time.Second}); !res.OK() {
			b.Fatal(res.Err)
		}
	}
	// The partner's share included (it runs in this process): on a shared
	// machine CPU time per op varies less than ns/op.
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

// BenchmarkSendTraced is BenchmarkSend with tracing on (spans batched to
// an exporter that drops them) and a stored trace context.
func BenchmarkSendTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer tracing.Use(tp)()
	defer tp.Shutdown(context.Background())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	s := delivery.NewSender("rivora/bench", loopbackOnly)
	signer, err := webhook.NewSigner(secret)
	if err != nil {
		b.Fatal(err)
	}
	ep := destinations.Endpoint{URL: srv.URL, Signer: signer}
	ev := event()
	ev.Traceparent = storedTP
	b.ReportAllocs()
	for b.Loop() {
		if res := s.Send(context.Background(), delivery.Request{Endpoint: ep, Event: ev, Attempt: 1, Timeout: 5 * time.Second}); !res.OK() {
			b.Fatal(res.Err)
		}
	}
}
