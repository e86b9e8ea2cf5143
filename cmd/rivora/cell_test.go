package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// A cell process without --cell-token-file refuses to start, naming both
// ways out, unless --insecure; a short token is refused too.
func TestCellTokenRequired(t *testing.T) {
	short := filepath.Join(t.TempDir(), "cell.token")
	if err := os.WriteFile(short, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args     []string
		mentions []string
	}{
		{[]string{"rivora", "controlplane", "--listen", "127.0.0.1:0", "--state-dir", t.TempDir()}, []string{"no cell token", "--cell-token-file", "--insecure", "openssl rand -hex 32"}},
		{[]string{"rivora", "agent", "--name", "a1", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--allow-local-archive"}, []string{"no cell token", "--cell-token-file", "--insecure"}},
		{[]string{"rivora", "agent", "--name", "a1", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--allow-local-archive", "--cell-token-file", short}, []string{"--cell-token-file", "at least 32"}},
		{[]string{"rivora", "controlplane", "--listen", "127.0.0.1:0", "--state-dir", t.TempDir(), "--cell-token-file", short, "--insecure"}, []string{"give one"}},
	} {
		app := newApp()
		app.ExitErrHandler = func(*cli.Context, error) {} // the test reads the exit code
		err := app.Run(tc.args)
		var exit cli.ExitCoder
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("%v: err %v, want a usage error (exit 2)", tc.args[1:], err)
			continue
		}
		for _, m := range tc.mentions {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%v: refusal %q does not mention %q", tc.args[1:], err, m)
			}
		}
	}
}
