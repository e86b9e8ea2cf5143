package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/rivora/rivora/internal/tlsconf/tlstest"
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
