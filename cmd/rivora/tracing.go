package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rivora/rivora/internal/tracing"
)

// tracingHelp ends the --help of every server command.
const tracingHelp = `

Traces (OpenTelemetry) are off unless the standard OTEL_* variables ask for
them: OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER=otlp) turns them on,
OTEL_EXPORTER_OTLP_PROTOCOL is http/protobuf (default) or grpc, and
OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER(_ARG),
OTEL_EXPORTER_OTLP_HEADERS and the rest work as the specification says;
OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true turn them off. A Publish's
traceparent is stored with the event and passed on to its webhooks.`

// startTracing sets up tracing from the environment; a bad OTEL_* value is
// a usage error. flush exports what is left at shutdown.
func startTracing(ctx context.Context, service string, log *slog.Logger) (flush func(), err error) {
	shutdown, err := tracing.Setup(ctx, service, log)
	if err != nil {
		return nil, cli.Exit("rivora: tracing: "+err.Error(), 2)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Warn("tracing: flush at shutdown", "err", err)
		}
	}, nil
}
