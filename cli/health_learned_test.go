package cli

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

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

// DRAIN TIME says what it counts: the delivered share of the rate, the
// arrivals taken off it, and never with nothing delivered (a partner
// answering 503 to every attempt read "12s").
func TestDrainTimeRow(t *testing.T) {
	f, url := startFake(t)
	young, old := durationpb.New(20*time.Second), durationpb.New(5*time.Minute)
	f.mu.Lock()
	f.health = map[string]*rivorav1.DestinationHealth{
		"failing": {DestinationId: "failing", State: "degraded", CurrentRate: 0.5, PendingEvents: 5, AttemptsLastMinute: 30, ServerErrorShare: 1, OldestPendingAge: young},
		"burst":   {DestinationId: "burst", State: "healthy", CurrentRate: 5, PendingEvents: 45, ArrivalsLastMinute: 150, OldestPendingAge: young, DrainTime: durationpb.New(18 * time.Second)},
		"stream":  {DestinationId: "stream", State: "healthy", CurrentRate: 5, PendingEvents: 20, ArrivalsLastMinute: 180, OldestPendingAge: old, DrainTime: durationpb.New(10 * time.Second)},
		"growing": {DestinationId: "growing", State: "healthy", CurrentRate: 5, PendingEvents: 1900, ArrivalsLastMinute: 450, OldestPendingAge: old},
		"half":    {DestinationId: "half", State: "degraded", CurrentRate: 4, PendingEvents: 20, AttemptsLastMinute: 10, ThrottledShare: 0.5, OldestPendingAge: young, DrainTime: durationpb.New(10 * time.Second)},
	}
	f.mu.Unlock()
	for _, c := range []struct{ id, want string }{
		{"failing", "never at this rate (none of the last minute's 30 attempts was delivered: 0% 429, 100% 5xx, 0% other 4xx, 0% no answer)"},
		{"burst", "18s at the current rate, less the 2.5/s arriving"},
		{"stream", "10s at the current rate, less the 3/s arriving"},
		{"growing", "never at this rate (events arrive at 7.5/s, no slower than it delivers: the backlog grows)"},
		{"half", "10s at the current rate, 50% of it delivered"},
	} {
		r := mustSucceed(t, run(t, url, "", "destinations", "health", c.id))
		var row string
		for _, line := range strings.Split(r.stdout, "\n") {
			if rest, ok := strings.CutPrefix(line, "DRAIN TIME"); ok {
				row = strings.TrimSpace(rest)
			}
		}
		if row != c.want {
			t.Errorf("health of %s: DRAIN TIME %q, want %q:\n%s", c.id, row, c.want, r.stdout)
		}
	}
}
