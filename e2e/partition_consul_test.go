package e2e

import (
	"testing"
	"time"
)

// TestPartitionOwnerCutFromConsul (scenario 1): the owner of the busiest
// partitions loses Consul — and only Consul: its NATS peers, the control
// plane and the partners still reach it. Its session expires while it is
// healthy in every other way; it must stop writing before another agent
// takes its partitions, which move on after the lock-delay. After the heal
// it rejoins with a new session. The checker: nothing lost, no lane
// reordered, no overlapping writers.
func TestPartitionOwnerCutFromConsul(t *testing.T) {
	r := startFaultRun(t, faultRunOptions{CPArgs: []string{"--rejoin-delay", "5s"}})
	owners := r.c.waitOwned(t, 30*time.Second, nil)
	victim := r.busiestByLanes(owners)
	parts := partitionsOf(owners, victim)
	r.waitFlowing(t, 500)

	cutAt := time.Now()
	r.net.Cut(victim, "consul")
	t.Logf("cut %s (owning %v) from Consul", victim, parts)
	moved := r.c.waitOwned(t, 2*clusterTTL+clusterLockDelay+30*time.Second, []string{victim})
	t.Logf("its partitions owned by others %s after the cut: %v", time.Since(cutAt).Round(100*time.Millisecond), moved)
	// The cut lasts until the new owners deliver on the moved partitions.
	r.waitDeliveredOn(t, parts, []string{victim}, 200)

	healAt := time.Now()
	r.net.Heal()
	t.Logf("healed %s after the cut", healAt.Sub(cutAt).Round(100*time.Millisecond))
	r.waitRejoined(t, victim, 60*time.Second)
	r.waitFlowing(t, r.delivered()+500)
	r.finish(t, "owner cut from Consul", cutAt, healAt)
}
