package sdk_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/sdk"
)

// headerRecorder wraps an ingest handler, keeping each request's
// Authorization header and protocol.
type headerRecorder struct {
	next   http.Handler
	mu     sync.Mutex
	auths  []string
	protos []string
}

func (h *headerRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.auths = append(h.auths, r.Header.Get("Authorization"))
	h.protos = append(h.protos, r.Proto)
	h.mu.Unlock()
	h.next.ServeHTTP(w, r)
}

func (h *headerRecorder) snapshot() (auths, protos []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.auths...), append([]string(nil), h.protos...)
}

func TestWithTokenSendsBearerOnEveryCall(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []sdk.Option
	}{
		{"default client", nil},
		{"WithHTTPClient", []sdk.Option{sdk.WithHTTPClient(&http.Client{})}},
		{"gRPC", []sdk.Option{sdk.WithGRPC()}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The first call fails once and is retried: the retry carries
			// the token too.
			rec := &headerRecorder{next: (&ingestServer{fail: failFirst(1, connect.CodeUnavailable)}).handler()}
			srv := httptest.NewUnstartedServer(rec)
			// HTTP/1 for Connect, h2c for gRPC.
			srv.Config.Protocols = new(http.Protocols)
			srv.Config.Protocols.SetHTTP1(true)
			srv.Config.Protocols.SetUnencryptedHTTP2(true)
			srv.Start()
			t.Cleanup(srv.Close)

			c := sdk.New(srv.URL, append(tt.opts, sdk.WithToken("rvk_publisher"), fastRetry())...)
			if _, err := c.Publish(t.Context(), testEvent); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			if _, err := c.PublishBatch(t.Context(), []sdk.Event{testEvent, testEvent}); err != nil {
				t.Fatalf("PublishBatch: %v", err)
			}
			auths, _ := rec.snapshot()
			if len(auths) != 3 {
				t.Fatalf("server saw %d calls, want 3 (one retried publish, one batch)", len(auths))
			}
			for _, a := range auths {
				if a != "Bearer rvk_publisher" {
					t.Fatalf("Authorization headers %q, want Bearer rvk_publisher on every call", auths)
				}
			}
		})
	}
}

func TestWithoutTokenSendsNoAuthorization(t *testing.T) {
	rec := &headerRecorder{next: (&ingestServer{}).handler()}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	if _, err := sdk.New(srv.URL).Publish(t.Context(), testEvent); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if auths, _ := rec.snapshot(); len(auths) != 1 || auths[0] != "" {
		t.Fatalf("Authorization headers %q, want none", auths)
	}
}

// startTLS serves ingest over HTTPS with HTTP/2, and returns the pool that
// trusts its certificate.
func startTLS(t *testing.T, rec *headerRecorder) (*httptest.Server, *x509.CertPool) {
	t.Helper()
	srv := httptest.NewUnstartedServer(rec)
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return srv, pool
}

func TestWithTLSConfigHTTP2(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []sdk.Option
	}{
		{"Connect", nil},
		{"gRPC", []sdk.Option{sdk.WithGRPC()}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := &headerRecorder{next: (&ingestServer{}).handler()}
			srv, pool := startTLS(t, rec)
			cfg := &tls.Config{RootCAs: pool}
			c := sdk.New(srv.URL, append(tt.opts, sdk.WithTLSConfig(cfg), sdk.WithToken("rvk_t"))...)
			if _, err := c.Publish(t.Context(), testEvent); err != nil {
				t.Fatalf("Publish over TLS: %v", err)
			}
			auths, protos := rec.snapshot()
			if len(protos) != 1 || protos[0] != "HTTP/2.0" || auths[0] != "Bearer rvk_t" {
				t.Fatalf("server saw %q with %q, want one HTTP/2.0 call with the token", protos, auths)
			}
			if len(cfg.NextProtos) != 0 {
				t.Fatalf("the caller's tls.Config was changed: NextProtos %q", cfg.NextProtos)
			}
		})
	}
}

func TestTLSWithoutTrustedCAFails(t *testing.T) {
	rec := &headerRecorder{next: (&ingestServer{}).handler()}
	srv, _ := startTLS(t, rec)
	c := sdk.New(srv.URL, sdk.WithRetry(1, 0))
	_, err := c.Publish(t.Context(), testEvent)
	if err == nil {
		t.Fatal("Publish to a server with an untrusted certificate succeeded")
	}
	var certErr x509.UnknownAuthorityError
	if !errors.As(err, &certErr) {
		t.Fatalf("Publish error %v, want an unknown-authority certificate error", err)
	}
	if auths, _ := rec.snapshot(); len(auths) != 0 {
		t.Fatalf("an untrusted server got %d calls", len(auths))
	}
}

// TestWithHTTPClientWinsOverTLSConfig: the caller's client decides TLS; a
// TLS config that would trust the server is not used.
func TestWithHTTPClientWinsOverTLSConfig(t *testing.T) {
	rec := &headerRecorder{next: (&ingestServer{}).handler()}
	srv, pool := startTLS(t, rec)
	c := sdk.New(srv.URL, sdk.WithRetry(1, 0), sdk.WithTLSConfig(&tls.Config{RootCAs: pool}), sdk.WithHTTPClient(&http.Client{}))
	if _, err := c.Publish(t.Context(), testEvent); err == nil {
		t.Fatal("Publish succeeded: WithTLSConfig was used despite WithHTTPClient")
	}
	c = sdk.New(srv.URL, sdk.WithTLSConfig(&tls.Config{}), sdk.WithHTTPClient(srv.Client()))
	if _, err := c.Publish(t.Context(), testEvent); err != nil {
		t.Fatalf("Publish through the server's own client: %v", err)
	}
}
