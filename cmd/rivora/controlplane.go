package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/controlplane/notices"
	"github.com/rivora/rivora/internal/httpurl"
	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/server"
)

func controlPlaneCommand() *cli.Command {
	return &cli.Command{
		Name:  "controlplane",
		Usage: "run the control plane: destinations, limits, priorities and pauses, pushed to agents",
		Description: `Holds the configuration (state under --state-dir; limits from the reviewed
--limits file, reloaded on change, plus audited runtime overrides) and
pushes every change to the agents that Watch it. Serves the admin API
(rivoractl) and the agent API on --listen, and every operator API the agents
serve — events, lanes, dead letters, replay — by routing each call to the
agent that can answer it (the owner of the destination's partition; any
agent for the archive), so that ` + "`rivoractl --server <control plane>`" + ` and the
console need no agent address.

With --consul, the state and the audit log live in Consul KV
(rivora/controlplane/...) instead of --state-dir, and several control planes
may run against the same Consul: the one holding the Consul lock
rivora/controlplane/leader leads. Only the leader serves the admin, agent and
operator APIs; the others answer Unavailable naming the leader by its --advertise URL,
and one of them takes over (reloading the state from Consul) when the leader
stops or loses its Consul session (10s TTL, 1s lock-delay). Give each control
plane the same --limits file.

With --operator-webhook URL, the leader sends the operator signed notices
(destination.parked, destination.recovered, destination.disabled,
deadletter.created, override.expired) through the agents' ingest to the
reserved destination rivora-operator, so they are stored, retried and
delivered like any event.

Every call needs a token (Authorization: Bearer). The first start with no
token stored creates an admin token named "bootstrap" and writes it to
STATE_DIR/admin.token (mode 0600; the path is logged, never the token; with
--consul, the first control plane to lead writes it, on its machine):
` + "`rivoractl --token-file STATE_DIR/admin.token tokens create ...`" + ` makes the
others. The cell's internal services (the agents' Watch and reports, their
PartitionService) take only the cell token: --cell-token-file, the same
secret on every control plane and agent (` + "`openssl rand -hex 32`" + `); without it
the control plane refuses to start unless --insecure.

Examples:
   openssl rand -hex 32 > cell.token
   rivora controlplane --listen 127.0.0.1:7300 --limits limits.yaml --state-dir ./cp --cell-token-file cell.token
   rivora agent --name a1 --listen 127.0.0.1:7400 --controlplane http://127.0.0.1:7300 --data-dir ./a1 --allow-local-archive --cell-token-file cell.token
   rivoractl --server http://127.0.0.1:7300 --token-file ./cp/admin.token events get EVENT_ID

   # two control planes sharing one Consul
   rivora controlplane --listen 127.0.0.1:7300 --limits limits.yaml --consul http://127.0.0.1:8500 --cell-token-file cell.token --state-dir ./cp1
   rivora controlplane --listen 127.0.0.1:7301 --limits limits.yaml --consul http://127.0.0.1:8500 --cell-token-file cell.token --state-dir ./cp2` + tracingHelp,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7300", EnvVars: []string{"RIVORA_LISTEN"}, Usage: "`ADDR` to serve the admin and agent APIs on"},
			&cli.StringFlag{Name: "state-dir", Value: "./controlplane", EnvVars: []string{"RIVORA_STATE_DIR"}, Usage: "`DIR` for the control plane's state and audit log (with --consul they are in Consul), and admin.token, the bootstrap admin token the first start writes"},
			&cli.StringFlag{Name: "limits", EnvVars: []string{"RIVORA_LIMITS"}, Usage: "reviewed limits `FILE` (YAML), reloaded when it changes"},
			&cli.IntFlag{Name: "partitions", Value: controlplane.DefaultPartitions, EnvVars: []string{"RIVORA_PARTITIONS"}, Usage: "number of partitions (pending stores) of the cell; fixed for the cell: the first control plane records it (state dir, or Consul), and one with another count is refused"},
			&cli.DurationFlag{Name: "rejoin-delay", Value: 30 * time.Second, EnvVars: []string{"RIVORA_REJOIN_DELAY"}, Usage: "with --consul: how long an agent that lost its session (frozen, cut off) waits once back before it owns partitions again"},
			&cli.StringFlag{Name: "consul", EnvVars: []string{"RIVORA_CONSUL"}, Usage: "Consul HTTP API `URL` keeping the state and electing one leader among several control planes (default: state under --state-dir, one control plane)"},
			&cli.StringFlag{Name: "advertise", EnvVars: []string{"RIVORA_ADVERTISE"}, Usage: "`URL` the other control planes name this one by while it leads; set it when --listen is 0.0.0.0 (default: http://<listen address>, https:// with --tls-cert)"},
			allowDestinationFlag(false),
			pprofFlag,
			maxConnsFlag,
			maxInflightFlag,
			metricsTokenFlag,
			logLevelFlag,
		}, append(append(append(append(cellFlags(), operatorFlags()...), capacityFlags()...), catalogueFlags()...), tlsFlags()...)...),
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			log, err := newLogger(c.String("log-level"))
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			flush, err := server.StartTracing(context.Background(), "rivora-controlplane", log)
			if err != nil {
				return exit(err)
			}
			defer flush()
			consul := c.String("consul")
			if consul != "" && !isBaseURL(consul) {
				return cli.Exit(fmt.Sprintf("--consul %q: want an http:// or https:// URL such as http://127.0.0.1:8500", consul), 2)
			}
			advertise := c.String("advertise")
			if advertise != "" && !isBaseURL(advertise) {
				return cli.Exit(fmt.Sprintf("--advertise %q: want an http:// or https:// URL such as http://10.0.0.5:7300", advertise), 2)
			}
			if err := checkAtLeastOne(c, "partitions"); err != nil {
				return err
			}
			cfg := controlplane.Config{LimitsPath: c.String("limits"), Partitions: c.Int("partitions"), ConsulURL: consul, RejoinDelay: c.Duration("rejoin-delay"), AdvertiseURL: advertise}
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
			if cfg.Keys, err = cellKeys(c, log); err != nil {
				return err
			}
			if cfg.Keys.Cell().IsZero() && c.String("operator-webhook") != "" {
				return cli.Exit("--operator-webhook needs --cell-token-file: the control plane publishes notices through an agent, which admits it by the cell token (with --insecure there is none)", 2)
			}
			opts := server.ControlPlaneOptions{Log: log, HTTP: server.HTTP{Listen: c.String("listen"), Pprof: c.Bool("pprof")}}
			if opts.HTTP.MetricsToken, err = metricsToken(c); err != nil {
				return err
			}
			stateDir, err := absDir("state-dir", c.String("state-dir"))
			if err != nil {
				return err
			}
			cfg.AdminTokenPath = filepath.Join(stateDir, "admin.token")
			cfg.OperatorSecretPath = filepath.Join(stateDir, "operator-webhook.secret")
			if consul == "" {
				cfg.StateDir = stateDir
			}
			if opts.HTTP.TLS, err = tlsOf(c); err != nil {
				return err
			}
			if err := httpLimits(c, &opts.HTTP); err != nil {
				return err
			}
			opts.ControlPlane = cfg
			ctx, stop := stopOnSignal(log)
			defer stop()
			return exit(server.RunControlPlane(ctx, opts))
		},
	}
}

