package ingest_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/subscriptions"
	"github.com/rivora/rivora/edge"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/eventid"
)

// copyOf is an edge's copy of an event: its id, destination and
// subscription, customer acme, lane user-42, type t and payload.
func copyOf(id, dest, sub, payload string) *rivorav1.Event {
	return &rivorav1.Event{
		EventId: id, DestinationId: dest, SubscriptionId: sub, CustomerId: "acme", LaneKey: "user-42", Type: "t",
		Payload: []byte(payload), ContentType: "application/json", AcceptedAt: timestamppb.Now(),
	}
}

// The cell's idempotency rule for edges' copies: a direct copy is held to
// (and else records) the record under its event id; a fan-out's or test
// event's delivery is held to its publish's record when its key came with
// it; anything without a record, or a key the cell cannot find, is
// stored.
func TestCheckForwarded(t *testing.T) {
	f := newFixture(t)
	f.withSubscriptions(t, &rivorav1.Subscription{Id: "sub_a", CustomerId: "acme", DestinationId: "orders", Types: []string{"*"}})
	ctx := context.Background()
	publish := func(req *rivorav1.PublishRequest) *rivorav1.PublishResponse {
		t.Helper()
		resp, err := f.gw.Publish(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg
	}
	keyed := func(dest, key, payload string) *rivorav1.PublishRequest {
		return &rivorav1.PublishRequest{DestinationId: dest, CustomerId: "acme", LaneKey: "user-42", Type: "t", Payload: []byte(payload), IdempotencyKey: key}
	}
	direct := publish(keyed("orders", "d-1", `{"v":1}`)).GetEventId()
	fan := publish(keyed("", "f-1", `{"v":1}`)).GetRoutes()[0].GetEventId()
	test := keyed("", "t-1", `{"v":1}`)
	test.SubscriptionId = "sub_a"
	tested := publish(test).GetRoutes()[0].GetEventId()
	fresh := eventid.FromKey("orders", "acme", "new-1")

	check, err := ingest.NewForwardedCheck(ctx, f.srv.JetStream(), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		fw       edge.Forwarded
		conflict bool
	}{
		{"direct, same content", edge.Forwarded{Event: copyOf(direct, "orders", "", `{"v":1}`), Edge: "e1", Key: "d-1"}, false},
		{"direct, other payload", edge.Forwarded{Event: copyOf(direct, "orders", "", `{"v":2}`), Edge: "e1", Key: "d-1"}, true},
		{"direct, other payload, key not sent", edge.Forwarded{Event: copyOf(direct, "orders", "", `{"v":2}`), Edge: "e1"}, true},
		{"direct, a key the cell has not seen", edge.Forwarded{Event: copyOf(fresh, "orders", "", `{"v":1}`), Edge: "e1", Key: "new-1"}, false},
		{"direct, the same key again from another edge with other content", edge.Forwarded{Event: copyOf(fresh, "orders", "", `{"v":9}`), Edge: "e2", Key: "new-1"}, true},
		{"direct, no key", edge.Forwarded{Event: copyOf(uuid.NewString(), "orders", "", `{"v":1}`), Edge: "e1"}, false},
		{"fan-out, same publish", edge.Forwarded{Event: copyOf(fan, "orders", "sub_a", `{"v":1}`), Edge: "e1", Key: "f-1"}, false},
		{"fan-out, other payload", edge.Forwarded{Event: copyOf(fan, "orders", "sub_a", `{"v":2}`), Edge: "e1", Key: "f-1"}, true},
		{"fan-out, other payload, key not sent: nothing to find", edge.Forwarded{Event: copyOf(fan, "orders", "sub_a", `{"v":2}`), Edge: "e1"}, false},
		{"fan-out, no record at the cell", edge.Forwarded{Event: copyOf(eventid.ForSubscription("sub_a", "acme", "f-9"), "orders", "sub_a", `{"v":1}`), Edge: "e1", Key: "f-9"}, false},
		{"test event, same publish", edge.Forwarded{Event: copyOf(tested, "orders", "sub_a", `{"v":1}`), Edge: "e1", Key: "t-1"}, false},
		{"test event, other payload", edge.Forwarded{Event: copyOf(tested, "orders", "sub_a", `{"v":2}`), Edge: "e1", Key: "t-1"}, true},
	}
	events := make([]edge.Forwarded, len(cases))
	for i, c := range cases {
		events[i] = c.fw
	}
	// One call, as the owner checks a batch: the records of the first
	// copies count for the later ones.
	got, err := check.CheckForwarded(ctx, events)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		if (got[i] != "") != c.conflict {
			t.Errorf("%s: conflict %q, want conflict %v", c.name, got[i], c.conflict)
		}
		if c.conflict && !strings.Contains(got[i], "edge "+c.fw.Edge) {
			t.Errorf("%s: %q does not name the edge", c.name, got[i])
		}
	}
	// The copy recorded "new-1" at the cell: a publish there with other
	// content is refused, with the same content it is the same event.
	if _, err := f.gw.Publish(ctx, connect.NewRequest(keyed("orders", "new-1", `{"v":2}`))); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("publish at the cell of the key an edge's copy recorded, other payload: %v, want already_exists", err)
	}
	if resp := publish(keyed("orders", "new-1", `{"v":1}`)); resp.GetEventId() != fresh {
		t.Fatalf("publish at the cell of the key an edge's copy recorded: event %s, want %s", resp.GetEventId(), fresh)
	}
}

