package e2e

import (
	"testing"
	"time"
)

// TestPartitionIsolatedOwner (scenario 6): the agent holding the most
// partitions is cut from everything in the cell — Consul, its NATS peers,
// the control plane, MinIO — for longer than its session TTL; its
// partitions move to the others. Then the network heals: it must not
// deliver one event for a partition it no longer owns (the checker's
// overlapping writers and stale deliveries), and nothing is lost or
// reordered. The partners stay reachable from it, so any such delivery
// would be seen.
func TestPartitionIsolatedOwner(t *testing.T) {
	r := startFaultRun(t, faultRunOptions{CPArgs: []string{"--rejoin-delay", "5s"}})
	owners := r.c.waitOwned(t, 30*time.Second, nil)
	victim := busiest(owners)
	parts := partitionsOf(owners, victim)
	r.waitFlowing(t, 500)

	cutAt := time.Now()
	r.net.Isolate(victim)
	t.Logf("isolated %s (owning %v)", victim, parts)
	moved := r.c.waitOwned(t, 2*clusterTTL+clusterLockDelay+30*time.Second, []string{victim})
	t.Logf("its partitions owned by others %s after the cut: %v", time.Since(cutAt).Round(100*time.Millisecond), moved)
	r.waitDeliveredOn(t, parts, []string{victim}, 200)

	healAt := time.Now()
	r.net.Heal()
	t.Logf("healed %s after the cut (session TTL %s)", healAt.Sub(cutAt).Round(100*time.Millisecond), clusterTTL)
	r.waitRejoined(t, victim, 60*time.Second)
	r.waitFlowing(t, r.delivered()+500)
	v := r.finish(t, "isolated owner", cutAt, healAt)
	if v.OverlappingWriters != 0 || v.StaleDeliveries != 0 {
		t.Errorf("%s delivered for partitions it no longer owned", victim)
	}
}
