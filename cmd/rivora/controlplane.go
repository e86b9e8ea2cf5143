package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/rivora/rivora/controlplane"
)

func controlPlaneCommand() *cli.Command {
	return &cli.Command{
		Name:  "controlplane",
		Usage: "run the control plane: destinations, limits, priorities and pauses, pushed to agents",
		Description: `Holds the configuration (state under --state-dir; limits from the reviewed
--limits file, reloaded on change, plus audited runtime overrides) and
pushes every change to the agents that Watch it. Serves the admin API
(rivoractl) and the agent API on --listen.

Example:
   rivora controlplane --listen 127.0.0.1:7300 --limits limits.yaml --state-dir ./cp
   rivora agent --name a1 --listen 127.0.0.1:7400 --controlplane http://127.0.0.1:7300 --data-dir ./a1`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7300", EnvVars: []string{"RIVORA_LISTEN"}, Usage: "`ADDR` to serve the admin and agent APIs on"},
			&cli.StringFlag{Name: "state-dir", Value: "./controlplane", EnvVars: []string{"RIVORA_STATE_DIR"}, Usage: "`DIR` for the control plane's state and audit log"},
			&cli.StringFlag{Name: "limits", EnvVars: []string{"RIVORA_LIMITS"}, Usage: "reviewed limits `FILE` (YAML), reloaded when it changes"},
			&cli.IntFlag{Name: "partitions", Value: controlplane.DefaultPartitions, EnvVars: []string{"RIVORA_PARTITIONS"}, Usage: "number of partitions (pending stores) of the cell"},
			pprofFlag,
			logLevelFlag,
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			log, err := newLogger(c.String("log-level"))
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			stateDir, err := absDir("state-dir", c.String("state-dir"))
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cp, err := controlplane.New(controlplane.Config{StateDir: stateDir, LimitsPath: c.String("limits"), Partitions: c.Int("partitions")}, log.With("component", "controlplane"))
			if err != nil {
				return err
			}
			ln, url, err := listen(c.String("listen"))
			if err != nil {
				return err
			}
			mux := baseMux(func() bool { return true }, c.Bool("pprof"))
			cp.Handle(mux)
			log.Info("rivora controlplane listening", "addr", url, "state_dir", stateDir)
			return serveUntil(ctx, log, newServer(mux), ln, cp.Run)
		},
	}
}
