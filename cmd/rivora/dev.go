package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/controlplane"
)

func devCommand() *cli.Command {
	return &cli.Command{
		Name:  "dev",
		Usage: "run the control plane and one agent in one process, with no infrastructure",
		Description: `Runs everything on embedded defaults: an embedded NATS JetStream server
(file storage under --data-dir), every partition owned by this process, and
a local-directory dead-letter archive (DATA_DIR/archive). One address serves
ingest, admin and event lookups over HTTP/1.1 and h2c (Connect, gRPC,
gRPC-Web and plain JSON), plus /healthz and /metrics.

Durability: an ack means the event reached the OS (it survives a crash or
kill -9 of this process; a power loss can lose the last unsynced seconds).
--fsync syncs every write before acking, at a large cost in throughput.

Example:
   rivora dev --listen 127.0.0.1:7400 --data-dir ./data
   rivoractl destinations create orders --url http://127.0.0.1:9000/hook
   rivoractl publish --destination orders --customer acme --lane user_1 --type order.created --data '{"id":1}'`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7400", EnvVars: []string{"RIVORA_LISTEN"}, Usage: "`ADDR` to serve the API, /healthz and /metrics on"},
			&cli.StringFlag{Name: "data-dir", Value: "./data", EnvVars: []string{"RIVORA_DATA_DIR"}, Usage: "`DIR` for streams, control-plane state and the archive"},
			&cli.IntFlag{Name: "partitions", Value: agent.DefaultPartitions, EnvVars: []string{"RIVORA_PARTITIONS"}, Usage: "number of partitions (pending stores); fixed for a data dir"},
			&cli.IntFlag{Name: "workers", Value: agent.DefaultWorkers, EnvVars: []string{"RIVORA_WORKERS"}, Usage: "concurrent delivery attempts"},
			&cli.IntFlag{Name: "max-payload", Value: ingest.DefaultMaxPayload, EnvVars: []string{"RIVORA_MAX_PAYLOAD"}, Usage: "largest accepted payload in `BYTES`"},
			&cli.DurationFlag{Name: "dedup-window", Value: ingest.DefaultDedupWindow, EnvVars: []string{"RIVORA_DEDUP_WINDOW"}, Usage: "how long a repeated idempotency key is recognised"},
			&cli.StringFlag{Name: "nats-listen", EnvVars: []string{"RIVORA_NATS_LISTEN"}, Usage: "expose the embedded NATS client port on `HOST:PORT` (default: in-process only)"},
			&cli.BoolFlag{Name: "fsync", EnvVars: []string{"RIVORA_FSYNC"}, Usage: "fsync every write before acknowledging it (survives power loss; much slower)"},
			&cli.BoolFlag{Name: "pprof", EnvVars: []string{"RIVORA_PPROF"}, Usage: "serve Go profiles under /debug/pprof/ on --listen"},
			&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"RIVORA_LOG_LEVEL"}, Usage: "debug, info, warn or error"},
		},
		Action: runDev,
	}
}

func runDev(c *cli.Context) error {
	if c.Args().Present() {
		return cli.Exit(fmt.Sprintf("rivora dev takes no arguments, got %q (flags start with --)", c.Args().Slice()), 2)
	}
	log, err := newLogger(c.String("log-level"))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	dataDir, err := filepath.Abs(c.String("data-dir"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.String("listen"), err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	ag, err := agent.New(ctx, agent.Config{
		Name:        "dev",
		DataDir:     dataDir,
		Partitions:  c.Int("partitions"),
		Workers:     c.Int("workers"),
		NATSListen:  c.String("nats-listen"),
		SyncAlways:  c.Bool("fsync"),
		MaxPayload:  c.Int("max-payload"),
		DedupWindow: c.Duration("dedup-window"),
		Version:     version,
	}, log)
	if err != nil {
		ln.Close()
		return err
	}
	store, err := controlplane.OpenStore(filepath.Join(dataDir, "controlplane"))
	if err != nil {
		ln.Close()
		return err
	}
	cp, err := controlplane.New(store, ag, log.With("component", "controlplane"))
	if err != nil {
		ln.Close()
		return err
	}

	mux := http.NewServeMux()
	ag.Handle(mux)
	cp.Handle(mux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if !ag.Ready() {
			http.Error(w, "starting or draining", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /metrics", promhttp.Handler())
	if c.Bool("pprof") {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)

	agentDone := make(chan error, 1)
	go func() { agentDone <- ag.Run(ctx) }()
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln) }()
	log.Info("rivora dev ready", "addr", "http://"+ln.Addr().String(), "data_dir", dataDir)

	select {
	case <-ctx.Done():
	case err := <-serveDone:
		stop()
		<-agentDone
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("shutting down: no new requests; draining deliveries")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("http shutdown", "error", err)
	}
	return <-agentDone
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToLower(level))); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}
