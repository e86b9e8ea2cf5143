package server

import (
	"context"
	"log/slog"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/introspect"
)

// AgentOptions are what `rivora agent` runs with.
type AgentOptions struct {
	Log  *slog.Logger
	HTTP HTTP
	// Agent is the agent's configuration, Keys included. RunAgent fills
	// in the rest: AdvertiseURL when empty (the listener's URL), the
	// internal clients' transport and the NATS TLS files from HTTP.TLS,
	// and the embedded NATS server's password, derived from the cell
	// token.
	Agent agent.Config
}

// RunAgent runs an agent of a cell, serving its API on opts.HTTP.Listen
// until ctx ends.
func RunAgent(ctx context.Context, opts AgentOptions) error {
	log, cfg := opts.Log, opts.Agent
	// An agent stopped for a full disk (natsd.ErrJetStreamDisabled) and
	// started again by its supervisor waits here, owning nothing, until
	// the disk has room: started on a full disk it would take partitions
	// and fail at its first writes. It listens only after: a publisher
	// meanwhile is refused at once and goes to another agent, instead of
	// waiting on a listener nobody serves yet.
	if err := natsd.AwaitRoom(ctx, cfg.DataDir, natsd.MinFreeToStart, log.With("component", "agent")); err != nil {
		return err
	}
	// The data dir is this process's until it returns: released last,
	// once its HTTP server answers no more (the embedded NATS server
	// would release it as it stops, before the last answers).
	lock, err := natsd.LockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer lock.Release()
	cfg.DataDirLock = lock
	ln, self, err := listen(log, opts.HTTP.Listen, opts.HTTP.TLS.Server)
	if err != nil {
		return err
	}
	if cfg.AdvertiseURL == "" {
		cfg.AdvertiseURL = self
	}
	cfg.Transport, cfg.NATSTLS, cfg.NATSPassword = opts.HTTP.TLS.Transport, opts.HTTP.TLS.Files, natsPassword(cfg.Keys.Cell())
	ag, err := agent.New(ctx, cfg, log)
	if err != nil {
		ln.Close()
		return withPortFlag(err)
	}
	mux := baseMux(ag.Healthy, opts.HTTP.Pprof, opts.HTTP.MetricsToken)
	ag.Handle(mux)
	introspect.Handle(mux, cfg.Keys, ag.Healthy, agent.Services...)
	log.Info("rivora agent listening", "addr", self, "name", cfg.Name, "controlplane", cfg.ControlPlaneURL)
	return serve(ctx, opts.HTTP, log, mux, ln, ag.Run)
}

// natsPassword is the credential of a cell agent's embedded NATS server,
// derived from the cell token ("" without one: --insecure).
func natsPassword(cell auth.CellToken) string {
	if cell.IsZero() {
		return ""
	}
	return cell.Derive("nats")
}
