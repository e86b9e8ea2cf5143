package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/agent/archive"
	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/durations"
	"github.com/rivora/rivora/internal/httpurl"
	"github.com/rivora/rivora/internal/tlsconf"
	"github.com/rivora/rivora/server"
)

func devCommand() *cli.Command {
	return &cli.Command{
		Name:  "dev",
		Usage: "run the control plane and one agent in one process, with no infrastructure",
		Description: `Runs everything on embedded defaults: the control plane (state under
DATA_DIR/controlplane) and one agent with an embedded NATS JetStream server
(file storage under DATA_DIR/jetstream), owning every partition, and a
local-directory dead-letter archive (DATA_DIR/archive). The agent follows the
control plane over the same APIs as in a cell (Watch on this address). One
address serves ingest, admin and event lookups over HTTP/1.1 and h2c
(Connect, gRPC, gRPC-Web and plain JSON), plus /healthz and /metrics; over
HTTPS (HTTP/2 and HTTP/1.1) with --tls-cert and --tls-key.

Every call needs a token (Authorization: Bearer). The first start writes an
admin token named "bootstrap" to DATA_DIR/admin.token (mode 0600): give it
to rivoractl with --token-file DATA_DIR/admin.token. The
control plane and the agent talk with a cell token made in memory at
start (one process is its own cell), or with --cell-token-file's, which
--leaf-listen needs: edge servers joining as NATS leaf nodes authenticate
with a credential derived from it.

Durability: an ack means the event reached the OS (it survives a crash or
kill -9 of this process; a power loss can lose the last unsynced seconds).
--fsync makes an ack survive a power loss too: it waits for a sync of the
store that began after the write, and the acks that wait meanwhile share the
next sync (group commit), so it costs far less than a sync per write
(docs/benchmarks.md).

Destinations on this machine (127.0.0.0/8, ::1) are allowed, so a receiver
started for the tour works; the SSRF guard refuses other internal addresses
(private ranges, link-local and the cloud metadata address, …) unless
--allow-destination-cidr opens them.

Example:
   rivora dev --listen 127.0.0.1:7400 --data-dir ./data --limits limits.yaml
   rivoractl --token-file ./data/admin.token destinations create orders --url http://127.0.0.1:9000/hook
   rivoractl --token-file ./data/admin.token publish --destination orders --customer acme --lane user_1 --type order.created --data '{"id":1}'` + tracingHelp,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7400", EnvVars: []string{"RIVORA_LISTEN"}, Usage: "`ADDR` to serve the API, /healthz and /metrics on"},
			&cli.StringFlag{Name: "data-dir", Value: "./data", EnvVars: []string{"RIVORA_DATA_DIR"}, Usage: "`DIR` for streams, control-plane state and the archive; one process per data dir (locked, rivora.lock)"},
			&cli.StringFlag{Name: "limits", EnvVars: []string{"RIVORA_LIMITS"}, Usage: "reviewed limits `FILE` (YAML), reloaded when it changes"},
			&cli.IntFlag{Name: "partitions", Value: controlplane.DefaultPartitions, EnvVars: []string{"RIVORA_PARTITIONS"}, Usage: "number of partitions (pending stores); fixed for a data dir (it records the count of its first start, and a start with another count is refused)"},
			allowDestinationFlag(true),
			&cli.StringFlag{Name: "cell-token-file", EnvVars: []string{"RIVORA_CELL_TOKEN_FILE"}, Usage: "`FILE` holding a cell token (at least 32 characters, e.g. `openssl rand -hex 32`) to use instead of one made in memory at start: " +
				"needed with --leaf-listen, for edges derive their leaf credential from it"},
		}, append(agentFlags(), append(append(append(operatorFlags(), capacityFlags()...), catalogueFlags()...), tlsFlags()...)...)...),
		Action: runDev,
	}
}

