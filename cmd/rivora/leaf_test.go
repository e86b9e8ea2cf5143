package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// rivora dev --leaf-listen needs a cell token edges can derive their
// credential from; a bad --cell-token-file is refused too; both before
// anything starts.
func TestDevLeafListenNeedsACellToken(t *testing.T) {
	short := filepath.Join(t.TempDir(), "short.token")
	if err := os.WriteFile(short, []byte("too-short"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args    []string
		mention string
	}{
		{[]string{"--leaf-listen", "127.0.0.1:0"}, "--leaf-listen needs --cell-token-file"},
		{[]string{"--leaf-listen", "127.0.0.1:0", "--cell-token-file", short}, "--cell-token-file"},
		{[]string{"--cell-token-file", filepath.Join(t.TempDir(), "missing")}, "--cell-token-file"},
	} {
		args := append([]string{"rivora", "dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
		app := newApp()
		app.ExitErrHandler = func(*cli.Context, error) {}
		err := app.Run(args)
		var exit cli.ExitCoder
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("rivora dev %v: err %v, want a usage error (exit 2) mentioning %q", tc.args, err, tc.mention)
		}
	}
}
