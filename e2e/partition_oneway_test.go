package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/lanes"
	"github.com/rivora/rivora/testkit/poll"
)

// TestPartitionOneWayToConsul (scenario 4): the owner of the busiest
// partitions can talk to Consul but never hears back — its renewals
// arrive, their answers are held. It must stop writing once no renewal
// was confirmed for a TTL, and then let its session end at Consul (it
// asks Consul to destroy it; the request arrives though the answer does
// not), so that its partitions move to the others after the lock-delay
// while the cut lasts instead of stalling until the heal. After the heal
// it learns its session is gone and rejoins with a new one. The checker:
// nothing lost, no lane reordered, no overlapping writers.
func TestPartitionOneWayToConsul(t *testing.T) {
	r := startFaultRun(t, faultRunOptions{CPArgs: []string{"--rejoin-delay", "5s"}})
	owners := r.c.waitOwned(t, 30*time.Second, nil)
	victim := r.busiestByLanes(owners)
	parts := partitionsOf(owners, victim)
	oldSession := r.sessionOf(t, victim)
	r.waitFlowing(t, 500)

	cutAt := time.Now()
	r.net.CutOneWay(victim, "consul")
	t.Logf("%s (owning %v) reaches Consul, Consul's answers to it are held", victim, parts)
	poll.True(t, victim+" stops owning for want of confirmed renewals", clusterTTL+20*time.Second, func() bool {
		return strings.Contains(r.logOf(t, victim, cutAt), "partition ownership lost")
	})
	t.Logf("%s stopped its partitions %s after the cut", victim, time.Since(cutAt).Round(100*time.Millisecond))

	// While the cut lasts: its partitions are owned and delivered by the
	// others. The bound: the TTL (the victim fences itself and asks
	// Consul to end its session), the lock-delay, then the control
	// plane's reassignment, the new owners' lock retries and opens.
	moved := r.c.waitOwned(t, clusterTTL+clusterLockDelay+40*time.Second, []string{victim})
	t.Logf("its partitions owned by others %s after the cut: %v", time.Since(cutAt).Round(100*time.Millisecond), moved)
	busy := r.deliveringPartitions(parts)
	if len(busy) == 0 {
		t.Fatalf("none of %s's partitions %v has a destination that answers 2xx", victim, parts)
	}
	firsts := r.waitFirstDeliveredElsewhere(t, busy, victim, cutAt, 60*time.Second)
	stall := time.Duration(0)
	var each []string
	for _, p := range busy {
		stall = max(stall, firsts[p].Sub(cutAt))
		each = append(each, fmt.Sprintf("%d: %s", p, firsts[p].Sub(cutAt).Round(100*time.Millisecond)))
	}
	t.Logf("MEASURED stall: each of %v (those of %v with destinations that answer 2xx) delivered by another agent %s after the cut (%s)",
		busy, parts, stall.Round(100*time.Millisecond), strings.Join(each, ", "))
	if bound := clusterTTL + clusterLockDelay + 10*time.Second; stall > bound {
		t.Errorf("partitions stalled %s after the one-way cut, want within %s (TTL + lock-delay + 10 s)", stall.Round(100*time.Millisecond), bound)
	}
	if stall < clusterTTL {
		t.Errorf("partitions delivered elsewhere %s after the cut, before the victim's TTL %s ran out: two writers?", stall, clusterTTL)
	}

	healAt := time.Now()
	r.net.Heal()
	t.Logf("healed %s after the cut", healAt.Sub(cutAt).Round(100*time.Millisecond))
	r.waitRejoined(t, victim, 60*time.Second)
	if s := r.sessionOf(t, victim); s == oldSession {
		t.Errorf("%s owns partitions again with its old session %s, which it asked Consul to end", victim, s)
	}
	t.Logf("%s owns partitions again, with a new session, %s after the heal", victim, time.Since(healAt).Round(100*time.Millisecond))
	r.c.waitOwned(t, 60*time.Second, nil)
	r.waitFlowing(t, r.delivered()+500)
	r.finish(t, "one way to Consul", cutAt, healAt)

	// From the agents' logs: the victim took no partition while cut.
	h := r.history(t, r.traffic.Acked(), nil, nil)
	for _, tm := range h.Terms {
		if tm.Agent == victim && tm.From.After(cutAt) && tm.From.Before(healAt) {
			t.Errorf("%s took partition %d at %s while its answers from Consul were held", victim, tm.Partition, tm.From.Format("15:04:05.000"))
		}
	}
}

// sessionOf is agent name's Consul session as the control plane lists it.
func (r *faultRun) sessionOf(t *testing.T, name string) string {
	t.Helper()
	for _, a := range r.c.agentsList(t) {
		if a.Name == name {
			return a.Session
		}
	}
	t.Fatalf("agent %s not listed", name)
	return ""
}

// deliveringPartitions are those of parts that some destination of the
// load, other than the one failing everything, maps to.
func (r *faultRun) deliveringPartitions(parts []uint32) []uint32 {
	var out []uint32
	for _, p := range parts {
		for dest := range r.partners {
			if dest != r.expiring && uint32(lanes.Partition(dest, r.c.partitions)) == p {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// waitFirstDeliveredElsewhere waits until every partition in parts had a
// 2xx delivery by an agent other than exclude since from, and returns the
// first such delivery's time per partition.
func (r *faultRun) waitFirstDeliveredElsewhere(t *testing.T, parts []uint32, exclude string, from time.Time, timeout time.Duration) map[uint32]time.Time {
	t.Helper()
	var firsts map[uint32]time.Time
	poll.True(t, fmt.Sprintf("a delivery on each of %v by an agent other than %s", parts, exclude), timeout, func() bool {
		firsts = map[uint32]time.Time{}
		for dest, p := range r.partners {
			part := uint32(lanes.Partition(dest, r.c.partitions))
			for _, rq := range p.Requests() {
				if rq.At.After(from) && rq.Status/100 == 2 && rq.Agent != exclude && (firsts[part].IsZero() || rq.At.Before(firsts[part])) {
					firsts[part] = rq.At
				}
			}
		}
		for _, p := range parts {
			if firsts[p].IsZero() {
				return false
			}
		}
		return true
	})
	return firsts
}

// logOf is agent name's log from since on (lines stamped at or after it).
func (r *faultRun) logOf(t *testing.T, name string, since time.Time) string {
	t.Helper()
	return logSince(t, r.c.agents[name].LogPath, since)
}

// logSince is the log at path from since on (lines stamped at or after
// it).
func logSince(t *testing.T, path string, since time.Time) string {
	t.Helper()
	b, err := os.ReadFile(path)
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
