package sdk

import (
	"context"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traceContext sends the W3C trace context of each call's ctx (its
// traceparent and tracestate headers), so that Rivora's spans and the
// webhooks it delivers join the caller's trace. It uses the W3C propagator
// itself rather than the global one, so it works whether or not the app
// set one; a ctx without a span sends nothing.
func traceContext() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if req.Spec().IsClient && trace.SpanContextFromContext(ctx).IsValid() {
				propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header()))
			}
			return next(ctx, req)
		}
	}
}
