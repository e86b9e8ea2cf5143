package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/testkit/poll"
)

// TestPartitionOneWayToConsul (scenario 4): the owner of the busiest
// partitions can talk to Consul but never hears back — its renewals
// arrive (Consul keeps its session alive, so its locks stay taken), their
// answers are held. It must stop writing once no renewal was confirmed
// for a TTL, and nobody else may write meanwhile; after the heal a
// confirmed renewal lets it resume. The checker: nothing lost, no lane
// reordered, no overlapping writers.
func TestPartitionOneWayToConsul(t *testing.T) {
	r := startFaultRun(t, faultRunOptions{CPArgs: []string{"--rejoin-delay", "5s"}})
	owners := r.c.waitOwned(t, 30*time.Second, nil)
	victim := r.busiestByLanes(owners)
	parts := partitionsOf(owners, victim)
	r.waitFlowing(t, 500)

	cutAt := time.Now()
	r.net.CutOneWay(victim, "consul")
	t.Logf("%s (owning %v) reaches Consul, Consul's answers to it are held", victim, parts)
	poll.True(t, victim+" stops owning for want of confirmed renewals", clusterTTL+20*time.Second, func() bool {
		return strings.Contains(r.logOf(t, victim, cutAt), "partition ownership lost")
	})
	t.Logf("%s stopped its partitions %s after the cut", victim, time.Since(cutAt).Round(100*time.Millisecond))
	// An observation window: the fault lasts past the session TTL and the
	// lock-delay, so a takeover, if any, happens inside it.
	time.Sleep(clusterTTL + clusterLockDelay)
	t.Logf("owners at the end of the fault: %v", r.c.owners(t))

	healAt := time.Now()
	r.net.Heal()
	t.Logf("healed %s after the cut", healAt.Sub(cutAt).Round(100*time.Millisecond))
	r.c.waitOwned(t, 60*time.Second, nil)
	r.waitFlowing(t, r.delivered()+500)
	r.finish(t, "one way to Consul", cutAt, healAt)
}

// logOf is agent name's log from since on (lines stamped at or after it).
func (r *faultRun) logOf(t *testing.T, name string, since time.Time) string {
	t.Helper()
	b, err := os.ReadFile(r.c.agents[name].LogPath)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for line := range strings.Lines(string(b)) {
		stamp, ok := strings.CutPrefix(line, "time=")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, strings.Fields(stamp)[0])
		if err == nil && !at.Before(since) {
			out.WriteString(line)
		}
	}
	return out.String()
}
