package agent_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/sdk/eventid"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
)

// A key names one event for the whole dedup window, also once its event
// was delivered and the agent restarted: JetStream rebuilds a stream's
// duplicate detection at start from the messages it still holds, so the
// lane store keeps a done event until the window has passed (and only
// then frees its space). The same payload again is answered as the
// original, another is refused naming the original, and neither is
// delivered again.
func TestKeyReusedAfterTheOriginalWasDeliveredAndTheAgentRestarted(t *testing.T) {
	t.Parallel()
	const window = 20 * time.Second // long enough for a restart under load
	p := newPartner(t, func(partner.Request) int { return http.StatusOK })
	dir := t.TempDir()
	start := func() *running {
		return &running{Dev: rig.StartDev(t, dir, rig.Options{Name: agentName, Workers: 8, Agent: func(c *agent.Config) { c.DedupWindow = window }}), t: t}
	}
	ag := start()
	ag.create(destination("orders", p.URL(), 5))
	ctx := context.Background()
	keyed := func(payload string) *rivorav1.PublishRequest {
		return &rivorav1.PublishRequest{
			DestinationId: "orders", CustomerId: "acme", LaneKey: "main", Type: "test.event", Payload: []byte(payload), IdempotencyKey: "order-77",
		}
	}
	first, err := ag.Ingest.Publish(ctx, connect.NewRequest(keyed(`{"v":"first"}`)))
	if err != nil {
		t.Fatal(err)
	}
	storedAt := time.Now()
	id := first.Msg.GetEventId()
	if id != eventid.FromKey("orders", "acme", "order-77") {
		t.Fatalf("event id %s, want the key's", id)
	}
	p.WaitDelivered(t, []string{id}, 15*time.Second)
	reuse := func(ag *running, when string) {
		t.Helper()
		_, err := ag.Ingest.Publish(ctx, connect.NewRequest(keyed(`{"v":"second"}`)))
		if connect.CodeOf(err) != connect.CodeAlreadyExists || !strings.Contains(err.Error(), `idempotency key "order-77" was already used`) || !strings.Contains(err.Error(), id) {
			t.Fatalf("the key again with another payload %s: %v; want already_exists naming event %s", when, err, id)
		}
		if orig, index, ok := sdk.KeyReused(err); !ok || orig != id || index != -1 {
			t.Fatalf("sdk.KeyReused(%v) = %q, %d, %v; want %s, -1, true (the error's ErrorInfo)", err, orig, index, ok, id)
		}
		again, err := ag.Ingest.Publish(ctx, connect.NewRequest(keyed(`{"v":"first"}`)))
		if err != nil || again.Msg.GetEventId() != id || !again.Msg.GetDuplicate() {
			t.Fatalf("the key again with its payload %s: %v, %v; want event %s as a duplicate", when, again, err, id)
		}
	}
	reuse(ag, "after its event was delivered")
	// Once its done record is written, the reclaimer would free its
	// space at once (nothing else is pending) but for the window.
	part := lanes.Partition("orders", 4)
	poll.True(t, "the delivered event's done record in the ledger (or its space freed)", 15*time.Second, func() bool {
		ledger, err := ag.Agent.JetStream().Stream(ctx, lanes.LedgerStream(part))
		if err != nil {
			return false
		}
		_, err = ledger.GetLastMsgForSubject(ctx, lanes.DoneSubject(part))
		return err == nil || lanesHold(t, ag) == 0
	})
	ag.stop()

	ag = start()
	if time.Since(storedAt) >= window {
		t.Fatalf("the restart took %s, longer than the %s window this test needs", time.Since(storedAt), window)
	}
	reuse(ag, "after its event was delivered and the agent restarted")
	// A later event of the lane is delivered, and the keyed one was not
	// sent again.
	next := ag.publish("orders", "acme", "main")
	p.WaitDelivered(t, []string{next}, 15*time.Second)
	if n := p.Sent(id); n != 1 {
		t.Fatalf("event %s sent %d times, want once", id, n)
	}
	// Once the window has passed, the lane store lets both go.
	poll.True(t, "the lane store emptied once the window passed", window+30*time.Second, func() bool {
		return lanesHold(t, ag) == 0
	})
}

// lanesHold is how many messages every partition's lane store holds.
func lanesHold(t *testing.T, ag *running) uint64 {
	t.Helper()
	ctx := context.Background()
	var n uint64
	streams := ag.Agent.JetStream().ListStreams(ctx)
	for info := range streams.Info() {
		if strings.HasPrefix(info.Config.Name, "LANES_") {
			n += info.State.Msgs
		}
	}
	if err := streams.Err(); err != nil {
		t.Fatalf("list streams: %v", err)
	}
	return n
}

// At the partition's owner (a batch goes straight into its lanes), a
// batch reusing a stored key for another payload is refused and stores
// nothing: its other event is accepted alone afterwards, as new.
func TestKeyReusedInABatchAtTheOwnerStoresNothing(t *testing.T) {
	t.Parallel()
	p := newPartner(t, func(partner.Request) int { return http.StatusOK })
	ag := startAgent(t, t.TempDir())
	ag.create(destination("orders", p.URL(), 5))
	ctx := context.Background()
	keyed := func(key, payload string) *rivorav1.PublishRequest {
		return &rivorav1.PublishRequest{
			DestinationId: "orders", CustomerId: "acme", LaneKey: "main", Type: "test.event", Payload: []byte(payload), IdempotencyKey: key,
		}
	}
	first, err := ag.Ingest.Publish(ctx, connect.NewRequest(keyed("order-1", `{"v":1}`)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = ag.Ingest.PublishBatch(ctx, connect.NewRequest(&rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{
		keyed("order-2", `{"v":2}`), keyed("order-1", `{"v":"other"}`),
	}}))
	if connect.CodeOf(err) != connect.CodeAlreadyExists || !strings.Contains(err.Error(), "events[1]") || !strings.Contains(err.Error(), "nothing in this batch was stored") || !strings.Contains(err.Error(), first.Msg.GetEventId()) {
		t.Fatalf("a batch reusing order-1 for another payload: %v; want already_exists for events[1], naming %s", err, first.Msg.GetEventId())
	}
	if orig, index, ok := sdk.KeyReused(err); !ok || orig != first.Msg.GetEventId() || index != 1 {
		t.Fatalf("sdk.KeyReused(%v) = %q, %d, %v; want %s, 1, true", err, orig, index, ok, first.Msg.GetEventId())
	}
	alone, err := ag.Ingest.Publish(ctx, connect.NewRequest(keyed("order-2", `{"v":2}`)))
	if err != nil || alone.Msg.GetDuplicate() {
		t.Fatalf("the refused batch's other event alone: %v, %v; want stored as new", alone, err)
	}
	p.WaitDelivered(t, []string{first.Msg.GetEventId(), alone.Msg.GetEventId()}, 15*time.Second)
}
