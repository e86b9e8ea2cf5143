package server

import (
	"context"
	"log/slog"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/edge/edged"
	"github.com/rivora/rivora/internal/introspect"
)

// EdgeOptions are what `rivora edge` runs with.
type EdgeOptions struct {
	Log  *slog.Logger
	HTTP HTTP
	// Edge is the edge's configuration, Keys included. RunEdge fills in
	// the control plane calls' transport and the leaf connection's CA
	// from HTTP.TLS.
	Edge edged.Config
}

// RunEdge runs an edge, serving ingest on opts.HTTP.Listen until ctx
// ends.
func RunEdge(ctx context.Context, opts EdgeOptions) error {
	log, cfg := opts.Log, opts.Edge
	// The data dir is this process's until it returns: released last,
	// once its HTTP server answers no more.
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
	cfg.Transport, cfg.LeafCA = opts.HTTP.TLS.Transport, opts.HTTP.TLS.Files.CA
	e, err := edged.New(ctx, cfg, log)
	if err != nil {
		ln.Close()
		return err
	}
	// The edge's own series only: the cell's, in the default registry,
	// are always 0 here.
	mux := baseMuxWith(e.Healthy, opts.HTTP.Pprof, opts.HTTP.MetricsToken, e.Metrics())
	e.Handle(mux)
	introspect.Handle(mux, cfg.Keys, e.Healthy, edged.Services...)
	log.Info("rivora edge listening", "addr", self, "name", cfg.Name, "cell_leaf", cfg.CellLeaf, "controlplane", cfg.ControlPlanes)
	return serve(ctx, opts.HTTP, log, mux, ln, e.Run)
}
