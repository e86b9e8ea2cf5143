package server

import (
	"context"
	"log/slog"
	"slices"

	"github.com/rivora/rivora/console"
	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/internal/introspect"
)

// ControlPlaneOptions are what `rivora controlplane` runs with.
type ControlPlaneOptions struct {
	Log  *slog.Logger
	HTTP HTTP
	// ControlPlane is the control plane's configuration. RunControlPlane
	// fills in AdvertiseURL when empty (the listener's URL) and the
	// internal clients' transport from HTTP.TLS.
	ControlPlane controlplane.Config
}

// RunControlPlane runs a control plane, serving its admin, agent and
// operator APIs and the console on opts.HTTP.Listen until ctx ends.
func RunControlPlane(ctx context.Context, opts ControlPlaneOptions) error {
	log, cfg := opts.Log, opts.ControlPlane
	cfg.Transport = opts.HTTP.TLS.Transport
	ln, self, err := listen(log, opts.HTTP.Listen, opts.HTTP.TLS.Server)
	if err != nil {
		return err
	}
	if cfg.AdvertiseURL == "" {
		cfg.AdvertiseURL = self
	}
	cp, err := controlplane.New(cfg, log.With("component", "controlplane"))
	if err != nil {
		ln.Close()
		return err
	}
	healthy := func() error { return nil }
	mux := baseMux(healthy, opts.HTTP.Pprof, opts.HTTP.MetricsToken)
	cp.Handle(mux)
	cp.HandleOperator(mux)
	mux.Handle(console.Prefix, console.Handler())
	introspect.Handle(mux, cfg.Keys, healthy, slices.Concat(controlplane.Services, controlplane.OperatorServices)...)
	log.Info("rivora controlplane listening", "addr", self, "state_dir", cfg.StateDir, "consul", cfg.ConsulURL, "advertise", cfg.AdvertiseURL)
	return serve(ctx, opts.HTTP, log, mux, ln, cp.Run)
}
