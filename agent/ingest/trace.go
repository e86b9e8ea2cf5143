package ingest

import (
	"context"
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/internal/tracing"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Span attributes.
const (
	attrDestination = attribute.Key("rivora.destination")
	attrCustomer    = attribute.Key("rivora.customer")
	attrEventID     = attribute.Key("rivora.event_id")
	attrBatchSize   = attribute.Key("rivora.batch_size")
	// attrRoutes is how many subscriptions a publish without destination
	// was stored for (0: it matched none).
	attrRoutes = attribute.Key("rivora.routes")
)

// ingestTrace is a Publish's trace: its span (nil when tracing is off)
// and the trace context stored with its events ("" for none).
type ingestTrace struct {
	span                    trace.Span
	traceparent, tracestate string
}

// startIngest continues the caller's trace (the traceparent and
// tracestate headers) with the rivora.ingest span. Tracing off, it only
// keeps the caller's valid context to store, so that the webhooks still
// join the caller's trace; without a traceparent it costs one header
// lookup.
func startIngest(ctx context.Context, h http.Header) (context.Context, *ingestTrace) {
	tr := tracing.Tracer()
	if tr == nil {
		tp := h.Get(tracing.TraceparentHeader)
		if tp == "" {
			return ctx, nil
		}
		t := &ingestTrace{}
		t.traceparent, t.tracestate = tracing.Normalize(tp, h.Get(tracing.TracestateHeader))
		return ctx, t
	}
	if sc := tracing.Parse(h.Get(tracing.TraceparentHeader), h.Get(tracing.TracestateHeader)); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	ctx, span := tr.Start(ctx, "rivora.ingest", trace.WithSpanKind(trace.SpanKindServer))
	t := &ingestTrace{span: span}
	t.traceparent, t.tracestate = tracing.Format(span.SpanContext())
	return ctx, t
}

// stamp stores the trace context with a prepared event. It appends the
// two fields to the encoded event rather than encoding it again:
// protobuf reads concatenated encodings as one merged message.
func (t *ingestTrace) stamp(p *prepared) error {
	if t == nil || t.traceparent == "" {
		return nil
	}
	p.event.Traceparent, p.event.Tracestate = t.traceparent, t.tracestate
	data, err := proto.MarshalOptions{}.MarshalAppend(p.data, &rivorav1.Event{Traceparent: t.traceparent, Tracestate: t.tracestate})
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	p.data = data
	return nil
}

// recording reports whether the ingest span records.
func (t *ingestTrace) recording() bool {
	return t != nil && t.span != nil && t.span.IsRecording()
}

// annotate adds a request's attributes to the span: a single Publish's
// event (or a routed one's customer and route count), or a batch's size
// and what its deliveries share.
func (t *ingestTrace) annotate(pubs []publication, events []*prepared, inBatch bool) {
	if !t.recording() {
		return
	}
	switch {
	case inBatch:
		t.annotateBatch(len(pubs), events)
	case pubs[0].direct != nil:
		ev := pubs[0].direct.event
		t.span.SetAttributes(attrDestination.String(ev.GetDestinationId()), attrCustomer.String(ev.GetCustomerId()), attrEventID.String(ev.GetEventId()))
	default:
		r := pubs[0].routed
		t.span.SetAttributes(attrCustomer.String(r.base.GetCustomerId()), attrRoutes.Int(len(r.routes)))
	}
}

// annotateBatch adds a batch's attributes to the span: its size, and the
// destination and customer of its deliveries when they all share them.
func (t *ingestTrace) annotateBatch(size int, events []*prepared) {
	attrs := []attribute.KeyValue{attrBatchSize.Int(size)}
	if len(events) > 0 {
		dest, cust := events[0].event.GetDestinationId(), events[0].event.GetCustomerId()
		for _, p := range events[1:] {
			if p.event.GetDestinationId() != dest {
				dest = ""
			}
			if p.event.GetCustomerId() != cust {
				cust = ""
			}
		}
		if dest != "" {
			attrs = append(attrs, attrDestination.String(dest))
		}
		if cust != "" {
			attrs = append(attrs, attrCustomer.String(cust))
		}
	}
	t.span.SetAttributes(attrs...)
}

// startStore starts the rivora.store span around the JetStream write of
// n events; end it with the write's error.
func (t *ingestTrace) startStore(ctx context.Context, n int) (context.Context, trace.Span) {
	if t == nil || t.span == nil {
		return ctx, nil
	}
	return tracing.Tracer().Start(ctx, "rivora.store", trace.WithAttributes(attribute.Int("rivora.events", n)))
}

// endSpan ends span (nil: none) with err as its status.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// end ends the ingest span with the Publish's error, as its caller reads
// it (code and message: errkind's mapping, which the interceptor applies).
func (t *ingestTrace) end(err error) {
	if t != nil {
		endSpan(t.span, errkind.AsConnect(err))
	}
}
