package tracing_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/internal/tracing"
)

var otelVars = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
	"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		on      bool
		proto   string
		wantErr string
	}{
		{"nothing set", nil, false, "", ""},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true, "http/protobuf", ""},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true, "http/protobuf", ""},
		{"otlp without endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, "http/protobuf", ""},
		{"grpc", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true, "grpc", ""},
		{"traces protocol wins", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, true, "http/protobuf", ""},
		{"none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, false, "", ""},
		{"disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false, "", ""},
		{"not disabled", map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, true, "http/protobuf", ""},
		{"bad disabled", map[string]string{"OTEL_SDK_DISABLED": "yes please"}, false, "", "OTEL_SDK_DISABLED"},
		{"zipkin", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "", `OTEL_TRACES_EXPORTER="zipkin"`},
		{"two exporters", map[string]string{"OTEL_TRACES_EXPORTER": "otlp,console"}, false, "", "one exporter only"},
		{"http/json", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, false, "", `OTEL_EXPORTER_OTLP_PROTOCOL="http/json": want grpc or http/protobuf`},
		{"bad traces protocol", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"}, false, "", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{"ratio sampler", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}, true, "http/protobuf", ""},
		{"endpoint without scheme", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4318"}, false, "", "want an http:// or https:// URL"},
		{"bad sampler", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "sometimes"}, false, "", "OTEL_TRACES_SAMPLER"},
		{"bad ratio", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, false, "", "OTEL_TRACES_SAMPLER_ARG"},
	} {
		cfg, err := tracing.FromEnv(env(tc.env))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err %v, want one naming %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || cfg.Enabled != tc.on || cfg.Protocol != tc.proto {
			t.Errorf("%s: %+v, %v; want on %v protocol %q", tc.name, cfg, err, tc.on, tc.proto)
		}
	}
}

func clearEnv(t *testing.T) {
	for _, k := range otelVars {
		t.Setenv(k, "")
	}
}

// With no OTEL_* variable, no SDK runs: Tracer is nil, the global
// provider stays otel's no-op, and Setup says so.
func TestSetupOffByDefault(t *testing.T) {
	clearEnv(t)
	var logs bytes.Buffer
	shutdown, err := tracing.Setup(context.Background(), "rivora-test", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	if tracing.Tracer() != nil {
		t.Error("Tracer is set with tracing off")
	}
	_, span := otel.Tracer("x").Start(context.Background(), "y")
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Error("the global tracer records with tracing off")
	}
	if !strings.Contains(logs.String(), "tracing off") {
		t.Errorf("log %q does not say tracing is off", logs.String())
	}
}

// On, spans reach an OTLP/HTTP receiver with the service name, at the
// latest when shutdown flushes them.
func TestSetupExportsOverHTTP(t *testing.T) {
	clearEnv(t)
	got := make(chan *coltrace.ExportTraceServiceRequest, 4)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &coltrace.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, req) != nil {
			t.Errorf("receiver got %s %s, not an OTLP export", r.Method, r.URL.Path)
		}
		got <- req
	}))
	defer recv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	var logs bytes.Buffer
	shutdown, err := tracing.Setup(context.Background(), "rivora-test", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "tracing on") || !strings.Contains(logs.String(), "protocol=http/protobuf") || !strings.Contains(logs.String(), recv.URL) {
		t.Errorf("log %q does not say tracing is on, with the protocol and endpoint", logs.String())
	}
	_, span := tracing.Tracer().Start(context.Background(), "rivora.test")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tracing.Tracer() != nil {
		t.Error("Tracer still set after shutdown")
	}
	req := <-got
	rs := req.GetResourceSpans()[0]
	var service string
	for _, kv := range rs.GetResource().GetAttributes() {
		if kv.GetKey() == "service.name" {
			service = kv.GetValue().GetStringValue()
		}
	}
	if service != "from-env" {
		t.Errorf("service.name %q, want OTEL_SERVICE_NAME's from-env", service)
	}
	if name := rs.GetScopeSpans()[0].GetSpans()[0].GetName(); name != "rivora.test" {
		t.Errorf("exported span %q", name)
	}
}

func TestParseFormat(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc := tracing.Parse(tp, "a=1,b=2")
	if !sc.IsValid() || !sc.IsRemote() {
		t.Fatalf("Parse(%q) = %v", tp, sc)
	}
	if gotTP, gotTS := tracing.Format(sc); gotTP != tp || gotTS != "a=1,b=2" {
		t.Errorf("Format = %q %q", gotTP, gotTS)
	}
	for _, bad := range []string{"", "garbage", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"} {
		if tp, ts := tracing.Normalize(bad, "a=1"); tp != "" || ts != "" {
			t.Errorf("Normalize(%q) = %q %q, want nothing", bad, tp, ts)
		}
	}
}

// grpcReceiver is an OTLP/gRPC traces service that passes each export on.
type grpcReceiver struct {
	coltrace.UnimplementedTraceServiceServer
	got chan *coltrace.ExportTraceServiceRequest
}

func (r *grpcReceiver) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	r.got <- req
	return &coltrace.ExportTraceServiceResponse{}, nil
}

func TestSetupExportsOverGRPC(t *testing.T) {
	clearEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	recv := &grpcReceiver{got: make(chan *coltrace.ExportTraceServiceRequest, 4)}
	coltrace.RegisterTraceServiceServer(srv, recv)
	go srv.Serve(l)
	defer srv.Stop()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+l.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	var logs bytes.Buffer
	shutdown, err := tracing.Setup(context.Background(), "rivora-test", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "protocol=grpc") {
		t.Errorf("log %q does not name grpc", logs.String())
	}
	_, span := tracing.Tracer().Start(context.Background(), "rivora.test")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	req := <-recv.got
	rs := req.GetResourceSpans()[0]
	if name := rs.GetScopeSpans()[0].GetSpans()[0].GetName(); name != "rivora.test" {
		t.Errorf("exported span %q", name)
	}
	for _, kv := range rs.GetResource().GetAttributes() {
		if kv.GetKey() == "service.name" && kv.GetValue().GetStringValue() != "rivora-test" {
			t.Errorf("service.name %q, want Setup's rivora-test", kv.GetValue().GetStringValue())
		}
	}
}
