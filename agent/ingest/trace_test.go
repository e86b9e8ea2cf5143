package ingest_test

import (
	"context"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/tracing"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
	callerTP    = "00-" + callerTrace + "-" + callerSpan + "-01"
	callerTS    = "vendor=opaque"
)

// traceOn turns tracing on for the test, exporting to memory.
func traceOn(t *testing.T) *tracetest.InMemoryExporter {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	restore := tracing.Use(tp)
	t.Cleanup(func() { restore(); tp.Shutdown(context.Background()) })
	return exp
}

func withTrace[T any](msg *T, traceparent, tracestate string) *connect.Request[T] {
	req := connect.NewRequest(msg)
	if traceparent != "" {
		req.Header().Set("traceparent", traceparent)
	}
	if tracestate != "" {
		req.Header().Set("tracestate", tracestate)
	}
	return req
}

func spanNamed(t *testing.T, exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %s, want 1 (all: %v)", len(found), name, exp.GetSpans())
	}
	return found[0]
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestPublishContinuesCallersTrace(t *testing.T) {
	exp := traceOn(t)
	f := newFixture(t)
	resp, err := f.gw.Publish(context.Background(), withTrace(valid(), callerTP, callerTS))
	if err != nil {
		t.Fatal(err)
	}
	ingestSpan := spanNamed(t, exp, "rivora.ingest")
	store := spanNamed(t, exp, "rivora.store")
	if got := ingestSpan.SpanContext.TraceID().String(); got != callerTrace {
		t.Errorf("ingest span trace %s, want the caller's %s", got, callerTrace)
	}
	if got := ingestSpan.Parent.SpanID().String(); got != callerSpan || !ingestSpan.Parent.IsRemote() {
		t.Errorf("ingest span's parent %s (remote %v), want the caller's span %s", got, ingestSpan.Parent.IsRemote(), callerSpan)
	}
	if ingestSpan.SpanKind != trace.SpanKindServer {
		t.Errorf("ingest span kind %v, want server", ingestSpan.SpanKind)
	}
	a := attrs(ingestSpan)
	for k, want := range map[attribute.Key]string{"rivora.destination": "orders", "rivora.customer": "acme", "rivora.event_id": resp.Msg.GetEventId()} {
		if got := a[k].AsString(); got != want {
			t.Errorf("ingest span %s = %q, want %q", k, got, want)
		}
	}
	if store.Parent.SpanID() != ingestSpan.SpanContext.SpanID() {
		t.Errorf("store span's parent %s, want the ingest span %s", store.Parent.SpanID(), ingestSpan.SpanContext.SpanID())
	}
	ev := f.stored(t)[0]
	want := fmt.Sprintf("00-%s-%s-01", callerTrace, ingestSpan.SpanContext.SpanID())
	if ev.GetTraceparent() != want || ev.GetTracestate() != callerTS {
		t.Errorf("stored trace context %q %q, want the ingest span's %q %q", ev.GetTraceparent(), ev.GetTracestate(), want, callerTS)
	}
}

func TestPublishWithoutCallerTraceStartsOne(t *testing.T) {
	exp := traceOn(t)
	f := newFixture(t)
	if _, err := f.gw.Publish(context.Background(), connect.NewRequest(valid())); err != nil {
		t.Fatal(err)
	}
	ingestSpan := spanNamed(t, exp, "rivora.ingest")
	if ingestSpan.Parent.IsValid() {
		t.Errorf("ingest span has parent %v, want a root", ingestSpan.Parent)
	}
	want := fmt.Sprintf("00-%s-%s-01", ingestSpan.SpanContext.TraceID(), ingestSpan.SpanContext.SpanID())
	if got := f.stored(t)[0].GetTraceparent(); got != want {
		t.Errorf("stored traceparent %q, want the ingest span's %q", got, want)
	}
}

