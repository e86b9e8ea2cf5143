package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestNonPositiveSettingsAreRefused: a count or window of zero or below
// is a usage error naming the flag, not the default in disguise (further
// in, 0 reads as "unset").
func TestNonPositiveSettingsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		flag, value string
	}{
		{"--partitions", "0"},
		{"--partitions", "-1"},
		{"--workers", "-5"},
		{"--workers", "0"},
		{"--dedup-window", "-1s"},
		{"--dedup-window", "0s"},
	} {
		app := newApp()
		app.ExitErrHandler = func(*cli.Context, error) {} // the test reads the exit code
		err := app.Run([]string{"rivora", "dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", tc.flag, tc.value})
		var exit cli.ExitCoder
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("rivora dev %s %s: err %v, want a usage error (exit 2)", tc.flag, tc.value, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("rivora dev %s %s: %q does not name the flag", tc.flag, tc.value, err)
		}
	}
}
