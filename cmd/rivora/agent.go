package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/agent/ownership"
	"github.com/rivora/rivora/internal/httpurl"
	"github.com/rivora/rivora/server"
)

func agentCommand() *cli.Command {
	return &cli.Command{
		Name:  "agent",
		Usage: "run an agent: ingest, lanes, budgets and delivery, steered by a control plane",
		Description: `The sidecar next to customer apps. It embeds NATS JetStream (storage under
--data-dir), follows the control plane's configuration over Watch, owns the
partitions it is assigned, and serves ingest and event lookups on --listen.

In a cell of several agents, give each the same --consul and route their
embedded NATS servers to each other: streams are then replicated
(--replicas, default min(3, cell size)), and each partition is owned by
exactly one agent at a time, granted by a Consul lock the control plane
assigns (rendezvous hashing over healthy agents). An agent that loses its
Consul session stops writing and delivering for its partitions before the
lock-delay ends; the others take them over.

Dead letters go to the cell's archive, S3 or MinIO (--s3-endpoint and the
other --s3-* flags), which every agent reads: the control plane answers
` + "`rivoractl dlq`" + ` and ` + "`rivoractl replay`" + ` through any agent. An agent without
--s3-endpoint refuses to start unless --allow-local-archive is given (dead
letters under DATA_DIR/archive, seen by this agent only: for single-agent
setups; ` + "`rivora dev`" + ` keeps a local archive without the flag).

Every call needs a token: API tokens (the control plane's, pushed with its
config) for ingest, events, lanes and dead letters; the cell token
(--cell-token-file, the same secret on every control plane and agent, made
with ` + "`openssl rand -hex 32`" + `) for PartitionService, and for this agent's own
calls to the control plane. Without --cell-token-file the agent refuses to
start unless --insecure.

Examples:
   # one agent alone, its archive local
   rivora agent --name a1 --listen 127.0.0.1:7400 --controlplane http://127.0.0.1:7300 --data-dir ./a1 \
     --allow-local-archive --cell-token-file cell.token

   # one of three agents of a cell, archiving to MinIO
   rivora agent --name a1 --listen 127.0.0.1:7401 --controlplane http://127.0.0.1:7300 \
     --consul http://127.0.0.1:8500 --data-dir ./a1 --cell-token-file cell.token \
     --s3-endpoint 127.0.0.1:9000 --s3-insecure --s3-access-key KEY --s3-secret-key SECRET \
     --nats-listen 127.0.0.1:4221 --nats-cluster 127.0.0.1:6221 \
     --nats-routes nats://127.0.0.1:6221,nats://127.0.0.1:6222,nats://127.0.0.1:6223` + tracingHelp,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "name", EnvVars: []string{"RIVORA_AGENT_NAME"}, Usage: "this agent's `NAME` in the cell (letters, digits, '_', '-')", Required: true},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7400", EnvVars: []string{"RIVORA_LISTEN"}, Usage: "`ADDR` to serve ingest, events, /healthz and /metrics on"},
			&cli.StringFlag{Name: "advertise", EnvVars: []string{"RIVORA_ADVERTISE"}, Usage: "`URL` the control plane calls this agent at (default: http://<listen address>, https:// with --tls-cert)"},
			&cli.StringFlag{Name: "controlplane", Value: "http://127.0.0.1:7300", EnvVars: []string{"RIVORA_CONTROLPLANE"}, Usage: "control plane `URL`; with several control planes, all their URLs comma-separated (the agent follows the leader)"},
			&cli.StringFlag{Name: "data-dir", Value: "./data", EnvVars: []string{"RIVORA_DATA_DIR"}, Usage: "`DIR` for streams and the archive; one process per data dir (locked, rivora.lock)"},
			&cli.StringFlag{Name: "consul", EnvVars: []string{"RIVORA_CONSUL"}, Usage: "Consul HTTP API `URL` granting partition ownership (sessions and locks); without it this agent owns what it is assigned in process (one-agent cells only)"},
			&cli.StringFlag{Name: "nats-cluster", EnvVars: []string{"RIVORA_NATS_CLUSTER"}, Usage: "`HOST:PORT` the cell's other agents route to (joins the JetStream cluster)"},
			&cli.StringFlag{Name: "nats-cluster-advertise", EnvVars: []string{"RIVORA_NATS_CLUSTER_ADVERTISE"}, Usage: "`HOST:PORT` of this agent's routes as the other agents reach it, when not --nats-cluster (a NAT, a proxy): the address its peers pass on to each other (default: the address a route came from)"},
			&cli.StringFlag{Name: "nats-routes", EnvVars: []string{"RIVORA_NATS_ROUTES"}, Usage: "the cell's cluster addresses, comma-separated `nats://HOST:PORT,…` (this agent's own may be included)"},
			&cli.IntFlag{Name: "replicas", EnvVars: []string{"RIVORA_REPLICAS"}, DefaultText: "min(3, cell size)", Usage: "stream replicas `N`"},
			&cli.DurationFlag{Name: "session-ttl", Value: ownership.DefaultTTL, EnvVars: []string{"RIVORA_SESSION_TTL"}, Usage: "Consul session TTL (10s is Consul's minimum)"},
			&cli.DurationFlag{Name: "lock-delay", Value: ownership.DefaultLockDelay, EnvVars: []string{"RIVORA_LOCK_DELAY"}, Usage: "Consul lock-delay: how long a lost owner's locks stay untaken"},
			&cli.DurationFlag{Name: "store-stall-timeout", Value: owner.DefaultStoreStallTimeout, EnvVars: []string{"RIVORA_STORE_STALL_TIMEOUT"}, Usage: "how long a partition may go without a confirmed write to its streams (this agent cut off from their replicas' quorum, while it still holds the partition's lock) before the agent gives the partition up to an agent that can write it; it takes it again once its streams have been writable from here that long. Keep it above a stream's leader change (about 10s)"},
			&cli.BoolFlag{Name: "allow-local-archive", EnvVars: []string{"RIVORA_ALLOW_LOCAL_ARCHIVE"}, Usage: "without --s3-endpoint, archive dead letters under DATA_DIR/archive: for single-agent setups only (in a cell each agent would keep its own dead letters, invisible to the others and to the control plane); without this flag or --s3-endpoint the agent refuses to start"},
			allowDestinationFlag(false),
		}, append(append(cellFlags(), agentFlags()...), tlsFlags()...)...),
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			log, err := newLogger(c.String("log-level"))
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			flush, err := server.StartTracing(context.Background(), "rivora-agent", log)
			if err != nil {
				return exit(err)
			}
			defer flush()
			for _, cp := range strings.Split(c.String("controlplane"), ",") {
				if _, err := httpurl.Parse(strings.TrimSpace(cp)); err != nil {
					return cli.Exit(fmt.Sprintf("--controlplane %q: want an http:// or https:// URL (several: comma-separated)", cp), 2)
				}
			}
			if err := checkArchive(c); err != nil {
				return err
			}
			keys, err := cellKeys(c, log)
			if err != nil {
				return err
			}
			opts := server.AgentOptions{Log: log, HTTP: server.HTTP{Listen: c.String("listen"), Pprof: c.Bool("pprof")}}
			if opts.HTTP.MetricsToken, err = metricsToken(c); err != nil {
				return err
			}
			dataDir, err := absDir("data-dir", c.String("data-dir"))
			if err != nil {
				return err
			}
			if opts.HTTP.TLS, err = tlsOf(c); err != nil {
				return err
			}
			if opts.HTTP.TLS.Files.Enabled() && c.String("nats-cluster") != "" && opts.HTTP.TLS.Files.CA == "" {
				return cli.Exit("--tls-cert with --nats-cluster needs --tls-ca: the CA that signed the other agents' certificates, which the NATS routes verify", 2)
			}
			if opts.Agent, err = agentConfig(c, log, c.String("name"), dataDir, c.String("controlplane"), c.String("advertise")); err != nil {
				return err
			}
			opts.Agent.Keys = keys
			if err := httpLimits(c, &opts.HTTP); err != nil {
				return err
			}
			ctx, stop := stopOnSignal(log)
			defer stop()
			return exit(server.RunAgent(ctx, opts))
		},
	}
}

// checkArchive refuses an agent without a shared archive unless it is
// told that a local one is meant: in a cell each agent would keep its own
// dead letters, invisible to the other agents and to the control plane
// that answers dlq and replay through any of them.
func checkArchive(c *cli.Context) error {
	if c.String("s3-endpoint") != "" || c.Bool("allow-local-archive") {
		return nil
	}
	return cli.Exit("rivora agent: no dead-letter archive: give --s3-endpoint HOST:PORT (S3/MinIO, shared by the agents of a cell), "+
		"or --allow-local-archive for a single-agent setup (dead letters under DATA_DIR/archive; in a cell each agent would keep its own, "+
		"invisible to the other agents and to the control plane's `rivoractl dlq` and `replay`)", 2)
}