func TestPublishBatchTrace(t *testing.T) {
	exp := traceOn(t)
	f := newFixture(t)
	second := valid()
	second.CustomerId = "globex"
	batch := &rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{valid(), second}}
	if _, err := f.gw.PublishBatch(context.Background(), withTrace(batch, callerTP, "")); err != nil {
		t.Fatal(err)
	}
	ingestSpan := spanNamed(t, exp, "rivora.ingest")
	a := attrs(ingestSpan)
	if got := a["rivora.batch_size"].AsInt64(); got != 2 {
		t.Errorf("rivora.batch_size = %d, want 2", got)
	}
	if got := a["rivora.destination"].AsString(); got != "orders" {
		t.Errorf("rivora.destination = %q, want the batch's one destination orders", got)
	}
	if _, ok := a["rivora.customer"]; ok {
		t.Errorf("rivora.customer set for a batch of two customers")
	}
	if store := spanNamed(t, exp, "rivora.store"); store.Parent.SpanID() != ingestSpan.SpanContext.SpanID() {
		t.Errorf("store span is not the ingest span's child")
	}
	want := fmt.Sprintf("00-%s-%s-01", callerTrace, ingestSpan.SpanContext.SpanID())
	for _, ev := range f.stored(t) {
		if ev.GetTraceparent() != want || ev.GetTracestate() != "" {
			t.Errorf("event %s stored %q %q, want %q and no tracestate", ev.GetEventId(), ev.GetTraceparent(), ev.GetTracestate(), want)
		}
	}
}

func TestPublishTraceFailedSpan(t *testing.T) {
	exp := traceOn(t)
	f := newFixture(t)
	bad := valid()
	bad.DestinationId = "nowhere"
	if _, err := f.gw.Publish(context.Background(), withTrace(bad, callerTP, "")); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("err %v, want InvalidArgument", err)
	}
	if s := spanNamed(t, exp, "rivora.ingest"); s.Status.Code.String() != "Error" || s.Status.Description == "" {
		t.Errorf("ingest span status %v, want an error with the reason", s.Status)
	}
}

// Off, no span is made, and the caller's valid trace context is stored as
// it came, so that the webhooks still join the caller's trace.
func TestPublishTracingOffStoresCallersContext(t *testing.T) {
	if tracing.Tracer() != nil {
		t.Fatal("tracing is on without Setup")
	}
	f := newFixture(t)
	for _, tc := range []struct{ name, traceparent, tracestate, wantTP, wantTS string }{
		{"valid", callerTP, callerTS, callerTP, callerTS},
		{"none", "", "", "", ""},
		{"malformed", "00-xyz-" + callerSpan + "-01", callerTS, "", ""},
		{"all-zero trace id", "00-00000000000000000000000000000000-" + callerSpan + "-01", "", "", ""},
	} {
		req := valid()
		req.LaneKey = tc.name
		resp, err := f.gw.Publish(context.Background(), withTrace(req, tc.traceparent, tc.tracestate))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		found := false
		for _, ev := range f.stored(t) {
			if ev.GetEventId() != resp.Msg.GetEventId() {
				continue
			}
			found = true
			if ev.GetTraceparent() != tc.wantTP || ev.GetTracestate() != tc.wantTS {
				t.Errorf("%s: stored %q %q, want %q %q", tc.name, ev.GetTraceparent(), ev.GetTracestate(), tc.wantTP, tc.wantTS)
			}
		}
		if !found {
			t.Errorf("%s: event %s is not stored", tc.name, resp.Msg.GetEventId())
		}
	}
}

