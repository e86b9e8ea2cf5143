package e2e

// OpenTelemetry: a Publish carrying a traceparent continues in rivora dev's
// spans, exported over OTLP/HTTP to a real receiver on 127.0.0.1, and in
// the webhook's traceparent — also for a retry after a restart.

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// exportedSpan is one span an OTLP receiver got.
type exportedSpan struct {
	Service       string
	Name          string
	TraceID       string
	SpanID        string
	Parent        string
	Kind          tracepb.Span_SpanKind
	Attrs         map[string]string // values as text
	Error         bool
	StatusMessage string
}

// otlpReceiver is an OTLP/HTTP traces endpoint (POST /v1/traces, binary
// protobuf) on 127.0.0.1 that keeps every span.
type otlpReceiver struct {
	url string

	mu    sync.Mutex
	spans []exportedSpan
	bad   []string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	srv := listenLocal(t, "otlp receiver", http.HandlerFunc(r.serve))
	r.url = srv.URL
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.bad) > 0 {
			t.Errorf("OTLP receiver got bad requests: %s", strings.Join(r.bad, "; "))
		}
	})
	return r
}

func (r *otlpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := r.read(req)
	msg := &coltrace.ExportTraceServiceRequest{}
	if err == nil {
		err = proto.Unmarshal(body, msg)
	}
	if err != nil || req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		r.mu.Lock()
		r.bad = append(r.bad, fmt.Sprintf("%s %s (%s): %v", req.Method, req.URL.Path, req.Header.Get("Content-Type"), err))
		r.mu.Unlock()
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.GetResourceSpans() {
		var service string
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				attrs := map[string]string{}
				for _, kv := range s.GetAttributes() {
					v := kv.GetValue()
					switch {
					case v.GetStringValue() != "":
						attrs[kv.GetKey()] = v.GetStringValue()
					default:
						attrs[kv.GetKey()] = strconv.FormatInt(v.GetIntValue(), 10)
					}
				}
				r.spans = append(r.spans, exportedSpan{
					Service: service, Name: s.GetName(), Kind: s.GetKind(), Attrs: attrs,
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()), Parent: hex.EncodeToString(s.GetParentSpanId()),
					Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR, StatusMessage: s.GetStatus().GetMessage(),
				})
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func (r *otlpReceiver) read(req *http.Request) ([]byte, error) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			return nil, err
		}
		body = zr
	}
	return io.ReadAll(io.LimitReader(body, 16<<20))
}

// Spans are the spans received so far of trace traceID named name.
func (r *otlpReceiver) Spans(traceID, name string) []exportedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []exportedSpan
	for _, s := range r.spans {
		if s.TraceID == traceID && s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Total is how many spans were received.
func (r *otlpReceiver) Total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.spans)
}

