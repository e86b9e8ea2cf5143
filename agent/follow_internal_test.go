package agent

import (
	"testing"
	"time"

	"github.com/rivora/rivora/internal/backoff"
)

// A Watch refused by a follower that names the leader reconnects to it at
// once (a fixed wait there added seconds to every failover), but a named
// leader that fails too is retried with the backoff, never in a tight
// loop; a Watch that served config starts the backoff over.
func TestReconnectsToANamedLeaderAtOnce(t *testing.T) {
	r := reconnects{retry: backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}}
	steps := []struct {
		name             string
		served, toLeader bool
		want             time.Duration
	}{
		{"leader died", true, false, 100 * time.Millisecond},
		{"no leader yet", false, false, 200 * time.Millisecond},
		{"down", false, false, 400 * time.Millisecond},
		{"follower names the leader", false, true, 0},
		{"named leader is down", false, false, 800 * time.Millisecond},
		{"follower names it again", false, true, 0},
		{"another follower names one, right after a jump", false, true, 1600 * time.Millisecond},
		{"named leader served, then its stream ended", true, false, 100 * time.Millisecond},
		{"long after, a follower names the new leader", true, true, 0},
	}
	for _, s := range steps {
		if got := r.after(s.served, s.toLeader); got != s.want {
			t.Fatalf("%s: wait %v, want %v", s.name, got, s.want)
		}
	}
}