// agentFlags are the flags an agent shares with `rivora dev`.
func agentFlags() []cli.Flag {
	return append([]cli.Flag{
		egressProxyFlag, egressNoProxyFlag,
		&cli.IntFlag{Name: "workers", Value: agent.DefaultWorkers, EnvVars: []string{"RIVORA_WORKERS"}, Usage: "concurrent delivery attempts, shared by every destination; the last eighth go only to destinations with nothing in flight; while a customer holds half of them, other customers' attempts go first"},
		&cli.StringFlag{Name: "history-retention", Value: "7d", EnvVars: []string{"RIVORA_HISTORY_RETENTION"}, Usage: "how long the history behind events get/list/resend is kept (`DURATION`: 7d, 36h): every attempt's outcome, and every delivered event whole, payload included, so it can be resent. Disk: about the delivered events' size over the period (1,000 events/s of 1 KiB is ~600 GiB a week) plus ~200 B per attempt; memory does not grow with it"},
		&cli.StringFlag{Name: "nats-listen", EnvVars: []string{"RIVORA_NATS_LISTEN"}, Usage: "expose the embedded NATS client port on `HOST:PORT` (default: in-process only)"},
		&cli.StringFlag{Name: "leaf-listen", EnvVars: []string{"RIVORA_LEAF_LISTEN"}, Usage: "accept edge servers as NATS leaf nodes on `HOST:PORT`; each must present the credential derived from the cell token (TLS with --tls-cert). Costs one more listener; an edge's buffered events flow in through it when its link returns"},
		&cli.StringFlag{Name: "min-free-disk", EnvVars: []string{"RIVORA_MIN_FREE_DISK"}, DefaultText: "a tenth of the store's limit, at most 256MiB",
			Usage: "room (`SIZE`: 512MiB, 2GiB) under which the agent refuses every new event (resource_exhausted, retried by the SDKs) while its pending ones still go out; under twice it, only the events of customers holding a quarter or more of the cell's pending events. Room is the data dir's free disk, or what the store's own limit leaves (three quarters of the disk free at start) if less: past that limit every write fails, and a full disk stops the agent; 0 turns this off"},
		&cli.BoolFlag{Name: "fsync", EnvVars: []string{"RIVORA_FSYNC"}, Usage: "acknowledge only once a sync of the store covers the write (survives a power loss); concurrent acknowledgements share one sync. Without it an ack survives a crash or kill -9"},
		&cli.StringFlag{Name: "s3-endpoint", EnvVars: []string{"RIVORA_S3_ENDPOINT"}, Usage: "archive dead letters to S3/MinIO at `HOST:PORT` instead of DATA_DIR/archive"},
		&cli.StringFlag{Name: "s3-bucket", Value: "rivora", EnvVars: []string{"RIVORA_S3_BUCKET"}, Usage: "S3 `BUCKET` (created if missing)"},
		&cli.StringFlag{Name: "s3-access-key", EnvVars: []string{"RIVORA_S3_ACCESS_KEY"}, Usage: "S3 access `KEY`"},
		&cli.StringFlag{Name: "s3-secret-key", EnvVars: []string{"RIVORA_S3_SECRET_KEY"}, Usage: "S3 secret `KEY`"},
		&cli.BoolFlag{Name: "s3-insecure", EnvVars: []string{"RIVORA_S3_INSECURE"}, Usage: "speak plain HTTP to S3 (e.g. a local MinIO)"},
		&cli.StringFlag{Name: "s3-region", EnvVars: []string{"RIVORA_S3_REGION"}, Usage: "S3 `REGION`"},
		pprofFlag,
		maxConnsFlag,
		maxInflightFlag,
		metricsTokenFlag,
		logLevelFlag,
	}, ingestFlags()...)
}

// agentConfig checks the agent flags `rivora dev` and `rivora agent`
// share into an agent's configuration (advertiseURL "": the listener's).
func agentConfig(c *cli.Context, log *slog.Logger, name, dataDir, controlPlaneURL, advertiseURL string) (agent.Config, error) {
	var arch archive.Archive
	if endpoint := c.String("s3-endpoint"); endpoint != "" {
		s3, err := archive.NewS3(archive.S3Config{
			Endpoint: endpoint, Bucket: c.String("s3-bucket"), AccessKey: c.String("s3-access-key"),
			SecretKey: c.String("s3-secret-key"), Insecure: c.Bool("s3-insecure"), Region: c.String("s3-region"),
			Log: log.With("component", "archive", "agent", name),
		})
		if err != nil {
			return agent.Config{}, cli.Exit(err.Error(), 2)
		}
		arch = s3
	}
	var routes []string
	for _, r := range strings.Split(c.String("nats-routes"), ",") {
		if r = strings.TrimSpace(r); r != "" {
			routes = append(routes, r)
		}
	}
	if len(routes) > 0 && c.String("nats-cluster") == "" {
		return agent.Config{}, cli.Exit("--nats-routes needs --nats-cluster HOST:PORT (where the other agents route to this one)", 2)
	}
	if consul := c.String("consul"); consul != "" {
		if _, err := httpurl.Parse(consul); err != nil {
			return agent.Config{}, cli.Exit(fmt.Sprintf("--consul %q: want an http:// or https:// URL such as http://127.0.0.1:8500", consul), 2)
		}
	}
	if err := checkIngestFlags(c); err != nil {
		return agent.Config{}, err
	}
	if err := checkAtLeastOne(c, "workers"); err != nil {
		return agent.Config{}, err
	}
	retention, err := parseRetention(c.String("history-retention"))
	if err != nil {
		return agent.Config{}, cli.Exit(err.Error(), 2)
	}
	guard, err := destinationGuard(c)
	if err != nil {
		return agent.Config{}, err
	}
	egress, err := egressProxy(c)
	if err != nil {
		return agent.Config{}, err
	}
	cfg := agent.Config{
		Guard:                guard,
		EgressProxy:          egress,
		NATSCluster:          c.String("nats-cluster"),
		NATSRoutes:           routes,
		NATSClusterAdvertise: c.String("nats-cluster-advertise"),
		Replicas:             c.Int("replicas"),
		ConsulURL:            c.String("consul"),
		SessionTTL:           c.Duration("session-ttl"),
		LockDelay:            c.Duration("lock-delay"),
		Archive:              arch,
		Name:                 name,
		DataDir:              dataDir,
		ControlPlaneURL:      controlPlaneURL,
		AdvertiseURL:         advertiseURL,
		Workers:              c.Int("workers"),
		NATSListen:           c.String("nats-listen"),
		LeafListen:           c.String("leaf-listen"),
		SyncAlways:           c.Bool("fsync"),
		MaxPayload:           c.Int("max-payload"),
		MaxBatch:             c.Int("max-batch"),
		MaxBatchBytes:        c.Int("max-batch-bytes"),
		ConcurrentEvents:     c.Int("max-concurrent-events"),
		DedupWindow:          c.Duration("dedup-window"),
		Version:              version,
	}
	cfg.HistoryRetention = retention
	if v := c.String("min-free-disk"); v != "" {
		n, err := parseBytes("min-free-disk", v)
		if err != nil {
			return agent.Config{}, cli.Exit(err.Error(), 2)
		}
		cfg.MinFreeDisk = n
		if n == 0 {
			cfg.MinFreeDisk = -1 // off
		}
	}
	cfg.StoreStallTimeout = c.Duration("store-stall-timeout")
	if c.IsSet("store-stall-timeout") && cfg.StoreStallTimeout < time.Second {
		return agent.Config{}, cli.Exit(fmt.Sprintf("--store-stall-timeout %s: want at least 1s (keep it above a stream's leader change, about 10s)", cfg.StoreStallTimeout), 2)
	}
	return cfg, nil
}

