package cli

import (
	"strings"
	"testing"
)

// A --since after --until is a usage error naming the flags as typed,
// in every command that takes both, before any request: dlq list
// answered with the API's field names (filter.since, filter.until).
func TestSinceAfterUntilIsAUsageError(t *testing.T) {
	_, url := startFake(t)
	for _, cmd := range [][]string{
		{"dlq", "list"},
		{"dlq", "stats"},
		{"replay", "--destination", "orders", "--dry-run"},
		{"events", "list", "--destination", "orders"},
	} {
		name := strings.Join(cmd, " ")
		r := run(t, url, "", append(cmd, "--since", "1h", "--until", "2h")...)
		assertFailure(t, r, exitUsage, "--since 1h is after --until 2h: durations count back from now, so --since is the longer one (e.g. --since 2h --until 1h)")
		r = run(t, url, "", append(cmd, "--since", "2026-03-02T00:00:00Z", "--until", "2026-03-01T00:00:00Z")...)
		assertFailure(t, r, exitUsage, "--since 2026-03-02T00:00:00Z is after --until 2026-03-01T00:00:00Z: --since starts the range and --until ends it")
		if strings.Contains(r.stderr, "filter.") {
			t.Errorf("%s: the API's field names shown: %q", name, r.stderr)
		}
	}
	// A dead-letter range excludes --until: one that ends where it starts
	// is refused too; events list takes both ends.
	assertFailure(t, run(t, url, "", "dlq", "list", "--since", "3h", "--until", "3h"), exitUsage,
		"rivoractl: --since 3h is the same time as --until 3h: the range is empty (--until itself is left out); give an earlier --since\n")
	// A duration beside a date is told as the time it stands for.
	r := run(t, url, "", "dlq", "list", "--since", "1h", "--until", "2020-01-01T00:00:00Z")
	assertFailure(t, r, exitUsage, "--since 1h (")
	assertFailure(t, r, exitUsage, ") is after --until 2020-01-01T00:00:00Z: --since starts the range and --until ends it\n")
}
