// Package tracing sets up OpenTelemetry traces from the standard OTEL_*
// environment variables, and owns the one tracer Rivora's code starts
// spans with. Tracing is off unless the environment asks for it; off, no
// SDK runs and Tracer returns nil, so that the hot paths skip every span
// (and its allocations) with one atomic load.
//
// What it reads itself: OTEL_SDK_DISABLED, OTEL_TRACES_EXPORTER (otlp or
// none), OTEL_EXPORTER_OTLP_PROTOCOL and OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
// (grpc or http/protobuf, the default), and it checks OTEL_TRACES_SAMPLER.
// The OTLP exporters read the endpoint, headers, timeout, compression and
// TLS variables; the SDK reads the sampler and batch (OTEL_BSP_*) ones;
// the resource reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of Rivora's spans.
const Scope = "github.com/rivora/rivora"

// Protocols of OTEL_EXPORTER_OTLP_PROTOCOL.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

var tracer atomic.Pointer[trace.Tracer]

// Tracer is the tracer to start Rivora's spans with, or nil when tracing
// is off: callers skip their spans then.
func Tracer() trace.Tracer {
	if t := tracer.Load(); t != nil {
		return *t
	}
	return nil
}

// Use makes tp the provider of Tracer (nil: off) and returns what restores
// the previous one. Setup calls it; tests call it with an SDK provider
// over an in-memory exporter.
func Use(tp trace.TracerProvider) (restore func()) {
	var next *trace.Tracer
	if tp != nil {
		t := tp.Tracer(Scope)
		next = &t
	}
	prev := tracer.Swap(next)
	return func() { tracer.Store(prev) }
}

// Config is what the environment asked for.
type Config struct {
	// Enabled is false when tracing is off; the rest is then unset.
	Enabled bool
	// Protocol is ProtocolHTTP or ProtocolGRPC.
	Protocol string
	// Endpoint is the traces endpoint as configured ("" for the
	// exporter's default: localhost:4318 or :4317).
	Endpoint string
	// Why says why tracing is off.
	Why string
}

// FromEnv reads the configuration from getenv (os.Getenv), refusing
// values the specification does not define or Rivora cannot honour.
func FromEnv(getenv func(string) string) (Config, error) {
	get := func(k string) string { return strings.TrimSpace(getenv(k)) }
	if v := get("OTEL_SDK_DISABLED"); v != "" {
		disabled, err := strconv.ParseBool(v)
		if err != nil {
			return Config{}, fmt.Errorf("OTEL_SDK_DISABLED=%q: want true or false", v)
		}
		if disabled {
			return Config{Why: "OTEL_SDK_DISABLED=true"}, nil
		}
	}
	endpoint := get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = get("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if endpoint != "" {
		if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Config{}, fmt.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) %q: want an http:// or https:// URL such as http://127.0.0.1:4318", redact(endpoint))
		}
	}
	switch exp := get("OTEL_TRACES_EXPORTER"); exp {
	case "none":
		return Config{Why: "OTEL_TRACES_EXPORTER=none"}, nil
	case "":
		if endpoint == "" {
			return Config{Why: "no OTEL_TRACES_EXPORTER or OTEL_EXPORTER_OTLP_ENDPOINT set"}, nil
		}
	case "otlp":
	default:
		return Config{}, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: Rivora exports traces with otlp (or none for no traces); one exporter only", exp)
	}
	protocol, name := get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	if protocol == "" {
		protocol, name = get("OTEL_EXPORTER_OTLP_PROTOCOL"), "OTEL_EXPORTER_OTLP_PROTOCOL"
	}
	switch protocol {
	case "":
		protocol = ProtocolHTTP
	case ProtocolHTTP, ProtocolGRPC:
	default:
		return Config{}, fmt.Errorf("%s=%q: want %s or %s", name, protocol, ProtocolGRPC, ProtocolHTTP)
	}
	if err := checkSampler(get("OTEL_TRACES_SAMPLER"), get("OTEL_TRACES_SAMPLER_ARG")); err != nil {
		return Config{}, err
	}
	return Config{Enabled: true, Protocol: protocol, Endpoint: endpoint}, nil
}

// checkSampler refuses a sampler the SDK would only complain about in a
// log line (it then samples everything).
func checkSampler(name, arg string) error {
	switch strings.ToLower(name) {
	case "", "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
		return nil
	case "traceidratio", "parentbased_traceidratio":
		if arg == "" {
			return nil
		}
		if r, err := strconv.ParseFloat(arg, 64); err != nil || r < 0 || r > 1 {
			return fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1 for %s", arg, name)
		}
		return nil
	default:
		return fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
	}
}

// Setup starts tracing as the environment asks, for the service
// serviceName (OTEL_SERVICE_NAME overrides it), and logs one line saying
// whether it is on. Its error is a configuration error. shutdown flushes
// the spans not yet exported; it is a no-op when tracing is off.
func Setup(ctx context.Context, serviceName string, log *slog.Logger) (shutdown func(context.Context) error, err error) {
	cfg, err := FromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	// The W3C trace context on every process, whether or not it exports:
	// even off, Rivora passes a caller's traceparent on to the webhooks.
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if !cfg.Enabled {
		log.Info("tracing off", "why", cfg.Why)
		return func(context.Context) error { return nil }, nil
	}
	var exp sdktrace.SpanExporter
	if cfg.Protocol == ProtocolGRPC {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter (%s): %w", cfg.Protocol, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", serviceName)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("trace resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "err", err) }))
	restore := Use(tp)
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = "localhost:4318 (default)"
		if cfg.Protocol == ProtocolGRPC {
			endpoint = "localhost:4317 (default)"
		}
	}
	log.Info("tracing on", "exporter", "otlp", "protocol", cfg.Protocol, "endpoint", redact(endpoint))
	return func(ctx context.Context) error {
		restore()
		return tp.Shutdown(ctx)
	}, nil
}

// redact is an endpoint fit for a log line: without the user info and
// query a collector URL may carry credentials in.
func redact(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "(an endpoint that is not a URL)"
	}
	if u.User == nil && u.RawQuery == "" {
		return endpoint
	}
	u.User, u.RawQuery = nil, ""
	return u.String() + " (credentials left out)"
}
