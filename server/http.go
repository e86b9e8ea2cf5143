// Package server runs Rivora's processes: it wires the control plane and
// the agent (apart, or both in one process for `rivora dev`) behind one
// HTTP listener and serves it until the context ends. It owns that
// listener and what guards it: the HTTP/1.1 and h2c server with its
// timeouts, the connection cap (--max-connections), the in-flight cap
// (--max-inflight-requests), /healthz, /metrics and /debug/pprof/, and
// tracing setup. It sits above agent and controlplane and below
// cmd/rivora, whose commands only turn flags into the Options each entry
// point here takes (RunAgent, RunControlPlane, RunDev, RunEdge).
package server

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
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rivora/rivora/internal/tlsconf"
)

// HTTP is how a process serves its one listener.
type HTTP struct {
	// Listen is the ADDR to serve on (--listen).
	Listen string
	TLS    TLS
	// Pprof serves Go profiles under /debug/pprof/.
	Pprof bool
	// MetricsToken guards /metrics and /debug/pprof/ ("" = open).
	MetricsToken string
	// MaxConns caps the open connections (0: 10,000, or half the
	// open-file limit when that is lower).
	MaxConns int
	// MaxInflight caps the API calls served at once.
	MaxInflight int
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

// TLS is what the --tls-* flags set: the listener's TLS config (nil:
// plain HTTP) and the transport of the internal HTTP clients (nil: the
// default).
type TLS struct {
	Files     tlsconf.Files
	Server    *tls.Config
	Transport http.RoundTripper
}

// LoadTLS reads and checks the --tls-* files, so that a bad one stops the
// process before anything starts.
func LoadTLS(files tlsconf.Files) (TLS, error) {
	s := TLS{Files: files}
	if err := files.Check(); err != nil {
		return TLS{}, err
	}
	var err error
	if files.Enabled() {
		if s.Server, err = tlsconf.Server(files.Cert, files.Key); err != nil {
			return TLS{}, err
		}
		// Connect, gRPC and JSON clients over one port: h2 for gRPC.
		s.Server.NextProtos = []string{"h2", "http/1.1"}
	}
	if s.Transport, err = tlsconf.ClientTransport(files.CA); err != nil {
		return TLS{}, err
	}
	return s, nil
}

// baseMux serves /healthz (200 "ok" while healthy returns nil, else 503
// with its reason), /metrics and, if asked, /debug/pprof/; those two
// behind metricsToken when it is set.
func baseMux(healthy func() error, withPprof bool, metricsToken string) *http.ServeMux {
	return baseMuxWith(healthy, withPprof, metricsToken, promhttp.Handler())
}

// baseMuxWith is baseMux serving metrics (a registry of the process's
// own) at /metrics.
func baseMuxWith(healthy func() error, withPprof bool, metricsToken string, metrics http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /metrics", withToken(metricsToken, metrics))
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

// listen opens addr (--listen), over TLS with tlsCfg (nil: plain), and
// returns the listener with its base URL (https:// with TLS). Plain text
// on an address other hosts reach is logged as a warning. An address it
// cannot open is refused naming the flag: "--listen ADDR: bind: address
// already in use".
func listen(log *slog.Logger, addr string, tlsCfg *tls.Config) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			err = op.Err // without "listen tcp ADDR:", said already
		}
		return nil, "", fmt.Errorf("--listen %s: %w", addr, err)
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
// once all of them have returned, and no request is being handled (or
// handlerWait has passed): the caller may then let the data dir go.
func serveUntil(ctx context.Context, log *slog.Logger, srv *http.Server, ln net.Listener, runners ...func(context.Context) error) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	handlers := &handlerCount{next: srv.Handler}
	srv.Handler = handlers
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
	// Close does not wait for the handlers still running (their
	// connections closed, their contexts ended).
	select {
	case <-handlers.idle():
	case <-time.After(handlerWait):
		log.Warn("stopping with requests still being handled", "waited", handlerWait)
	}
	return firstErr
}

// handlerWait bounds serveUntil's wait for the handlers left running
// once the server is closed.
const handlerWait = 5 * time.Second

// handlerCount counts the requests being handled by next.
type handlerCount struct {
	next    http.Handler
	mu      sync.Mutex
	running int
	// whenIdle, once asked for, is closed when running drops to 0.
	whenIdle chan struct{}
}

func (h *handlerCount) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.add(1)
	defer h.add(-1)
	h.next.ServeHTTP(w, r)
}

func (h *handlerCount) add(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running += n
	if h.running == 0 && h.whenIdle != nil {
		close(h.whenIdle)
		h.whenIdle = nil
	}
}

// idle is closed once no request is being handled.
func (h *handlerCount) idle() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.running == 0 {
		done := make(chan struct{})
		close(done)
		return done
	}
	if h.whenIdle == nil {
		h.whenIdle = make(chan struct{})
	}
	return h.whenIdle
}

// serve serves mux on ln (newServer, its connections capped by
// --max-connections, its calls by --max-inflight-requests) until ctx
// ends, with runners beside it (serveUntil).
func serve(ctx context.Context, opts HTTP, log *slog.Logger, mux *http.ServeMux, ln net.Listener, runners ...func(context.Context) error) error {
	n := maxConns(opts.MaxConns, log)
	srv := newServer(capInflight(opts.MaxInflight, log, mux))
	return serveUntil(ctx, log, srv, capConns(srv, ln, n, log), runners...)
}
