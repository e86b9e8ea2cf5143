package cli

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rivora/rivora/controlplane"
)

// An explicit 0 for a limit flag is refused with the flag's range, on
// create and on update, before any request: create replaced it by the
// default silently, update dropped it (or answered "nothing to
// update"). Left out, a flag still inherits.
func TestZeroLimitFlagsAreRefused(t *testing.T) {
	f, url := startFake(t)
	want := map[string]string{
		"--rate":          "--rate 0: want a number of events per second at least 0.001",
		"--burst":         "--burst 0: want a whole number from 1 to 1000000",
		"--max-attempts":  "--max-attempts 0: want a whole number from 1 to 10000",
		"--max-in-flight": "--max-in-flight 0: want a whole number from 1 to 10000",
	}
	for flag, msg := range want {
		assertFailure(t, run(t, url, "", "destinations", "create", "d6", "--url", "https://example.com/h", flag, "0"), exitUsage, msg)
		assertFailure(t, run(t, url, "", "destinations", "update", "d2", flag, "0"), exitUsage, msg)
	}
	assertFailure(t, run(t, url, "", "destinations", "update", "d2", "--rate", "10", "--max-attempts", "0"), exitUsage, want["--max-attempts"])
	if len(f.creates) != 0 || len(f.updates) != 0 {
		t.Fatalf("a 0 limit reached the server: creates %v, updates %v", f.creates, f.updates)
	}
	mustSucceed(t, run(t, url, "", "destinations", "create", "d6", "--url", "https://example.com/h", "--max-attempts", "3"))
	if l := f.creates[0].GetLimits(); l.GetMaxAttempts() != 3 || l.GetBurst() != 0 || l.GetRatePerSecond() != 0 {
		t.Fatalf("create --max-attempts 3 sent limits %v, want only max_attempts 3 (the rest inherited)", l)
	}
}

// rivoractl checks a whole-number limit against the server's bounds, and
// says them: --max-attempts 10001 was let through up to 2147483647.
func TestCountFlagsUseTheServersBounds(t *testing.T) {
	f, url := startFake(t)
	for flag, most := range map[string]int{"burst": controlplane.MaxBurst, "max-attempts": controlplane.MaxAttemptsLimit, "max-in-flight": controlplane.MaxInFlightLimit} {
		if countMax[flag] != most {
			t.Errorf("--%s: rivoractl's bound %d, the control plane's %d", flag, countMax[flag], most)
		}
		over := fmt.Sprint(most + 1)
		assertFailure(t, run(t, url, "", "destinations", "create", "d6", "--url", "https://example.com/h", "--"+flag, over), exitUsage, fmt.Sprintf("--%s %s: want a whole number from 1 to %d", flag, over, most))
		for _, cmd := range [][]string{{"destinations", "create"}, {"destinations", "update"}} {
			help := mustSucceed(t, run(t, url, "", append(cmd, "--help")...)).stdout
			if line := flagHelpLine(help, flag); !strings.Contains(line, fmt.Sprintf("1 to %d", most)) {
				t.Errorf("%s --help says of --%s %q: want its range 1 to %d", strings.Join(cmd, " "), flag, line, most)
			}
		}
	}
	if len(f.creates) != 0 {
		t.Fatalf("an out-of-range limit reached the server: %v", f.creates)
	}
}

// flagHelpLine is the line of a --help text that describes --flag.
func flagHelpLine(help, flag string) string {
	for _, line := range strings.Split(help, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line)+" ", "--"+flag+" ") {
			return line
		}
	}
	return ""
}
