package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/internal/tlsconf"
	"github.com/rivora/rivora/server"
)

// common flags of the server commands.
var (
	logLevelFlag     = &cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"RIVORA_LOG_LEVEL"}, Usage: "debug, info, warn or error"}
	pprofFlag        = &cli.BoolFlag{Name: "pprof", EnvVars: []string{"RIVORA_PPROF"}, Usage: "serve Go profiles under /debug/pprof/ on --listen (behind --metrics-token-file when given)"}
	metricsTokenFlag = &cli.StringFlag{Name: "metrics-token-file", EnvVars: []string{"RIVORA_METRICS_TOKEN_FILE"},
		Usage: "`FILE` holding a token /metrics (and /debug/pprof/) then require as `Authorization: Bearer <token>` (Prometheus: authorization.credentials_file); default: /metrics is open, like /healthz, and shows no event data"}
	// maxConnsFlag caps the open connections of --listen.
	maxConnsFlag = &cli.IntFlag{Name: "max-connections", EnvVars: []string{"RIVORA_MAX_CONNECTIONS"}, DefaultText: "10000, or half the open-file limit",
		Usage: "most open client connections on --listen (`N`), so connections cannot use up " +
			"the file descriptors the embedded NATS server needs for its stores. At the cap, a new connection takes the place of the connection idle " +
			"longest (an idle keep-alive connection, or one that never sent a request); when none is idle, it waits to be accepted"}
	// maxInflightFlag bounds the API calls one process serves at once.
	maxInflightFlag = &cli.IntFlag{Name: "max-inflight-requests", Value: server.DefaultMaxInflight, EnvVars: []string{"RIVORA_MAX_INFLIGHT_REQUESTS"},
		Usage: "most API calls (Connect, gRPC, gRPC-Web, JSON) this process serves at once (`N`), streams included; beyond it a call is answered resource_exhausted " +
			"(HTTP 429) at once, which the SDKs retry with back-off. Each call in flight may hold its request (up to --max-batch-bytes for PublishBatch) in memory. " +
			"One caller (one token) holding half of N or more is refused once three quarters are taken, so a flood of one caller's calls leaves room for the others. " +
			"Callers without a valid token never count: they are refused from their headers first. /healthz, /metrics and the gRPC health check are never refused"}
)

// ingestFlags are the ingest gateway's bounds, which agents, `rivora
// dev` and edges share.
func ingestFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "max-payload", Value: ingest.DefaultMaxPayload, EnvVars: []string{"RIVORA_MAX_PAYLOAD"}, Usage: "largest accepted payload in `BYTES` (a larger one is refused InvalidArgument, naming both sizes). A Publish request is read up to 6 times this plus 64 KiB (a JSON data field can grow that much in binary protobuf): a body over that read limit is refused ResourceExhausted, naming it in bytes"},
		&cli.IntFlag{Name: "max-batch", Value: ingest.DefaultMaxBatch, EnvVars: []string{"RIVORA_MAX_BATCH"}, Usage: "most events one PublishBatch may carry (`N`); a larger batch is refused with InvalidArgument, nothing of it stored: split it"},
		&cli.IntFlag{Name: "max-batch-bytes", Value: ingest.DefaultMaxBatchBytes, EnvVars: []string{"RIVORA_MAX_BATCH_BYTES"}, Usage: "largest PublishBatch request in `BYTES` after decompression (ResourceExhausted above it, naming the limit in bytes), but never less than one Publish's read limit (see --max-payload), so one full event always fits; one batch costs the server about three times this in memory. A request whose fan-outs would store more than 4 times this (or one Publish's read limit) is refused ResourceExhausted too"},
		&cli.IntFlag{Name: "max-concurrent-events", Value: ingest.DefaultConcurrentEvents, EnvVars: []string{"RIVORA_MAX_CONCURRENT_EVENTS"}, Usage: "most events (`N`) the Publish and PublishBatch calls being accepted may hold in all (a larger batch goes in alone); " +
			"beyond it a call waits, within its deadline, for its customer's turn, fairly by events: one customer's flood of calls waits behind itself while another customer's call goes in at the next free turn. " +
			"Higher keeps more writes in flight (larger groups for --fsync); lower bounds what another customer's event waits behind. Every waiting call still counts against --max-inflight-requests (gauge rivora_ingest_waiting_publishes)"},
		&cli.DurationFlag{Name: "dedup-window", Value: ingest.DefaultDedupWindow, EnvVars: []string{"RIVORA_DEDUP_WINDOW"}, Usage: "how long an idempotency key names one event of its customer on its destination: a repeat within it returns the first event id and stores nothing, the key reused for another payload, type, lane or content type is refused (AlreadyExists)"},
	}
}

// checkIngestFlags checks the ingestFlags' values.
func checkIngestFlags(c *cli.Context) error {
	if err := checkAtLeastOne(c, "max-payload", "max-batch", "max-batch-bytes", "max-concurrent-events"); err != nil {
		return err
	}
	if d := c.Duration("dedup-window"); d <= 0 {
		return cli.Exit(fmt.Sprintf("--dedup-window %s: want a positive duration (default %s)", d, ingest.DefaultDedupWindow), 2)
	}
	return nil
}

// checkAtLeastOne refuses a whole-number flag below 1: further in, 0
// would be taken for "unset" and silently become the default.
func checkAtLeastOne(c *cli.Context, flags ...string) error {
	for _, flag := range flags {
		if c.Int(flag) < 1 {
			return cli.Exit(fmt.Sprintf("--%s %d: want at least 1", flag, c.Int(flag)), 2)
		}
	}
	return nil
}