// parseRetention reads a Go duration or a number of days ("7d").
func parseRetention(v string) (time.Duration, error) {
	d, err := durations.Parse(v)
	if err != nil || d < time.Minute {
		return 0, fmt.Errorf("--history-retention %q: want a duration of at least 1m, such as 7d or 36h", v)
	}
	return d, nil
}

func noArgs(c *cli.Context) error {
	if c.Args().Present() {
		return cli.Exit(fmt.Sprintf("rivora %s takes no arguments, got %q (flags start with --)", c.Command.Name, c.Args().Slice()), 2)
	}
	return nil
}

func absDir(flag, dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("--%s %q: %w", flag, dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", fmt.Errorf("--%s: %w", flag, err)
	}
	return abs, nil
}

// devCellToken is --cell-token-file's token (zero: rivora dev makes one
// in memory); --leaf-listen needs it, since edges authenticate with it.
func devCellToken(c *cli.Context) (auth.CellToken, error) {
	path := c.String("cell-token-file")
	if path == "" {
		if c.String("leaf-listen") != "" {
			return auth.CellToken{}, cli.Exit("rivora dev: --leaf-listen needs --cell-token-file FILE: edges authenticate with a credential derived from that cell token", 2)
		}
		return auth.CellToken{}, nil
	}
	cell, err := auth.LoadCellToken(path)
	if err != nil {
		return auth.CellToken{}, cli.Exit("--cell-token-file: "+err.Error(), 2)
	}
	return cell, nil
}

func runDev(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	log, err := newLogger(c.String("log-level"))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	flush, err := server.StartTracing(context.Background(), "rivora-dev", log)
	if err != nil {
		return exit(err)
	}
	defer flush()
	dataDir, err := absDir("data-dir", c.String("data-dir"))
	if err != nil {
		return err
	}
	if err := checkAtLeastOne(c, "partitions"); err != nil {
		return err
	}
	cfg := controlplane.Config{
		StateDir:           filepath.Join(dataDir, "controlplane"),
		LimitsPath:         c.String("limits"),
		Partitions:         c.Int("partitions"),
		AdminTokenPath:     filepath.Join(dataDir, "admin.token"),
		OperatorSecretPath: filepath.Join(dataDir, "operator-webhook.secret"),
	}
	if cfg.Guard, err = destinationGuard(c); err != nil {
		return err
	}
	if err := capacityConfig(c, &cfg); err != nil {
		return err
	}
	catalogueConfig(c, &cfg)
	if err := operatorConfig(c, &cfg); err != nil {
		return err
	}
	opts := server.DevOptions{Log: log, HTTP: server.HTTP{Listen: c.String("listen"), Pprof: c.Bool("pprof")}, ControlPlane: cfg}
	if opts.Cell, err = devCellToken(c); err != nil {
		return err
	}
	if opts.HTTP.MetricsToken, err = metricsToken(c); err != nil {
		return err
	}
	if opts.HTTP.TLS, err = tlsOf(c); err != nil {
		return err
	}
	if srv := &opts.HTTP.TLS; srv.Server != nil && srv.Transport == nil {
		// The agent and the control plane call each other on this
		// listener: without --tls-ca, trust its own certificate.
		if srv.Transport, err = tlsconf.TrustingOwn(srv.Server); err != nil {
			return cli.Exit(err.Error(), 2)
		}
	}
	// The control plane and advertised URLs are the listener's, known
	// once it listens.
	if opts.Agent, err = agentConfig(c, log, "dev", dataDir, "", ""); err != nil {
		return err
	}
	if err := httpLimits(c, &opts.HTTP); err != nil {
		return err
	}
	ctx, stop := stopOnSignal(log)
	defer stop()
	return exit(server.RunDev(ctx, opts))
}
