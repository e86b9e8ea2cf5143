package cli

import (
	"strings"
	"testing"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// destinations health advises setting rate_per_second to the learned rate
// only while the partner throttles: not while it is parked, nor while it
// fails more than it throttles (a learned 1/s was advised all through a
// partner's 503s and hangs in the operator probe).
func TestLearnedRateAdvisedOnlyWhileThrottling(t *testing.T) {
	f, url := startFake(t)
	f.mu.Lock()
	f.health = map[string]*rivorav1.DestinationHealth{
		"throttling": {DestinationId: "throttling", State: "degraded", LearnedRate: 3, AttemptsLastMinute: 180, ThrottledShare: 0.05},
		"parked":     {DestinationId: "parked", State: "parked", LearnedRate: 3, AttemptsLastMinute: 60, ThrottledShare: 1},
		"failing":    {DestinationId: "failing", State: "degraded", LearnedRate: 3, AttemptsLastMinute: 60, ThrottledShare: 0.1, ServerErrorShare: 0.5, NoAnswerShare: 0.2},
	}
	f.mu.Unlock()
	for _, c := range []struct{ id, want string }{
		{"throttling", "3/s: the partner throttles above this (set rate_per_second to it)"},
		{"parked", "3/s, learned before the partner stopped answering: check it once the partner is back"},
		{"failing", "3/s, learned before the partner failed more than it throttled (5xx, no answer): not a rate to set now"},
	} {
		r := mustSucceed(t, run(t, url, "", "destinations", "health", c.id))
		var row string
		for _, line := range strings.Split(r.stdout, "\n") {
			if rest, ok := strings.CutPrefix(line, "LEARNED RATE"); ok {
				row = strings.TrimSpace(rest)
			}
		}
		if row != c.want {
			t.Errorf("health of %s: LEARNED RATE %q, want %q:\n%s", c.id, row, c.want, r.stdout)
		}
	}
}