// parseBytes reads a size: a number of bytes, or a number with a unit,
// binary (KiB, MiB, GiB, TiB) or decimal (KB, MB, GB, TB): 512MiB, 1GiB,
// 1073741824.
func parseBytes(flag, v string) (int64, error) {
	units := []struct {
		suffix string
		factor int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
	}
	s := strings.TrimSpace(v)
	factor := int64(1)
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			s, factor = strings.TrimSpace(num), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/factor {
		return 0, fmt.Errorf("--%s %q: want a size in bytes, such as 1073741824, 512MiB or 1GiB", flag, v)
	}
	return n * factor, nil
}

// tracingHelp ends the --help of every server command.
const tracingHelp = `

Traces (OpenTelemetry) are off unless the standard OTEL_* variables ask for
them: OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER=otlp) turns them on,
OTEL_EXPORTER_OTLP_PROTOCOL is http/protobuf (default) or grpc, and
OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER(_ARG),
OTEL_EXPORTER_OTLP_HEADERS and the rest work as the specification says;
OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true turn them off. A Publish's
traceparent is stored with the event and passed on to its webhooks.`

// metricsToken reads --metrics-token-file ("" when not given).
func metricsToken(c *cli.Context) (string, error) {
	path := c.String("metrics-token-file")
	if path == "" {
		return "", nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", cli.Exit(fmt.Sprintf("--metrics-token-file: %v", err), 2)
	}
	token := strings.TrimSpace(string(data))
	if len(token) < 16 {
		return "", cli.Exit(fmt.Sprintf("--metrics-token-file %s: %d bytes, want at least 16 (make one with `openssl rand -hex 32`)", path, len(token)), 2)
	}
	return token, nil
}

// tlsFlags are the TLS flags of `rivora controlplane`, `rivora agent` and
// `rivora dev`.
func tlsFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "tls-cert", EnvVars: []string{"RIVORA_TLS_CERT"}, Usage: "serve --listen over HTTPS (HTTP/2 and HTTP/1.1, TLS 1.2+) with this certificate `FILE` (PEM, leaf first, then intermediates); " +
			"an agent also serves its NATS routes (mutual TLS, with --tls-ca) and NATS client port with it. Needs --tls-key"},
		&cli.StringFlag{Name: "tls-key", EnvVars: []string{"RIVORA_TLS_KEY"}, Usage: "the private key `FILE` (PEM) of --tls-cert"},
		&cli.StringFlag{Name: "tls-ca", EnvVars: []string{"RIVORA_TLS_CA"}, Usage: "CA bundle `FILE` (PEM) this process verifies its peers with: the control plane and agents it calls over https://, " +
			"and the certificates of the other agents on NATS routes (default: the system's roots for https://; required for TLS routes)"},
	}
}

// edgeTLSFlags are tlsFlags as an edge uses them: it serves ingest, and
// calls the control plane and the cell's leaf port.
func edgeTLSFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "tls-cert", EnvVars: []string{"RIVORA_TLS_CERT"}, Usage: "serve --listen (ingest, /healthz, /metrics) over HTTPS (HTTP/2 and HTTP/1.1, TLS 1.2+) with this certificate `FILE` (PEM, leaf first, then intermediates), " +
			"for the publishers. Needs --tls-key. The leaf connection to the cell does not use it (--tls-ca makes it TLS)"},
		&cli.StringFlag{Name: "tls-key", EnvVars: []string{"RIVORA_TLS_KEY"}, Usage: "the private key `FILE` (PEM) of --tls-cert"},
		&cli.StringFlag{Name: "tls-ca", EnvVars: []string{"RIVORA_TLS_CA"}, Usage: "CA bundle `FILE` (PEM) the edge verifies the control plane (https://) and the cell's leaf port with; given, the leaf connection is TLS " +
			"(needed when the cell serves its leaf port over TLS). Default: the system's roots for https://, and a plain leaf connection"},
	}
}

// tlsOf reads and checks the --tls-* files, so that a bad one stops the
// process before anything starts.
func tlsOf(c *cli.Context) (server.TLS, error) {
	s, err := server.LoadTLS(tlsconf.Files{Cert: c.String("tls-cert"), Key: c.String("tls-key"), CA: c.String("tls-ca")})
	if err != nil {
		return server.TLS{}, cli.Exit(err.Error(), 2)
	}
	return s, nil
}

// httpLimits checks --max-connections (0 when not given: the server's
// default) and --max-inflight-requests into h.
func httpLimits(c *cli.Context, h *server.HTTP) error {
	if c.IsSet("max-connections") {
		n := c.Int("max-connections")
		if n < 1 {
			return cli.Exit(fmt.Sprintf("--max-connections %d: want at least 1", n), 2)
		}
		h.MaxConns = n
	}
	n := c.Int("max-inflight-requests")
	if n < 1 {
		return cli.Exit(fmt.Sprintf("--max-inflight-requests %d: want at least 1", n), 2)
	}
	h.MaxInflight = n
	return nil
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToLower(level))); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// exit turns a server's usage error into exit code 2, as a bad flag's.
func exit(err error) error {
	var usage *server.UsageError
	if errors.As(err, &usage) {
		return cli.Exit(usage.Error(), 2)
	}
	return err
}