// The conflict's text says what happened, to whom, and what became of
// the copy.
func TestForwardedConflictText(t *testing.T) {
	ev := copyOf("evt-1", "orders", "sub_a", `{}`)
	got := ingest.ForwardedConflict(edge.Forwarded{Event: ev, Edge: "edge-paris", Key: "order-7"})
	for _, want := range []string{`idempotency key "order-7"`, "another event", "edge edge-paris", "event evt-1", "customer acme", "destination orders, subscription sub_a", "was not delivered"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q does not say %q", got, want)
		}
	}
	if got := ingest.ForwardedConflict(edge.Forwarded{Event: ev, Edge: "edge-paris"}); !strings.HasPrefix(got, "the idempotency key of event evt-1 ") {
		t.Errorf("without the key: %q", got)
	}
}

// An edge's gateway sends the cell each event's idempotency key
// (edge.KeyHeader), a fan-out's deliveries included: the cell finds a
// fan-out's record by it. An event without a key has none.
func TestEdgeModeSendsTheKey(t *testing.T) {
	ctx := context.Background()
	srv, err := natsd.Start(natsd.Config{DataDir: t.TempDir(), Name: "edge-k", Domain: edge.Domain("edge-k")}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	js := srv.JetStream()
	if _, err := edge.Open(ctx, js, edge.Config{Name: "edge-k", MaxBytes: 1 << 20, DedupWindow: time.Minute}); err != nil {
		t.Fatal(err)
	}
	reg := destinations.NewRegistry()
	reg.Replace(time.Now(), []*rivorav1.Destination{{Id: "orders", Url: "http://127.0.0.1:1/hook", Secret: secret}})
	subs := subscriptions.NewTable()
	subs.Replace(time.Now(), []*rivorav1.Subscription{{Id: "sub_a", CustomerId: "acme", DestinationId: "orders", Types: []string{"*"}}})
	gw, err := ingest.New(ctx, js, reg, ingest.Config{
		Partitions: ingest.FixedCount(partitions), Subscriptions: subs, Edge: &ingest.EdgeTarget{Name: "edge-k", Buffer: "1"},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{} // event id → key
	for _, req := range []*rivorav1.PublishRequest{
		{DestinationId: "orders", CustomerId: "acme", LaneKey: "l", Type: "t", Payload: []byte(`{}`), IdempotencyKey: "direct-1"},
		{CustomerId: "acme", LaneKey: "l", Type: "t", Payload: []byte(`{}`), IdempotencyKey: "fan-1"},
		{DestinationId: "orders", CustomerId: "acme", LaneKey: "l", Type: "t", Payload: []byte(`{}`)},
	} {
		resp, err := gw.Publish(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		id := resp.Msg.GetEventId()
		if resp.Msg.GetFannedOut() {
			id = resp.Msg.GetRoutes()[0].GetEventId()
		}
		want[id] = req.GetIdempotencyKey()
	}
	buffer, err := js.Stream(ctx, edge.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= uint64(len(want)); seq++ {
		m, err := buffer.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		ev := &rivorav1.Event{}
		if err := proto.Unmarshal(m.Data, ev); err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get(edge.KeyHeader); got != want[ev.GetEventId()] {
			t.Errorf("event %s (subscription %q): %s %q, want %q", ev.GetEventId(), ev.GetSubscriptionId(), edge.KeyHeader, got, want[ev.GetEventId()])
		}
	}
}

// A batch at the cell reads the records edges' copies left for all its
// keys in one request (several records answered): one with other content
// refuses the whole batch; with the same content it is stored, each event
// under its key's id.
func TestBatchHeldToEdgesRecords(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	check, err := ingest.NewForwardedCheck(ctx, f.srv.JetStream(), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"rec-1", "rec-2", "rec-3"}
	ids := make([]string, len(keys))
	copies := make([]edge.Forwarded, len(keys))
	for i, k := range keys {
		ids[i] = eventid.FromKey("orders", "acme", k)
		copies[i] = edge.Forwarded{Event: copyOf(ids[i], "orders", "", `{"v":1}`), Edge: "e1", Key: k}
	}
	got, err := check.CheckForwarded(ctx, copies)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		if g != "" {
			t.Fatalf("copy %d: conflict %q, want it recorded", i, g)
		}
	}
	batch := func(payloadOfLast string) *rivorav1.PublishBatchRequest {
		req := &rivorav1.PublishBatchRequest{}
		for i, k := range keys {
			payload := `{"v":1}`
			if i == len(keys)-1 {
				payload = payloadOfLast
			}
			req.Events = append(req.Events, &rivorav1.PublishRequest{DestinationId: "orders", CustomerId: "acme", LaneKey: "user-42", Type: "t", Payload: []byte(payload), IdempotencyKey: k})
		}
		return req
	}
	if _, err := f.gw.PublishBatch(ctx, connect.NewRequest(batch(`{"v":2}`))); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("batch whose last key an edge recorded with other content: %v, want already_exists", err)
	}
	resp, err := f.gw.PublishBatch(ctx, connect.NewRequest(batch(`{"v":1}`)))
	if err != nil {
		t.Fatalf("batch with the content the edges recorded: %v", err)
	}
	for i, id := range resp.Msg.GetEventIds() {
		if id != ids[i] {
			t.Errorf("event %d: id %s, want %s", i, id, ids[i])
		}
	}
	if len(resp.Msg.GetEventIds()) != len(keys) {
		t.Fatalf("%d ids, want %d", len(resp.Msg.GetEventIds()), len(keys))
	}
}
