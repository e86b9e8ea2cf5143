package agent_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rivora/rivora/agent"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
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

// With --fsync every Publish is answered after a sync of the store that
// began after its write, concurrent publishes share syncs, and the events
// are delivered (and a dead letter archived) as without it.
func TestFsyncAnswersAfterASharedSync(t *testing.T) {
	var mu sync.Mutex
	var deadID string
	p := partner.New(t, partner.Options{Secret: secret, Answer: func(r partner.Request) int {
		mu.Lock()
		defer mu.Unlock()
		if r.ID == deadID {
			return 400
		}
		return 200
	}})
	ag := &running{Dev: rig.StartDev(t, t.TempDir(), rig.Options{Name: agentName, Workers: 8, Agent: func(c *agent.Config) { c.SyncAlways = true }}), t: t}
	ag.create(destination("durable", p.URL(), 1))
	mu.Lock()
	deadID = ag.publish("durable", "acme", "dead")
	mu.Unlock()

	syncs0, commits0 := storeCounter(t, "rivora_store_syncs_total"), storeCounter(t, "rivora_store_sync_commits_total")
	const publishers = 64
	ids := make([]string, publishers)
	errs := make(chan error, publishers)
	var wg sync.WaitGroup
	for i := range publishers {
		wg.Go(func() {
			resp, err := ag.Ingest.Publish(context.Background(), connect.NewRequest(&rivorav1.PublishRequest{
				DestinationId: "durable", CustomerId: "acme", LaneKey: fmt.Sprintf("u%d", i%8), Type: "test.event",
				Payload: fmt.Appendf(nil, `{"n":%d}`, i), IdempotencyKey: fmt.Sprintf("key-%d", i),
			}))
			if err != nil {
				errs <- err
				return
			}
			ids[i] = resp.Msg.GetEventId()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("publish with --fsync: %v", err)
	}
	syncs, commits := storeCounter(t, "rivora_store_syncs_total")-syncs0, storeCounter(t, "rivora_store_sync_commits_total")-commits0
	if commits < publishers || syncs < 1 || syncs >= commits {
		t.Fatalf("%d publishes: %.0f barriers answered by %.0f syncs; want every publish's barrier answered, by fewer syncs", publishers, commits, syncs)
	}
	t.Logf("%d publishes: %.0f barriers, %.0f syncs", publishers, commits, syncs)

	poll.True(t, "every event delivered", 15*time.Second, func() bool {
		for _, id := range ids {
			if p.Sent(id) == 0 {
				return false
			}
		}
		return true
	})
	poll.True(t, "the dead letter archived", 15*time.Second, func() bool {
		_, letters := deadLetters(t, ag.Dir, "durable")
		return len(letters) == 1 && letters[0].GetEvent().GetEventId() == deadID
	})
}
