package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/tlsconf"
	"github.com/rivora/rivora/internal/tlsconf/tlstest"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// servingOf loads the --tls-* files as the commands do.
func servingOf(t *testing.T, files tlsconf.Files) TLS {
	t.Helper()
	srv, err := LoadTLS(files)
	if err != nil {
		t.Fatalf("LoadTLS %+v: %v", files, err)
	}
	return srv
}

// TestServeTLS serves the control plane's API with a certificate for
// 127.0.0.1, as `rivora controlplane --tls-cert --tls-key` does, and
// calls it as the internal clients do (--tls-ca): /healthz and an RPC
// answer over HTTP/2 (Connect and gRPC) and over HTTP/1.1 (JSON).
func TestServeTLS(t *testing.T) {
	ca, cert, key := tlstest.Write(t, t.TempDir())
	srv := servingOf(t, tlsconf.Files{Cert: cert, Key: key, CA: ca})
	log := slog.New(slog.DiscardHandler)
	ln, url, err := listen(log, "127.0.0.1:0", srv.Server)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(url, "https://127.0.0.1:") {
		t.Fatalf("url %q, want https://127.0.0.1:PORT", url)
	}
	cp, _, adminToken := newControlPlane(t, log)
	bearer := connect.WithInterceptors(auth.Bearer(strings.TrimSpace(string(adminToken))))
	mux := baseMux(func() error { return nil }, false, "")
	cp.Handle(mux)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serveUntil(ctx, log, newServer(mux), ln, cp.Run) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})

	h2 := &http.Client{Transport: srv.Transport}
	resp, err := h2.Get(url + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz over TLS: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Errorf("GET /healthz: %s %q over %s, want 200 over HTTP/2", resp.Status, body, resp.Proto)
	}
	answered := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v, want an answer from the control plane", what, err)
		}
	}
	for name, opts := range map[string][]connect.ClientOption{"connect": {bearer}, "grpc": {bearer, connect.WithGRPC()}} {
		client := rivorav1connect.NewAdminServiceClient(h2, url, opts...)
		_, err := client.ListDestinations(context.Background(), connect.NewRequest(&rivorav1.ListDestinationsRequest{}))
		answered(name+" ListDestinations over HTTP/2", err)
	}

	// A JSON client over HTTP/1.1.
	roots, err := tlsconf.Pool(ca)
	if err != nil {
		t.Fatal(err)
	}
	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	req, err := http.NewRequest(http.MethodPost, url+rivorav1connect.AdminServiceListDestinationsProcedure, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(adminToken)))
	resp, err = h1.Do(req)
	if err != nil {
		t.Fatalf("POST JSON over HTTP/1.1: %v", err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 1 || resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), "{") {
		t.Errorf("POST JSON ListDestinations: %s %q over %s, want 200 with a JSON answer over HTTP/1.1", resp.Status, body, resp.Proto)
	}

	// Plain HTTP gets nothing from a TLS listener.
	if resp, err := http.Get("http://" + strings.TrimPrefix(url, "https://") + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain http:// /healthz on the TLS listener: %s, want it refused", resp.Status)
		}
	}
}

func TestWarnPlainText(t *testing.T) {
	for _, tc := range []struct {
		ip   net.IP
		warn bool
	}{
		{net.IPv4(127, 0, 0, 1), false},
		{net.IPv6loopback, false},
		{net.IPv4zero, true},
		{net.IPv6zero, true},
		{net.IPv4(10, 0, 0, 5), true},
	} {
		var out bytes.Buffer
		warnPlainText(slog.New(slog.NewTextHandler(&out, nil)), &net.TCPAddr{IP: tc.ip, Port: 7300})
		warned := strings.Contains(out.String(), "level=WARN") && strings.Contains(out.String(), "tokens included")
		if warned != tc.warn {
			t.Errorf("plain HTTP on %s: log %q, want a warning: %v", tc.ip, out.String(), tc.warn)
		}
	}
}
