package delivery

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/rivora/rivora/internal/tracing"
)

// sendTraced makes the attempt inside a rivora.attempt span, a child of
// the trace context stored with the event (the publisher's trace, also
// for a retry hours later or after a restart), and passes the span's
// context on to the receiver.
func (s *Sender) sendTraced(ctx context.Context, req Request) Result {
	ev := req.Event
	if sc := tracing.Parse(ev.GetTraceparent(), ev.GetTracestate()); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	ctx, span := tracing.Tracer().Start(ctx, "rivora.attempt", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("rivora.destination", ev.GetDestinationId()),
		attribute.String("rivora.customer", ev.GetCustomerId()),
		attribute.String("rivora.event_id", ev.GetEventId()),
		attribute.Int("rivora.attempt", req.Attempt),
		attribute.Int64("rivora.budget_wait_ms", req.BudgetWait.Milliseconds()),
	))
	defer span.End()
	traceparent, tracestate := tracing.Format(span.SpanContext())
	res := s.send(ctx, req, traceparent, tracestate)
	if !span.IsRecording() {
		return res
	}
	if res.Status != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", res.Status))
	}
	if res.Err != nil {
		span.SetStatus(codes.Error, res.Err.Error())
	}
	return res
}
