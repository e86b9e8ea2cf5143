package edged_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rivora/rivora/edge/edged"
	"github.com/rivora/rivora/testkit/poll"
)

// storeCounter reads one of the store's group-commit counters.
func storeCounter(t *testing.T, name string) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not exported", name)
	return 0
}

// An edge with --fsync answers each publish after a sync of its store
// begun after the write, concurrent publishes sharing syncs, and buffers
// every event it acknowledged.
func TestEdgeFsyncAnswersAfterASharedSync(t *testing.T) {
	_, cpServer := startControlPlane(t)
	e := startEdge(t, edged.Config{
		Name: "edge-fsync", DataDir: t.TempDir(), CellLeaf: []string{"nats-leaf://" + freeAddr(t)}, ControlPlanes: []string{cpServer.URL},
		SyncAlways: true,
	})
	poll.True(t, "the edge applied the control plane's config", 10*time.Second, func() bool { return e.Healthy() == nil })
	syncs0, commits0 := storeCounter(t, "rivora_store_syncs_total"), storeCounter(t, "rivora_store_sync_commits_total")
	const publishers = 32
	errs := make(chan error, publishers)
	var wg sync.WaitGroup
	for i := range publishers {
		wg.Go(func() {
			_, err := e.publish(publisherToken, fmt.Sprintf("user-%d", i), []byte(`{}`))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("publish at an edge with --fsync: %v", err)
		}
	}
	syncs, commits := storeCounter(t, "rivora_store_syncs_total")-syncs0, storeCounter(t, "rivora_store_sync_commits_total")-commits0
	if commits != publishers || syncs < 1 || syncs >= commits {
		t.Fatalf("%d publishes: %.0f barriers answered by %.0f syncs; want one barrier each, answered by fewer syncs", publishers, commits, syncs)
	}
	poll.True(t, "the buffer holds every acknowledged event", 5*time.Second, func() bool {
		return e.Status().Buffer.Events == publishers
	})
}
