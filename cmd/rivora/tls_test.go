package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/urfave/cli/v2"

	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/tlsconf"
	"github.com/rivora/rivora/internal/tlsconf/tlstest"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// TestTLSFlagsRefused: a certificate without its key (or the reverse), or
// a file that is not what its flag says, stops each server command with a
// usage error naming the flag, before anything starts.
func TestTLSFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	_, cert, key := tlstest.Write(t, dir)
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := map[string][]string{
		"controlplane": {"--listen", "127.0.0.1:0", "--state-dir", t.TempDir(), "--insecure"},
		"agent":        {"--name", "a1", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--allow-local-archive", "--insecure"},
		"dev":          {"--listen", "127.0.0.1:0", "--data-dir", t.TempDir()},
	}
	for cmd, args := range base {
		for _, tc := range []struct {
			args    []string
			mention string
		}{
			{[]string{"--tls-cert", cert}, "--tls-cert needs --tls-key"},
			{[]string{"--tls-key", key}, "--tls-key needs --tls-cert"},
			{[]string{"--tls-cert", garbage, "--tls-key", key}, garbage},
			{[]string{"--tls-cert", cert, "--tls-key", filepath.Join(dir, "missing.pem")}, "--tls-key"},
			{[]string{"--tls-cert", cert, "--tls-key", key, "--tls-ca", garbage}, "--tls-ca"},
		} {
			app := newApp()
			app.ExitErrHandler = func(*cli.Context, error) {} // the test reads the exit code
			err := app.Run(append(append([]string{"rivora", cmd}, args...), tc.args...))
			var exit cli.ExitCoder
			if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("rivora %s %v: err %v, want a usage error (exit 2) mentioning %q", cmd, tc.args, err, tc.mention)
			}
		}
	}
	app := newApp()
	app.ExitErrHandler = func(*cli.Context, error) {}
	err := app.Run(append([]string{"rivora", "agent", "--tls-cert", cert, "--tls-key", key, "--nats-cluster", "127.0.0.1:0"}, base["agent"]...))
	if err == nil || !strings.Contains(err.Error(), "needs --tls-ca") {
		t.Errorf("rivora agent --tls-cert --nats-cluster without --tls-ca: err %v, want one asking for --tls-ca", err)
	}
}

// servingOf runs the --tls-* flags through servingFlags.
func servingOf(t *testing.T, args ...string) serving {
	t.Helper()
	var srv serving
	app := &cli.App{Flags: tlsFlags(), Action: func(c *cli.Context) (err error) {
		srv, err = servingFlags(c)
		return err
	}}
	if err := app.Run(append([]string{"test"}, args...)); err != nil {
		t.Fatalf("servingFlags %v: %v", args, err)
	}
	return srv
}

// TestServeTLS serves the control plane's API with a certificate for
// 127.0.0.1, as `rivora controlplane --tls-cert --tls-key` does, and
// calls it as the internal clients do (--tls-ca): /healthz and an RPC
// answer over HTTP/2 (Connect and gRPC) and over HTTP/1.1 (JSON).
func TestServeTLS(t *testing.T) {
	ca, cert, key := tlstest.Write(t, t.TempDir())
	srv := servingOf(t, "--tls-cert", cert, "--tls-key", key, "--tls-ca", ca)
	log := slog.New(slog.DiscardHandler)
	ln, url, err := listen(log, "127.0.0.1:0", srv.tls)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(url, "https://127.0.0.1:") {
		t.Fatalf("url %q, want https://127.0.0.1:PORT", url)
	}
	cell, err := auth.NewCellToken()
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	cp, err := controlplane.New(controlplane.Config{StateDir: state, Keys: auth.NewKeys(cell), AdminTokenPath: filepath.Join(state, "admin.token")}, log)
	if err != nil {
		t.Fatal(err)
	}
	adminToken, err := os.ReadFile(filepath.Join(state, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
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

	h2 := &http.Client{Transport: srv.transport}
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
