package server

import (
	"context"
	"log/slog"
	"slices"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/console"
	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/introspect"
)

// DevOptions are what `rivora dev` runs with.
type DevOptions struct {
	Log  *slog.Logger
	HTTP HTTP
	// ControlPlane and Agent are the configurations of the two
	// components. RunDev fills in their keys (a cell token made in
	// memory), the internal clients' transport from HTTP.TLS (with TLS,
	// HTTP.TLS.Transport must trust the listener's own certificate) and
	// the agent's control plane and advertised URLs (both the listener's).
	ControlPlane controlplane.Config
	Agent        agent.Config
	// Cell is the cell token (zero: one made in memory at start). Edges
	// joining the agent's leaf port derive their credential from it.
	Cell auth.CellToken
}

// RunDev runs the control plane and one agent in one process, both served
// on opts.HTTP.Listen, until ctx ends.
func RunDev(ctx context.Context, opts DevOptions) error {
	log, cpCfg, agCfg := opts.Log, opts.ControlPlane, opts.Agent
	// One process is its own cell: a cell token (made in memory unless
	// given), and keys of its own for each of the control plane and the
	// agent (the agent's API tokens come over Watch, as in a cell).
	cell := opts.Cell
	if cell.IsZero() {
		var err error
		if cell, err = auth.NewCellToken(); err != nil {
			return err
		}
	}
	cpCfg.Keys = auth.NewKeys(cell)
	if addr := agCfg.NATSListen; addr != "" && !loopbackAddr(addr) {
		log.Warn("rivora dev's embedded NATS has no password: on a non-loopback --nats-listen anyone who reaches it reads every payload; use a cell (rivora agent --cell-token-file) for that", "nats_listen", addr)
	}
	cpCfg.Transport = opts.HTTP.TLS.Transport
	// The data dir is this process's before the control plane opens its
	// state there: a second rivora dev on a live dir stops here, having
	// touched nothing. It is released last, once nothing answers from it.
	lock, err := natsd.LockDataDir(agCfg.DataDir)
	if err != nil {
		return err
	}
	defer lock.Release()
	agCfg.DataDirLock = lock
	ln, url, err := listen(log, opts.HTTP.Listen, opts.HTTP.TLS.Server)
	if err != nil {
		return err
	}
	cp, err := controlplane.New(cpCfg, log.With("component", "controlplane"))
	if err != nil {
		ln.Close()
		return err
	}
	agCfg.Keys = auth.NewKeys(cell)
	agCfg.ControlPlaneURL, agCfg.AdvertiseURL = url, url
	agCfg.Transport, agCfg.NATSTLS = opts.HTTP.TLS.Transport, opts.HTTP.TLS.Files
	ag, err := agent.New(ctx, agCfg, log)
	if err != nil {
		ln.Close()
		return withPortFlag(err)
	}
	mux := baseMux(ag.Healthy, opts.HTTP.Pprof, opts.HTTP.MetricsToken)
	cp.Handle(mux)
	ag.Handle(mux)
	mux.Handle(console.Prefix, console.Handler())
	introspect.Handle(mux, agCfg.Keys, ag.Healthy, slices.Concat(controlplane.Services, agent.Services)...)
	log.Info("rivora dev listening", "addr", url, "data_dir", agCfg.DataDir)
	return serve(ctx, opts.HTTP, log, mux, ln, cp.Run, ag.Run)
}