// operatorFlags are the operator-notice flags of `rivora controlplane`
// and `rivora dev`.
func operatorFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "operator-webhook", EnvVars: []string{"RIVORA_OPERATOR_WEBHOOK"}, Usage: "`URL` that receives operator notices, signed Standard Webhooks POSTs of JSON {type, destinationId, at, message, …}: " +
			"destination.parked, destination.recovered, destination.disabled, deadletter.created (batched, at most one a minute per destination), override.expired, destination.certificate_expiring. " +
			"Delivered like any event through the reserved destination " + notices.DestinationID},
		&cli.StringFlag{Name: "operator-webhook-secret", EnvVars: []string{"RIVORA_OPERATOR_WEBHOOK_SECRET"}, Usage: "`SECRET` (whsec_…) signing operator notices (default: the one stored, or a new one, written to <state-dir>/operator-webhook.secret, mode 0600; <data-dir>/… for rivora dev)"},
		&cli.DurationFlag{Name: "notify-parked-after", Value: notices.DefaultParkedAfter, EnvVars: []string{"RIVORA_NOTIFY_PARKED_AFTER"}, Usage: "send destination.parked once a destination has been parked this long (once per episode)"},
		&cli.DurationFlag{Name: "cert-expiry-warning", Value: notices.DefaultCertExpiryWarning, EnvVars: []string{"RIVORA_CERT_EXPIRY_WARNING"}, Usage: "this long before a destination's mTLS client certificate expires, its health shows it as expiring and destination.certificate_expiring is sent (once per certificate)"},
	}
}

// operatorConfig checks the operator-notice flags into cfg.
func operatorConfig(c *cli.Context, cfg *controlplane.Config) error {
	url, secret := c.String("operator-webhook"), c.String("operator-webhook-secret")
	if url == "" && secret != "" {
		return cli.Exit("--operator-webhook-secret needs --operator-webhook URL", 2)
	}
	if url != "" {
		if _, err := httpurl.Parse(url); err != nil {
			return cli.Exit(fmt.Sprintf("--operator-webhook %q: want an http:// or https:// URL such as https://ops.example.com/rivora", url), 2)
		}
	}
	if secret != "" {
		if _, err := webhook.Key(secret); err != nil {
			return cli.Exit(fmt.Sprintf("--operator-webhook-secret: %v", err), 2)
		}
	}
	if d := c.Duration("notify-parked-after"); d <= 0 {
		return cli.Exit(fmt.Sprintf("--notify-parked-after must be positive, got %s", d), 2)
	}
	if d := c.Duration("cert-expiry-warning"); d <= 0 {
		return cli.Exit(fmt.Sprintf("--cert-expiry-warning must be positive, got %s (336h is 14 days)", d), 2)
	}
	cfg.CertExpiryWarning = c.Duration("cert-expiry-warning")
	if u, err := httpurl.Parse(url); err == nil {
		if err := cfg.Guard.CheckHost(u.Hostname()); err != nil {
			return cli.Exit(fmt.Sprintf("--operator-webhook %q %v", url, err), 2)
		}
	}
	cfg.OperatorWebhook, cfg.OperatorWebhookSecret, cfg.NotifyParkedAfter = url, secret, c.Duration("notify-parked-after")
	return nil
}

// isBaseURL accepts http://HOST[:PORT] and https://HOST[:PORT].
func isBaseURL(raw string) bool {
	_, err := httpurl.ParseBase(raw)
	return err == nil
}
