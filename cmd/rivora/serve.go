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
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"
)

// common flags of the server commands.
var (
	logLevelFlag = &cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"RIVORA_LOG_LEVEL"}, Usage: "debug, info, warn or error"}
	pprofFlag    = &cli.BoolFlag{Name: "pprof", EnvVars: []string{"RIVORA_PPROF"}, Usage: "serve Go profiles under /debug/pprof/ on --listen"}
)

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToLower(level))); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// baseMux serves /healthz (ready reports whether to answer 200), /metrics
// and, if asked, /debug/pprof/.
func baseMux(ready func() bool, withPprof bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if !ready() {
			http.Error(w, "starting or draining", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /metrics", promhttp.Handler())
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// newServer serves Connect, gRPC, gRPC-Web and JSON over HTTP/1.1 and h2c.
func newServer(mux *http.ServeMux) *http.Server {
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	return srv
}

// listen opens addr and returns the listener with its base URL.
func listen(addr string) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, "http://" + ln.Addr().String(), nil
}

// serveUntil serves until ctx ends, then stops accepting and waits up to
// 30s for open requests. runners run beside the server; serveUntil returns
// once all of them have returned.
func serveUntil(ctx context.Context, log *slog.Logger, srv *http.Server, ln net.Listener, runners ...func(context.Context) error) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	errs := make(chan error, len(runners))
	for _, run := range runners {
		go func() {
			err := run(ctx)
			stop() // one component ending ends the process
			errs <- err
		}()
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	var firstErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		firstErr = fmt.Errorf("serve: %w", err)
		stop()
	}
	log.Info("shutting down: no new requests; draining")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	shutdownDone := make(chan struct{})
	go func() {
		defer close(shutdownDone)
		if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("http shutdown", "error", err)
		}
	}()
	for range runners {
		if err := <-errs; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	// The components have drained; give open requests a moment, then close
	// what is left (Shutdown would wait 5 s on connections never used).
	select {
	case <-shutdownDone:
	case <-time.After(time.Second):
		srv.Close()
	}
	return firstErr
}
