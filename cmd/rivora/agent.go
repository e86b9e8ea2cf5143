package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

func agentCommand() *cli.Command {
	return &cli.Command{
		Name:  "agent",
		Usage: "run an agent: ingest, lanes, budgets and delivery, steered by a control plane",
		Description: `The sidecar next to customer apps. It embeds NATS JetStream (storage under
--data-dir), follows the control plane's configuration over Watch, owns the
partitions it is assigned, and serves ingest and event lookups on --listen.

Example:
   rivora agent --name a1 --listen 127.0.0.1:7400 --controlplane http://127.0.0.1:7300 --data-dir ./a1`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "name", EnvVars: []string{"RIVORA_AGENT_NAME"}, Usage: "this agent's `NAME` in the cell (letters, digits, '_', '-')", Required: true},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7400", EnvVars: []string{"RIVORA_LISTEN"}, Usage: "`ADDR` to serve ingest, events, /healthz and /metrics on"},
			&cli.StringFlag{Name: "advertise", EnvVars: []string{"RIVORA_ADVERTISE"}, Usage: "`URL` the control plane calls this agent at (default: http://<listen address>)"},
			&cli.StringFlag{Name: "controlplane", Value: "http://127.0.0.1:7300", EnvVars: []string{"RIVORA_CONTROLPLANE"}, Usage: "control plane `URL`"},
			&cli.StringFlag{Name: "data-dir", Value: "./data", EnvVars: []string{"RIVORA_DATA_DIR"}, Usage: "`DIR` for streams and the archive"},
		}, agentFlags()...),
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			log, err := newLogger(c.String("log-level"))
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			if u, err := url.Parse(c.String("controlplane")); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return cli.Exit(fmt.Sprintf("--controlplane %q: want an http:// or https:// URL", c.String("controlplane")), 2)
			}
			dataDir, err := absDir("data-dir", c.String("data-dir"))
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ln, self, err := listen(c.String("listen"))
			if err != nil {
				return err
			}
			advertise := c.String("advertise")
			if advertise == "" {
				advertise = self
			}
			ag, err := newAgent(ctx, c, log, c.String("name"), dataDir, c.String("controlplane"), advertise)
			if err != nil {
				ln.Close()
				return err
			}
			mux := baseMux(ag.Ready, c.Bool("pprof"))
			ag.Handle(mux)
			log.Info("rivora agent listening", "addr", self, "name", c.String("name"), "controlplane", c.String("controlplane"))
			return serveUntil(ctx, log, newServer(mux), ln, ag.Run)
		},
	}
}
