package cli

import (
	"testing"
)

// An explicit 0 for a limit flag is refused with the flag's range, on
// create and on update, before any request: create replaced it by the
// default silently, update dropped it (or answered "nothing to
// update"). Left out, a flag still inherits.
func TestZeroLimitFlagsAreRefused(t *testing.T) {
	f, url := startFake(t)
	want := map[string]string{
		"--rate":          "--rate 0: want a number of events per second at least 0.001",
		"--burst":         "--burst 0: want a whole number from 1 to",
		"--max-attempts":  "--max-attempts 0: want a whole number from 1 to",
		"--max-in-flight": "--max-in-flight 0: want a whole number from 1 to",
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
