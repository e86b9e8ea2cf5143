package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rivora/rivora/edge/edged"
	"github.com/rivora/rivora/internal/httpurl"
	"github.com/rivora/rivora/internal/ids"
	"github.com/rivora/rivora/server"
)

func edgeCommand() *cli.Command {
	return &cli.Command{
		Name:  "edge",
		Usage: "run an edge: accept events beside the publishing apps, keep them through WAN cuts, forward them to the cell",
		Description: `An edge runs where the link to the cell is long or unreliable (another
region, a factory, a shop): apps publish to it as to an agent (Publish and
PublishBatch over Connect, gRPC or JSON on --listen, the same bounds and
validation), and it acknowledges an event once it is stored on its own disk
(--data-dir), whether the cell is reachable or not. It embeds a NATS
JetStream server in its own domain (--name), joined to the cell's leaf port
(--cell-leaf, an agent's or rivora dev's --leaf-listen); the cell takes the
buffered events from there, in order, as soon as the link allows. An edge
never delivers: lanes, budgets and retries are the cell's.

Its config (destinations, subscriptions, event types, API tokens: no signing
secret, no header value) comes from the control plane (--controlplane) and is
kept in DATA_DIR/edge-config.pb, so an edge restarted during a cut accepts
and authenticates at once. Publisher tokens are checked here against the
token set it last received; expiry is checked by the edge's clock. A token
revoked while the edge is cut off from the control plane keeps working here
until the link returns: revocation reaches a cut-off edge only when it
reconnects (within seconds of that). While it has not heard from the control
plane for a few seconds, a publish to a destination (or a test event to a
subscription) it does not know, and a fan-out matching none of the
subscriptions it knows, are refused unavailable: they may have been created
since. A fan-out is routed by the subscriptions the edge last heard of.

A full edge refuses, it never drops: a request whose events do not fit
under --max-buffer bytes of unforwarded events, or any once the oldest is
older than --buffer-max-age, is answered resource_exhausted (naming the
buffer, what it holds and since when the cell is unreachable; reason
EDGE_BUFFER_FULL when it is full, EDGE_BUFFER_TOO_OLD when over age),
storing nothing of it, and the edge accepts again as the cell takes
events. Nothing acknowledged is ever discarded.

A data dir keeps the name it was made under (recorded in DATA_DIR/edge-name):
the edge refuses to start on it under another --name, since what its buffer
holds is forwarded only under the old one. A new name needs a new data dir.
A lost data dir loses what it held; the edge may start again under its old
name on a new data dir (the cell forwards the new buffer from its start).
One process per data dir: a second one on a dir in use is refused.

The cell token (--cell-token-file, the cell's own) opens the edge's calls to
the control plane and its leaf credential. With --tls-cert and --tls-key
--listen is HTTPS; --tls-ca verifies the control plane (https://) and the
cell's leaf port, which is then TLS (needed when the cell serves it over TLS).

Metrics (/metrics): rivora_edge_buffered_events, rivora_edge_buffered_bytes,
rivora_edge_max_buffer_bytes, rivora_edge_cell_connected (0/1),
rivora_edge_oldest_unforwarded_seconds, rivora_edge_forwarded_total.

Example:
   rivora edge --name shop-12 --listen 127.0.0.1:7500 --data-dir ./shop-12 \
     --cell-leaf nats-leaf://cell.example:7422 --controlplane https://cp.example:7300 \
     --cell-token-file cell.token --tls-ca cell-ca.pem --max-buffer 10GiB --buffer-max-age 72h` + tracingHelp,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "name", EnvVars: []string{"RIVORA_EDGE_NAME"}, Required: true, Usage: "this edge's `NAME` (letters, digits, '_', '-'), unique among the cell's edges: its JetStream domain and its name in `rivoractl edges`. " +
				"An existing data dir keeps its name (a new name needs a new data dir); a new data dir may take a lost one's name. " +
				"One running edge per name: started under a running edge's name, the edge waits 10s for it and refuses to start (a stopped edge's name is free 6s after its last report)"},
			&cli.StringSliceFlag{Name: "cell-leaf", EnvVars: []string{"RIVORA_EDGE_CELL_LEAF"}, Required: true, Usage: "the cell's leaf port, `nats-leaf://HOST:PORT` (an agent's --leaf-listen); repeat it (or comma-separate) for several agents, tried in turn. " +
				"Costs one TCP connection, over which the buffered events leave"},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7500", EnvVars: []string{"RIVORA_LISTEN"}, Usage: "`ADDR` to serve ingest, /healthz and /metrics on"},
			&cli.StringFlag{Name: "data-dir", Value: "./edge-data", EnvVars: []string{"RIVORA_DATA_DIR"}, Usage: "`DIR` for the buffer (up to --max-buffer on disk), the edge's name (edge-name) and the last config (edge-config.pb); one process per data dir"},
			&cli.StringSliceFlag{Name: "controlplane", EnvVars: []string{"RIVORA_CONTROLPLANE"}, Required: true, Usage: "control plane `URL`; repeat it (or comma-separate) for several: the edge follows the leader. " +
				"Unreachable, the edge accepts by the config it kept, and a token revoked meanwhile still works here until it is reachable again"},
			&cli.StringFlag{Name: "max-buffer", Value: "1GiB", EnvVars: []string{"RIVORA_EDGE_MAX_BUFFER"}, Usage: "most unforwarded events the edge holds, in bytes (`SIZE`, at least 1MiB: 1073741824, 512MiB, 10GiB): the disk it may take under --data-dir. " +
				"A request that does not fit is refused whole (resource_exhausted) until the cell takes events. Size it as your publish rate × the longest cut to ride out × the stored event (payload + ~360 bytes of headers and subject): 1,000 events/s of 1 KiB for 24h is ~112 GiB. " +
				"The data dir needs about 1.33 times as much free (JetStream takes at most three quarters of the free disk): the edge refuses to start otherwise"},
			&cli.DurationFlag{Name: "buffer-max-age", Value: edged.DefaultBufferMaxAge, EnvVars: []string{"RIVORA_EDGE_BUFFER_MAX_AGE"}, Usage: "once the oldest unforwarded event is older than this (`DURATION`), Publish is refused (resource_exhausted) until the cell takes it: the longest cut the edge rides out. " +
				"Nothing is discarded for age. Shorter than a destination's window, the edge warns at start: it refuses that destination's events in a cut the cell would have kept retrying through"},
			&cli.BoolFlag{Name: "fsync", EnvVars: []string{"RIVORA_FSYNC"}, Usage: "acknowledge only once a sync of the store covers the write (survives a power loss); concurrent acknowledgements share one sync. Without it an ack survives a crash or kill -9 of the edge"},
			pprofFlag,
			maxConnsFlag,
			maxInflightFlag,
			metricsTokenFlag,
			logLevelFlag,
		}, append(append(ingestFlags(), edgeCellFlags()...), edgeTLSFlags()...)...),
		Action: runEdge,
	}
}