// startDevEnv is startDev with env added to the process's environment
// (kept across restarts).
func startDevEnv(t *testing.T, opts devOptions, env ...string) *devProc {
	t.Helper()
	d := &devProc{opts: opts, dataDir: opts.DataDir}
	if d.dataDir == "" {
		d.dataDir = t.TempDir()
	}
	d.proc = newProc(t, "rivora dev", rivoraBin, "127.0.0.1:"+strconv.Itoa(freePort(t)), nil)
	d.logTail = 48 << 10
	d.Args = d.devArgs()
	// Ambient OTEL_* variables of the test's environment must not decide.
	d.Env = append([]string{"OTEL_SDK_DISABLED=", "OTEL_TRACES_EXPORTER=", "OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=",
		"OTEL_EXPORTER_OTLP_PROTOCOL=", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=", "OTEL_TRACES_SAMPLER=", "OTEL_SERVICE_NAME="}, env...)
	d.run()
	return d
}

// callerContext is a publisher's span: what an app's own tracing has in
// ctx when it publishes.
func callerContext(t *testing.T, traceHex, spanHex string) context.Context {
	t.Helper()
	tid, err := trace.TraceIDFromHex(traceHex)
	if err != nil {
		t.Fatal(err)
	}
	sid, err := trace.SpanIDFromHex(spanHex)
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	return trace.ContextWithSpanContext(ctxTimeout(t, 30*time.Second), sc)
}

// traceparentOf splits a webhook's traceparent into trace and span id.
func traceparentOf(t *testing.T, d partner.Request) (traceID, spanID string) {
	t.Helper()
	parts := strings.Split(d.Header.Get("Traceparent"), "-")
	if len(parts) != 4 || parts[0] != "00" {
		t.Fatalf("webhook attempt %d of %s carried traceparent %q, want a W3C one", d.Attempt, d.ID, d.Header.Get("Traceparent"))
	}
	return parts[1], parts[2]
}

func TestTracesFollowEventAcrossRestart(t *testing.T) {
	recv := newOTLPReceiver(t)
	d := startDevEnv(t, devOptions{}, "OTEL_EXPORTER_OTLP_ENDPOINT="+recv.url, "OTEL_BSP_SCHEDULE_DELAY=100")
	orders, flaky := newPartner(t), newPartner(t)
	createDestination(t, d, "orders", orders, "", nil)
	createDestination(t, d, "flaky", flaky, "", nil)
	c := d.SDK()

	// One event delivered at once, and a batch.
	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	ctx := callerContext(t, traceID, callerSpan)
	id, err := c.Publish(ctx, sdk.Event{Destination: "orders", Customer: "acme", Lane: "u1", Type: "order.created", Payload: []byte(`{"order":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	const batchTrace = "0af7651916cd43dd8448eb211c80319c"
	batchIDs, err := c.PublishBatch(callerContext(t, batchTrace, "b7ad6b7169203331"), []sdk.Event{
		{Destination: "orders", Customer: "acme", Lane: "u2", Type: "order.created", Payload: []byte(`{"order":2}`)},
		{Destination: "orders", Customer: "acme", Lane: "u3", Type: "order.created", Payload: []byte(`{"order":3}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	orders.WaitDelivered(t, append([]string{id}, batchIDs...), 30*time.Second)

	var ingest, attempt exportedSpan
	poll.True(t, "the ingest and attempt spans of the published trace", 30*time.Second, func() bool {
		in, at := recv.Spans(traceID, "rivora.ingest"), recv.Spans(traceID, "rivora.attempt")
		if len(in) == 0 || len(at) == 0 || len(recv.Spans(traceID, "rivora.store")) == 0 {
			return false
		}
		ingest, attempt = in[0], at[0]
		return true
	})
	if ingest.Parent != callerSpan || ingest.Kind != tracepb.Span_SPAN_KIND_SERVER || ingest.Attrs["rivora.event_id"] != id || ingest.Service != "rivora-dev" {
		t.Errorf("ingest span %+v, want a server span of rivora-dev under the caller's span %s for %s", ingest, callerSpan, id)
	}
	if store := recv.Spans(traceID, "rivora.store")[0]; store.Parent != ingest.SpanID {
		t.Errorf("store span's parent %s, want the ingest span %s", store.Parent, ingest.SpanID)
	}
	if attempt.Parent != ingest.SpanID || attempt.Kind != tracepb.Span_SPAN_KIND_CLIENT || attempt.Error {
		t.Errorf("attempt span %+v, want a successful client span under the ingest span %s", attempt, ingest.SpanID)
	}
	for k, want := range map[string]string{"rivora.destination": "orders", "rivora.customer": "acme", "rivora.event_id": id, "rivora.attempt": "1", "http.response.status_code": "200"} {
		if attempt.Attrs[k] != want {
			t.Errorf("attempt span %s = %q, want %q", k, attempt.Attrs[k], want)
		}
	}
	if _, ok := attempt.Attrs["rivora.budget_wait_ms"]; !ok {
		t.Errorf("attempt span has no rivora.budget_wait_ms")
	}
	for _, del := range orders.Requests() {
		if del.ID != id {
			continue
		}
		if tid, sid := traceparentOf(t, del); tid != traceID || sid != attempt.SpanID {
			t.Errorf("webhook traceparent %s/%s, want the attempt span's %s/%s", tid, sid, traceID, attempt.SpanID)
		}
	}
	poll.True(t, "the batch's spans", 30*time.Second, func() bool {
		return len(recv.Spans(batchTrace, "rivora.ingest")) == 1 && len(recv.Spans(batchTrace, "rivora.attempt")) == 2
	})
	if got := recv.Spans(batchTrace, "rivora.ingest")[0].Attrs["rivora.batch_size"]; got != "2" {
		t.Errorf("batch ingest span rivora.batch_size = %q, want 2", got)
	}

	// A failing partner; rivora dev stops, restarts, and the retry still
	// joins the publisher's trace.
	const retryTrace = "5b8aa5a2d2c872e8321cf37308d69df2"
	flaky.SetStatus(http.StatusServiceUnavailable)
	failing, err := c.Publish(callerContext(t, retryTrace, "051581bf3cb55c13"), sdk.Event{Destination: "flaky", Customer: "acme", Lane: "u1", Type: "order.created", Payload: []byte(`{"order":4}`)})
	if err != nil {
		t.Fatal(err)
	}
	poll.True(t, "the failed attempt's span", 30*time.Second, func() bool { return len(recv.Spans(retryTrace, "rivora.attempt")) > 0 })
	first := recv.Spans(retryTrace, "rivora.attempt")[0]
	if !first.Error || first.Attrs["http.response.status_code"] != "503" || !strings.Contains(first.StatusMessage, "503") {
		t.Errorf("failed attempt span %+v, want an error status with the 503", first)
	}
	if err := d.Stop(30 * time.Second); err != nil {
		t.Fatalf("stop rivora dev: %v", err)
	}
	flaky.SetHealthy()
	restarted := time.Now()
	d.Restart()
	flaky.WaitDelivered(t, []string{failing}, 60*time.Second)

	var retried partner.Request
	for _, del := range flaky.Requests() {
		if del.ID == failing && del.Status == http.StatusOK {
			retried = del
		}
	}
	if retried.At.Before(restarted) {
		t.Fatalf("delivered at %v, before the restart at %v", retried.At, restarted)
	}
	tid, sid := traceparentOf(t, retried)
	if tid != retryTrace {
		t.Errorf("the retry after the restart carried trace %s, want the publisher's %s", tid, retryTrace)
	}
	poll.True(t, "the retry's attempt span", 30*time.Second, func() bool {
		for _, s := range recv.Spans(retryTrace, "rivora.attempt") {
			if s.SpanID == sid {
				return true
			}
		}
		return false
	})
	ingestSpans := recv.Spans(retryTrace, "rivora.ingest")
	for _, s := range recv.Spans(retryTrace, "rivora.attempt") {
		if s.SpanID != sid {
			continue
		}
		if len(ingestSpans) != 1 || s.Parent != ingestSpans[0].SpanID || s.Error || s.Attrs["rivora.attempt"] != strconv.Itoa(retried.Attempt) || s.Attrs["http.response.status_code"] != "200" {
			t.Errorf("retry's attempt span %+v, want attempt %d, 200, under the ingest span", s, retried.Attempt)
		}
	}
}

// Tracing off (OTEL_TRACES_EXPORTER=none, though an endpoint is set):
// nothing is exported, and the webhook still carries the publisher's
// traceparent as it came. (With no OTEL_* variable at all, see
// internal/tracing's TestSetupOffByDefault.)
func TestTraceparentPassesThroughWithTracingOff(t *testing.T) {
	recv := newOTLPReceiver(t)
	d := startDevEnv(t, devOptions{}, "OTEL_TRACES_EXPORTER=none", "OTEL_EXPORTER_OTLP_ENDPOINT="+recv.url, "OTEL_BSP_SCHEDULE_DELAY=100")
	p := newPartner(t)
	createDestination(t, d, "orders", p, "", nil)
	const traceID, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	id, err := d.SDK().Publish(callerContext(t, traceID, callerSpan), sdk.Event{Destination: "orders", Customer: "acme", Lane: "u1", Type: "order.created", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	p.WaitDelivered(t, []string{id}, 30*time.Second)
	del := p.Requests()[0]
	if tid, sid := traceparentOf(t, del); tid != traceID || sid != callerSpan {
		t.Errorf("webhook traceparent %s/%s, want the publisher's %s/%s", tid, sid, traceID, callerSpan)
	}
	// Stopping flushes whatever a tracer provider would hold.
	if err := d.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if n := recv.Total(); n != 0 {
		t.Errorf("%d spans exported with OTEL_TRACES_EXPORTER=none", n)
	}
	if !strings.Contains(d.Tail(1<<20), "tracing off") {
		t.Errorf("rivora dev's log does not say tracing is off")
	}
}
