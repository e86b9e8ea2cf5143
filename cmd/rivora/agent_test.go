package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestAgentRefusesLocalArchive: `rivora agent` without --s3-endpoint stops
// with a usage error saying why (in a cell each agent would keep its own
// dead letters) and what to give instead, before anything starts.
func TestAgentRefusesLocalArchive(t *testing.T) {
	app := newApp()
	app.ExitErrHandler = func(*cli.Context, error) {} // the test reads the exit code
	err := app.Run([]string{"rivora", "agent", "--name", "a1", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--controlplane", "http://127.0.0.1:1"})
	var exit cli.ExitCoder
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("rivora agent without --s3-endpoint: err %v, want a usage error (exit 2)", err)
	}
	for _, want := range []string{"no dead-letter archive", "--s3-endpoint", "--allow-local-archive", "single-agent", "invisible to the other agents"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not mention %q", err, want)
		}
	}
}
