package tracing

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Header names of the W3C trace context, in canonical form.
const (
	TraceparentHeader = "Traceparent"
	TracestateHeader  = "Tracestate"
)

// w3c is the W3C trace context propagator, used directly rather than the
// global one: what Rivora stores and sends is always W3C.
var w3c propagation.TraceContext

// pair is a carrier of one traceparent and tracestate.
type pair struct{ traceparent, tracestate string }

func (p *pair) Get(key string) string {
	switch key {
	case "traceparent":
		return p.traceparent
	case "tracestate":
		return p.tracestate
	}
	return ""
}

func (p *pair) Set(key, value string) {
	switch key {
	case "traceparent":
		p.traceparent = value
	case "tracestate":
		p.tracestate = value
	}
}

func (p *pair) Keys() []string { return []string{"traceparent", "tracestate"} }

// Parse is the span context a stored (or received) traceparent and
// tracestate name, marked remote; invalid (IsValid false) when traceparent
// is empty or malformed.
func Parse(traceparent, tracestate string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(w3c.Extract(noCtx, &pair{traceparent, tracestate}))
}

// Format is the traceparent and tracestate of sc ("" when sc is invalid).
func Format(sc trace.SpanContext) (traceparent, tracestate string) {
	if !sc.IsValid() {
		return "", ""
	}
	var p pair
	w3c.Inject(trace.ContextWithSpanContext(noCtx, sc), &p)
	return p.traceparent, p.tracestate
}

// Normalize is a received traceparent and tracestate as Rivora stores
// them: validated and re-encoded, or "" when traceparent is not valid.
func Normalize(traceparent, tracestate string) (string, string) {
	return Format(Parse(traceparent, tracestate))
}

var noCtx = context.Background()
