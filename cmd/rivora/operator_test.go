package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestOperatorFlagsRefused checks that bad operator-notice flags stop
// `rivora controlplane` and `rivora dev` with a usage error naming the
// flag, before anything starts.
func TestOperatorFlagsRefused(t *testing.T) {
	for _, cmd := range []string{"controlplane", "dev"} {
		for _, tc := range []struct {
			args    []string
			mention string
		}{
			{[]string{"--operator-webhook", "ftp://ops"}, "--operator-webhook"},
			{[]string{"--operator-webhook", "http://127.0.0.1:1/ops", "--operator-webhook-secret", "hunter2"}, "--operator-webhook-secret"},
			{[]string{"--operator-webhook-secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, "needs --operator-webhook"},
			{[]string{"--operator-webhook", "http://127.0.0.1:1/ops", "--notify-parked-after", "0s"}, "--notify-parked-after"},
		} {
			args := append([]string{"rivora", cmd, "--state-dir", t.TempDir()}, tc.args...)
			if cmd == "dev" {
				args = append([]string{"rivora", cmd, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, tc.args...)
			}
			app := newApp()
			app.ExitErrHandler = func(*cli.Context, error) {} // the test reads the exit code
			err := app.Run(args)
			var exit cli.ExitCoder
			if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("rivora %s %v: err %v, want a usage error (exit 2) mentioning %q", cmd, tc.args, err, tc.mention)
			}
		}
	}
}
