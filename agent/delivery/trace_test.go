package delivery_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/internal/tracing"
)

const (
	storedTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	storedSpan  = "00f067aa0ba902b7" // the ingest span's
	storedTP    = "00-" + storedTrace + "-" + storedSpan + "-01"
	storedTS    = "vendor=opaque"
)

func traceOn(t *testing.T) *tracetest.InMemoryExporter {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	restore := tracing.Use(tp)
	t.Cleanup(func() { restore(); tp.Shutdown(context.Background()) })
	return exp
}

func TestSendAttemptSpan(t *testing.T) {
	exp := traceOn(t)
	for _, tc := range []struct {
		status  int
		wantErr bool
	}{{http.StatusNoContent, false}, {http.StatusServiceUnavailable, true}} {
		exp.Reset()
		srv, got := partner(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(tc.status) })
		ev := event()
		ev.Traceparent, ev.Tracestate = storedTP, storedTS
		s := delivery.NewSender("rivora/test", loopbackOnly)
		res := s.Send(context.Background(), delivery.Request{Endpoint: endpoint(t, srv.URL), Event: ev, Attempt: 2, Timeout: 5 * time.Second, BudgetWait: 1500 * time.Millisecond})
		if res.Status != tc.status {
			t.Fatalf("status %d, want %d (%v)", res.Status, tc.status, res.Err)
		}
		spans := exp.GetSpans()
		if len(spans) != 1 || spans[0].Name != "rivora.attempt" {
			t.Fatalf("spans %v, want one rivora.attempt", spans)
		}
		span := spans[0]
		if span.SpanKind != trace.SpanKindClient {
			t.Errorf("kind %v, want client", span.SpanKind)
		}
		if span.SpanContext.TraceID().String() != storedTrace || span.Parent.SpanID().String() != storedSpan || !span.Parent.IsRemote() {
			t.Errorf("attempt span %s parent %s, want a child of the stored %s", span.SpanContext.TraceID(), span.Parent.SpanID(), storedTP)
		}
		a := map[attribute.Key]attribute.Value{}
		for _, kv := range span.Attributes {
			a[kv.Key] = kv.Value
		}
		for k, want := range map[attribute.Key]any{
			"rivora.destination": "orders", "rivora.customer": "acme", "rivora.event_id": "evt_01J7",
			"rivora.attempt": int64(2), "rivora.budget_wait_ms": int64(1500), "http.response.status_code": int64(tc.status),
		} {
			if got := a[k].AsInterface(); got != want {
				t.Errorf("%s = %v, want %v", k, got, want)
			}
		}
		if tc.wantErr != (span.Status.Code == codes.Error) || (tc.wantErr && span.Status.Description != res.Err.Error()) {
			t.Errorf("status %v, want error %v with %v", span.Status, tc.wantErr, res.Err)
		}
		h := (<-got).header
		want := fmt.Sprintf("00-%s-%s-01", storedTrace, span.SpanContext.SpanID())
		if h.Get("traceparent") != want || h.Get("tracestate") != storedTS {
			t.Errorf("webhook carried %q %q, want the attempt span's %q %q", h.Get("traceparent"), h.Get("tracestate"), want, storedTS)
		}
	}
}

// Off, a webhook carries the stored trace context verbatim (and none when
// none was stored).
func TestSendTracingOffCarriesStoredContext(t *testing.T) {
	srv, got := partner(t, func(w http.ResponseWriter, r *http.Request) {})
	s := delivery.NewSender("rivora/test", loopbackOnly)
	ev := event()
	ev.Traceparent, ev.Tracestate = storedTP, storedTS
	s.Send(context.Background(), delivery.Request{Endpoint: endpoint(t, srv.URL), Event: ev, Attempt: 1, Timeout: 5 * time.Second})
	if h := (<-got).header; h.Get("traceparent") != storedTP || h.Get("tracestate") != storedTS {
		t.Errorf("webhook carried %q %q, want the stored %q %q", h.Get("traceparent"), h.Get("tracestate"), storedTP, storedTS)
	}
	s.Send(context.Background(), delivery.Request{Endpoint: endpoint(t, srv.URL), Event: event(), Attempt: 1, Timeout: 5 * time.Second})
	if h := (<-got).header; h.Values("traceparent") != nil || h.Values("tracestate") != nil {
		t.Errorf("webhook of an event without trace context carried %q %q", h.Get("traceparent"), h.Get("tracestate"))
	}
}

// An event stored without trace context (before tracing, or published
// without one while tracing was off) gets a new trace per attempt.
func TestSendAttemptSpanWithoutStoredContext(t *testing.T) {
	exp := traceOn(t)
	srv, got := partner(t, func(w http.ResponseWriter, r *http.Request) {})
	s := delivery.NewSender("rivora/test", loopbackOnly)
	s.Send(context.Background(), delivery.Request{Endpoint: endpoint(t, srv.URL), Event: event(), Attempt: 1, Timeout: 5 * time.Second})
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Parent.IsValid() {
		t.Fatalf("spans %v, want one root attempt span", spans)
	}
	want := fmt.Sprintf("00-%s-%s-01", spans[0].SpanContext.TraceID(), spans[0].SpanContext.SpanID())
	if h := (<-got).header; h.Get("traceparent") != want {
		t.Errorf("webhook carried %q, want %q", h.Get("traceparent"), want)
	}
}
