package sdk_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	"github.com/rivora/rivora/sdk"
)

// traceHeaders records the traceparent and tracestate of every request.
type traceHeaders struct {
	mu          sync.Mutex
	traceparent []string
	tracestate  []string
}

func (th *traceHeaders) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		th.mu.Lock()
		th.traceparent = append(th.traceparent, r.Header.Get("traceparent"))
		th.tracestate = append(th.tracestate, r.Header.Get("tracestate"))
		th.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (th *traceHeaders) seen() (traceparent, tracestate []string) {
	th.mu.Lock()
	defer th.mu.Unlock()
	return slices.Clone(th.traceparent), slices.Clone(th.tracestate)
}

func callerSpan(t *testing.T) context.Context {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, err := trace.ParseTraceState("vendor=opaque")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})
	return trace.ContextWithSpanContext(context.Background(), sc)
}

const wantTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestPublishPropagatesTraceContext(t *testing.T) {
	for _, grpc := range []bool{false, true} {
		th := &traceHeaders{}
		srv := &ingestServer{fail: failFirst(1, connect.CodeUnavailable)}
		ts := httptest.NewUnstartedServer(th.wrap(srv.handler()))
		opts := []sdk.Option{fastRetry()}
		if grpc {
			ts.EnableHTTP2 = true
			ts.StartTLS()
			opts = append(opts, sdk.WithGRPC(), sdk.WithHTTPClient(ts.Client()))
		} else {
			ts.Start()
		}
		t.Cleanup(ts.Close)
		c := sdk.New(ts.URL, opts...)
		ctx := callerSpan(t)
		if _, err := c.Publish(ctx, testEvent); err != nil {
			t.Fatal(err)
		}
		if _, err := c.PublishBatch(ctx, []sdk.Event{testEvent, testEvent}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Publish(context.Background(), testEvent); err != nil {
			t.Fatal(err)
		}
		// A failed try, its retry, the batch: each carries the caller's
		// context; a call without a span carries none.
		tp, tstate := th.seen()
		want := []string{wantTraceparent, wantTraceparent, wantTraceparent, ""}
		if !slices.Equal(tp, want) {
			t.Errorf("grpc=%v: traceparent per request = %q, want %q", grpc, tp, want)
		}
		if wantState := []string{"vendor=opaque", "vendor=opaque", "vendor=opaque", ""}; !slices.Equal(tstate, wantState) {
			t.Errorf("grpc=%v: tracestate per request = %q, want %q", grpc, tstate, wantState)
		}
	}
}