func runEdge(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	log, err := newLogger(c.String("log-level"))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	cfg, err := edgeConfig(c)
	if err != nil {
		return err
	}
	if cfg.Keys, err = cellKeys(c, log); err != nil {
		return err
	}
	opts := server.EdgeOptions{Log: log, HTTP: server.HTTP{Listen: c.String("listen"), Pprof: c.Bool("pprof")}}
	if opts.HTTP.MetricsToken, err = metricsToken(c); err != nil {
		return err
	}
	if opts.HTTP.TLS, err = tlsOf(c); err != nil {
		return err
	}
	if err := httpLimits(c, &opts.HTTP); err != nil {
		return err
	}
	if cfg.DataDir, err = absDir("data-dir", c.String("data-dir")); err != nil {
		return err
	}
	opts.Edge = cfg
	flush, err := server.StartTracing(context.Background(), "rivora-edge", log)
	if err != nil {
		return exit(err)
	}
	defer flush()
	ctx, stop := stopOnSignal(log)
	defer stop()
	err = server.RunEdge(ctx, opts)
	if errors.Is(err, edged.ErrMaxBufferTooLarge) {
		// Found only once the store is open, but a flag's mistake.
		return cli.Exit(err.Error(), 2)
	}
	return exit(err)
}

// edgeConfig checks the edge's own flags into its configuration (keys,
// data dir and TLS are the caller's).
func edgeConfig(c *cli.Context) (edged.Config, error) {
	if err := ids.Validate("--name", c.String("name")); err != nil {
		return edged.Config{}, cli.Exit(err.Error(), 2)
	}
	leaves := c.StringSlice("cell-leaf")
	for _, l := range leaves {
		u, err := url.Parse(l)
		if err != nil || (u.Scheme != "nats-leaf" && u.Scheme != "tls") || u.Host == "" || u.Port() == "" || u.User != nil {
			return edged.Config{}, cli.Exit(fmt.Sprintf("--cell-leaf %q: want nats-leaf://HOST:PORT, the cell's leaf port (the credential comes from --cell-token-file)", l), 2)
		}
	}
	planes := c.StringSlice("controlplane")
	for _, cp := range planes {
		if _, err := httpurl.Parse(cp); err != nil {
			return edged.Config{}, cli.Exit(fmt.Sprintf("--controlplane %q: want an http:// or https:// URL", cp), 2)
		}
	}
	maxBuffer, err := parseBytes("max-buffer", c.String("max-buffer"))
	if err != nil {
		return edged.Config{}, cli.Exit(err.Error(), 2)
	}
	if maxBuffer < minBuffer {
		return edged.Config{}, cli.Exit(fmt.Sprintf("--max-buffer %s: want at least 1MiB (the edge holds its unforwarded events in it)", c.String("max-buffer")), 2)
	}
	if age := c.Duration("buffer-max-age"); age < time.Minute {
		return edged.Config{}, cli.Exit(fmt.Sprintf("--buffer-max-age %s: want at least 1m (the longest cut the edge rides out, 72h by default)", age), 2)
	}
	if err := checkIngestFlags(c); err != nil {
		return edged.Config{}, err
	}
	return edged.Config{
		Name: c.String("name"), CellLeaf: leaves, ControlPlanes: planes,
		MaxBuffer: maxBuffer, BufferMaxAge: c.Duration("buffer-max-age"), DedupWindow: c.Duration("dedup-window"),
		MaxPayload: c.Int("max-payload"), MaxBatch: c.Int("max-batch"), MaxBatchBytes: c.Int("max-batch-bytes"),
		ConcurrentEvents: c.Int("max-concurrent-events"), SyncAlways: c.Bool("fsync"),
	}, nil
}

// minBuffer is the smallest --max-buffer.
const minBuffer = 1 << 20
