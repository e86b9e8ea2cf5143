package main

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
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

	"github.com/rivora/rivora/internal/tlsconf"
)

// common flags of the server commands.
var (
	logLevelFlag     = &cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"RIVORA_LOG_LEVEL"}, Usage: "debug, info, warn or error"}
	pprofFlag        = &cli.BoolFlag{Name: "pprof", EnvVars: []string{"RIVORA_PPROF"}, Usage: "serve Go profiles under /debug/pprof/ on --listen (behind --metrics-token-file when given)"}
	metricsTokenFlag = &cli.StringFlag{Name: "metrics-token-file", EnvVars: []string{"RIVORA_METRICS_TOKEN_FILE"},
		Usage: "`FILE` holding a token /metrics (and /debug/pprof/) then require as `Authorization: Bearer <token>` (Prometheus: authorization.credentials_file); default: /metrics is open, like /healthz, and shows no event data"}
)

// metricsToken reads --metrics-token-file ("" when not given).
func metricsToken(c *cli.Context) (string, error) {
	path := c.String("metrics-token-file")
	if path == "" {
		return "", nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", cli.Exit(fmt.Sprintf("--metrics-token-file: %v", err), 2)
	}
	token := strings.TrimSpace(string(data))
	if len(token) < 16 {
		return "", cli.Exit(fmt.Sprintf("--metrics-token-file %s: %d bytes, want at least 16 (make one with `openssl rand -hex 32`)", path, len(token)), 2)
	}
	return token, nil
}

// withToken lets through only requests carrying token as a bearer
// ("" = everyone).
func withToken(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="rivora metrics"`)
			http.Error(w, "this endpoint needs the --metrics-token-file token: Authorization: Bearer <token>", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// tlsFlags are the TLS flags of `rivora controlplane`, `rivora agent` and
// `rivora dev`.
func tlsFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "tls-cert", EnvVars: []string{"RIVORA_TLS_CERT"}, Usage: "serve --listen over HTTPS (HTTP/2 and HTTP/1.1, TLS 1.2+) with this certificate `FILE` (PEM, leaf first, then intermediates); " +
			"an agent also serves its NATS routes (mutual TLS, with --tls-ca) and NATS client port with it. Needs --tls-key"},
		&cli.StringFlag{Name: "tls-key", EnvVars: []string{"RIVORA_TLS_KEY"}, Usage: "the private key `FILE` (PEM) of --tls-cert"},
		&cli.StringFlag{Name: "tls-ca", EnvVars: []string{"RIVORA_TLS_CA"}, Usage: "CA bundle `FILE` (PEM) this process verifies its peers with: the control plane and agents it calls over https://, " +
			"and the certificates of the other agents on NATS routes (default: the system's roots for https://; required for TLS routes)"},
	}
}

// serving is what the --tls-* flags set: the listener's TLS config (nil:
// plain HTTP) and the transport of the internal HTTP clients (nil: the
// default).
type serving struct {
	files     tlsconf.Files
	tls       *tls.Config
	transport http.RoundTripper
}

// servingFlags reads and checks the --tls-* files, so that a bad one
// stops the process before anything starts.
func servingFlags(c *cli.Context) (serving, error) {
	s := serving{files: tlsconf.Files{Cert: c.String("tls-cert"), Key: c.String("tls-key"), CA: c.String("tls-ca")}}
	if err := s.files.Check(); err != nil {
		return serving{}, cli.Exit(err.Error(), 2)
	}
	var err error
	if s.files.Enabled() {
		if s.tls, err = tlsconf.Server(s.files.Cert, s.files.Key); err != nil {
			return serving{}, cli.Exit(err.Error(), 2)
		}
		// Connect, gRPC and JSON clients over one port: h2 for gRPC.
		s.tls.NextProtos = []string{"h2", "http/1.1"}
	}
	if s.transport, err = tlsconf.ClientTransport(s.files.CA); err != nil {
		return serving{}, cli.Exit(err.Error(), 2)
	}
	return s, nil
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToLower(level))); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// baseMux serves /healthz (200 "ok" while healthy returns nil, else 503
// with its reason), /metrics and, if asked, /debug/pprof/; those two
// behind metricsToken when it is set.
func baseMux(healthy func() error, withPprof bool, metricsToken string) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /metrics", withToken(metricsToken, promhttp.Handler()))
	if withPprof {
		mux.Handle("/debug/pprof/", withToken(metricsToken, http.HandlerFunc(pprof.Index)))
		mux.Handle("/debug/pprof/profile", withToken(metricsToken, http.HandlerFunc(pprof.Profile)))
		mux.Handle("/debug/pprof/symbol", withToken(metricsToken, http.HandlerFunc(pprof.Symbol)))
		mux.Handle("/debug/pprof/trace", withToken(metricsToken, http.HandlerFunc(pprof.Trace)))
	}
	return mux
}

// newServer serves Connect, gRPC, gRPC-Web and JSON over HTTP/1.1 and
// HTTP/2: h2c on a plain listener, h2 over TLS. A connection that sends
// no request headers within 10 s is closed, an idle keep-alive connection
// after idleTimeout, and a request must arrive, body included, within
// bodyTimeout (an API call's body must also keep bounds.BodyPace). An
// HTTP/2 connection carries at most maxStreams calls at once.
func newServer(h http.Handler) *http.Server {
	srv := &http.Server{
		Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: bodyTimeout, IdleTimeout: idleTimeout,
		Protocols: new(http.Protocols),
		HTTP2:     &http.HTTP2Config{MaxConcurrentStreams: maxStreams},
	}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	return srv
}

// maxStreams bounds the concurrent streams of one HTTP/2 connection
// (Go's default is 250): each stream a stranger opens costs a handler
// goroutine until the door refuses it, so this bounds what one
// connection's burst costs (100 connections × 250 streams: ~45 MB at 32,
// up to ~120 MB at 100). A client needing more opens more connections
// (Go's HTTP/2 transport does; grpc-go queues calls beyond it), which
// --max-connections bounds.
const maxStreams = 32

// listen opens addr, over TLS with tlsCfg (nil: plain), and returns the
// listener with its base URL (https:// with TLS). Plain text on an
// address other hosts reach is logged as a warning.
func listen(log *slog.Logger, addr string, tlsCfg *tls.Config) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	if tlsCfg != nil {
		return tls.NewListener(ln, tlsCfg), "https://" + ln.Addr().String(), nil
	}
	warnPlainText(log, ln.Addr())
	return ln, "http://" + ln.Addr().String(), nil
}

// warnPlainText warns of plain HTTP on an address other hosts reach.
// loopbackAddr reports whether HOST:PORT names a loopback host.
func loopbackAddr(hostPort string) bool {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func warnPlainText(log *slog.Logger, addr net.Addr) {
	if tcp, ok := addr.(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		log.Warn("serving plain HTTP on a non-loopback address: traffic, tokens included, is readable on the network; give --tls-cert and --tls-key", "addr", addr.String())
	}
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