// A retry of a keyed publish from another trace is the same event: the
// trace context is no part of its fingerprint.
func TestPublishKeyedRetryFromAnotherTrace(t *testing.T) {
	f := newFixture(t)
	req := valid()
	req.IdempotencyKey = "order-1"
	first, err := f.gw.Publish(context.Background(), withTrace(req, callerTP, ""))
	if err != nil {
		t.Fatal(err)
	}
	again, err := f.gw.Publish(context.Background(), withTrace(req, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", ""))
	if err != nil {
		t.Fatalf("retry from another trace: %v", err)
	}
	if !again.Msg.GetDuplicate() || again.Msg.GetEventId() != first.Msg.GetEventId() {
		t.Errorf("retry answered %v, want a duplicate of %s", again.Msg, first.Msg.GetEventId())
	}
	if got := f.stored(t); len(got) != 1 || got[0].GetTraceparent() != callerTP {
		t.Errorf("stored %d events (first traceparent %q), want the first alone", len(got), got[0].GetTraceparent())
	}
}

// A resend and a replay keep the original's trace context: their attempts
// join the publisher's trace.
func TestResendAndReplayKeepTraceContext(t *testing.T) {
	f := newFixture(t)
	if _, err := f.gw.Publish(context.Background(), withTrace(valid(), callerTP, callerTS)); err != nil {
		t.Fatal(err)
	}
	original := f.stored(t)[0]
	if _, _, err := f.gw.Resend(context.Background(), original, "resend:a"); err != nil {
		t.Fatal(err)
	}
	dl := &rivorav1.DeadLetter{Event: original, DeadAt: timestamppb.Now()}
	if _, _, err := f.gw.Reingest(context.Background(), []*rivorav1.DeadLetter{dl}); err != nil {
		t.Fatal(err)
	}
	for seq := uint64(2); seq <= 3; seq++ {
		raw, err := f.st.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatalf("seq %d (the resend, then the replay): %v", seq, err)
		}
		ev := &rivorav1.Event{}
		if err := proto.Unmarshal(raw.Data, ev); err != nil {
			t.Fatal(err)
		}
		if ev.GetTraceparent() != callerTP || ev.GetTracestate() != callerTS {
			t.Errorf("re-ingested event (resent %v, replayed %v) stored %q %q, want the original's %q %q", ev.GetResent(), ev.GetReplayed(), ev.GetTraceparent(), ev.GetTracestate(), callerTP, callerTS)
		}
	}
}

// A dead letter's trace context comes from the archive, which anyone with
// access may have edited: replay checks it as ingest does, so a CR/LF in
// it never reaches (and fails) every attempt's request.
func TestReplayDropsABadArchivedTraceContext(t *testing.T) {
	f := newFixture(t)
	ev := &rivorav1.Event{EventId: "01900000-0000-7000-8000-000000000001", DestinationId: "orders", CustomerId: "acme", LaneKey: "u1", Type: "t",
		Payload: []byte(`{}`), Traceparent: callerTP + "\r\nX-Injected: 1", Tracestate: callerTS}
	if _, _, err := f.gw.Reingest(context.Background(), []*rivorav1.DeadLetter{{Event: ev, DeadAt: timestamppb.Now()}}); err != nil {
		t.Fatal(err)
	}
	raw, err := f.st.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	got := &rivorav1.Event{}
	if err := proto.Unmarshal(raw.Data, got); err != nil {
		t.Fatal(err)
	}
	if got.GetEventId() != ev.GetEventId() || got.GetTraceparent() != "" || got.GetTracestate() != "" {
		t.Fatalf("replayed %s with trace context %q %q; want %s, with none", got.GetEventId(), got.GetTraceparent(), got.GetTracestate(), ev.GetEventId())
	}
}

// Every delivery of a fan-out carries the publish's trace context, and
// the ingest span says whose publish it was and how many routes it took
// (0 included: what an unrouted publish is found by).
func TestFanOutTrace(t *testing.T) {
	exp := traceOn(t)
	f := newFixture(t)
	f.withSubscriptions(t, acmeSubscriptions...)
	resp, err := f.gw.Publish(context.Background(), withTrace(fanOut("order.created", `{"amount":150}`), callerTP, callerTS))
	if err != nil {
		t.Fatal(err)
	}
	span := spanNamed(t, exp, "rivora.ingest")
	a := attrs(span)
	if a["rivora.customer"].AsString() != "acme" || a["rivora.routes"].AsInt64() != 3 {
		t.Fatalf("ingest span attributes %v, want customer acme and 3 routes", a)
	}
	wantTP := fmt.Sprintf("00-%s-%s-01", callerTrace, span.SpanContext.SpanID())
	stored := f.storedByID(t)
	for _, r := range resp.Msg.GetRoutes() {
		if ev := stored[r.GetEventId()]; ev.GetTraceparent() != wantTP || ev.GetTracestate() != callerTS {
			t.Fatalf("delivery %s: trace context %q %q, want %q %q", r.GetSubscriptionId(), ev.GetTraceparent(), ev.GetTracestate(), wantTP, callerTS)
		}
	}
	exp.Reset()
	if _, err := f.gw.Publish(context.Background(), connect.NewRequest(fanOut("shipment.sent", `{}`))); err != nil {
		t.Fatal(err)
	}
	if a := attrs(spanNamed(t, exp, "rivora.ingest")); a["rivora.routes"].Type() != attribute.INT64 || a["rivora.routes"].AsInt64() != 0 || a["rivora.customer"].AsString() != "acme" {
		t.Fatalf("unrouted publish's span attributes %v", a)
	}
}
