package owner_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/edge"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/eventid"
	"github.com/rivora/rivora/testkit/poll"
)

// publishKeyed publishes an event at the cell with an idempotency key
// (to destination dest, or, when dest is "", to the customer's
// subscriptions) and returns the id of its first delivery.
func (n *node) publishKeyed(dest, key, lane, payload string) (string, error) {
	n.t.Helper()
	resp, err := n.gw.Publish(context.Background(), connect.NewRequest(&rivorav1.PublishRequest{
		DestinationId: dest, CustomerId: "acme", LaneKey: lane, Type: "t", Payload: []byte(payload), IdempotencyKey: key,
	}))
	if err != nil {
		return "", err
	}
	if dest == "" {
		return resp.Msg.GetRoutes()[0].GetEventId(), nil
	}
	return resp.Msg.GetEventId(), nil
}

// edgeEvent is an event as an edge's gateway stores it.
func edgeEvent(id, dest, subscription, lane, payload string) *rivorav1.Event {
	return &rivorav1.Event{
		EventId: id, DestinationId: dest, SubscriptionId: subscription, CustomerId: "acme", LaneKey: lane, Type: "t",
		Payload: []byte(payload), ContentType: "application/json", AcceptedAt: timestamppb.Now(),
	}
}

// forward stores ev in INGEST as edge edgeName's source delivers it: under
// INGEST's subject, with the edge's headers and dedup id (key: the
// idempotency key header, "" for none). It returns the event id.
func (n *node) forward(edgeName, key string, ev *rivorav1.Event) string {
	n.t.Helper()
	data, err := proto.Marshal(ev)
	if err != nil {
		n.t.Fatal(err)
	}
	msg := nats.NewMsg(lanes.IngestSubject(lanes.Partition(ev.GetDestinationId(), partitions), ev.GetDestinationId()))
	msg.Data = data
	msg.Header.Set(jetstream.MsgIDHeader, edge.MsgID(ev.GetEventId()))
	msg.Header.Set(edge.Header, edgeName)
	if key != "" {
		msg.Header.Set(edge.KeyHeader, key)
	}
	if _, err := n.srv.JetStream().PublishMsg(context.Background(), msg); err != nil {
		n.t.Fatalf("forward %s: %v", ev.GetEventId(), err)
	}
	return ev.GetEventId()
}

// waitDrained waits until the pending store is empty: INGEST, the lanes,
// and the ledger (a dead letter leaves it once archived).
func (n *node) waitDrained() {
	n.t.Helper()
	poll.True(n.t, "pending store emptied", 20*time.Second, func() bool {
		return n.streamMsgs(lanes.IngestStream) == 0 && n.totalMsgs(lanes.LanesStream) == 0 && n.totalMsgs(lanes.LedgerStream) == 0
	})
}

// An event published at the cell with a key and again through an edge
// (a client that failed over) with the same content is one event: the
// owner strips the edge's dedup prefix and the lanes keep one copy; the
// edge's other events follow in their lane's order. No dead letter.
func TestAnEventThroughAnEdgeAndTheCellIsOneEvent(t *testing.T) {
	p := newPartner(t, http.StatusOK, nil)
	archRoot := t.TempDir()
	n := openDraining(t, t.TempDir(), mustDir(t, archRoot), []*rivorav1.Destination{dest("orders", p.URL(), 5)})
	id, err := n.publishKeyed("orders", "order-1", "u1", `{"v":"a"}`)
	if err != nil {
		t.Fatal(err)
	}
	n.forward("edge-a", "order-1", edgeEvent(id, "orders", "", "u1", `{"v":"a"}`))
	next := n.forward("edge-a", "", edgeEvent(uuid.NewString(), "orders", "", "u1", `{"v":"next"}`))
	n.run(true)
	p.WaitDelivered(t, []string{id, next}, 15*time.Second)
	n.waitDrained()
	if got := p.DeliveredByLane()["u1"]; !slices.Equal(got, []string{id, next}) {
		t.Fatalf("lane u1 delivered %v, want %v: the edge's copy is the same event", got, []string{id, next})
	}
	if objects := findObjects(t, archRoot); len(objects) != 0 {
		t.Fatalf("dead letters %v, want none", objects)
	}
}

// A key the cell used for one event and an edge, cut off, for another:
// the cell's event is delivered; the edge's copy is not dropped silently
// but becomes a dead letter at its turn (reason idempotency_conflict,
// never sent, why in its last error), and its lane goes on.
func TestAnEdgesConflictingCopyBecomesADeadLetter(t *testing.T) {
	p := newPartner(t, http.StatusOK, nil)
	archRoot := t.TempDir()
	n := openDraining(t, t.TempDir(), mustDir(t, archRoot), []*rivorav1.Destination{dest("orders", p.URL(), 5)})
	id, err := n.publishKeyed("orders", "order-2", "u2", `{"v":"cell"}`)
	if err != nil {
		t.Fatal(err)
	}
	n.forward("edge-a", "order-2", edgeEvent(id, "orders", "", "u2", `{"v":"edge"}`))
	next := n.forward("edge-a", "", edgeEvent(uuid.NewString(), "orders", "", "u2", `{"v":"next"}`))
	n.run(true)
	p.WaitDelivered(t, []string{id, next}, 15*time.Second)
	n.waitDrained()
	if got := p.DeliveredByLane()["u2"]; !slices.Equal(got, []string{id, next}) {
		t.Fatalf("lane u2 delivered %v, want %v", got, []string{id, next})
	}
	for _, r := range p.Requests() {
		if r.ID == id && string(r.Payload) != `{"v":"cell"}` {
			t.Fatalf("event %s delivered with %s, want the cell's payload", id, r.Payload)
		}
	}
	letters := archived(t, archRoot)
	if len(letters) != 1 {
		t.Fatalf("archive holds %d dead letters (%v), want the edge's copy", len(letters), letters)
	}
	dl := letters[0]
	ev := dl.GetEvent()
	if ev.GetEventId() != id || string(ev.GetPayload()) != `{"v":"edge"}` || dl.GetReason() != rivorav1.DeadReason_DEAD_REASON_IDEMPOTENCY_CONFLICT || dl.GetAttempts() != 0 {
		t.Fatalf("dead letter %v, want the edge's copy of %s with reason idempotency_conflict and no attempt", dl, id)
	}
	if ev.GetIdempotencyConflict() != "" {
		t.Fatalf("the archived event keeps its conflict mark %q; a replay must deliver it", ev.GetIdempotencyConflict())
	}
	for _, want := range []string{`idempotency key "order-2"`, "edge edge-a", "was not delivered"} {
		if !strings.Contains(dl.GetLastError(), want) {
			t.Fatalf("dead letter's last error %q does not say %q", dl.GetLastError(), want)
		}
	}
}

// An edge's copy that reaches the cell first records its key there: a
// publish of the key at the cell with another payload is refused, with
// the same payload it is the same event.
func TestAnEdgesCopyRecordsItsKeyAtTheCell(t *testing.T) {
	p := newPartner(t, http.StatusOK, nil)
	n := open(t, t.TempDir(), mustDir(t, t.TempDir()), []*rivorav1.Destination{dest("orders", p.URL(), 5)})
	id := n.forward("edge-a", "order-3", edgeEvent(eventid.FromKey("orders", "acme", "order-3"), "orders", "", "u3", `{"v":"edge"}`))
	n.run(true)
	p.WaitDelivered(t, []string{id}, 15*time.Second)
	if _, err := n.publishKeyed("orders", "order-3", "u3", `{"v":"other"}`); !errors.Is(err, errkind.Exists) {
		t.Fatalf("a publish of the edge's key with another payload: %v, want already exists", err)
	}
	again, err := n.publishKeyed("orders", "order-3", "u3", `{"v":"edge"}`)
	if err != nil || again != id {
		t.Fatalf("a publish of the edge's key with its payload = %s, %v; want %s", again, err, id)
	}
	next := n.publish("orders", "u3")
	p.WaitDelivered(t, []string{next}, 15*time.Second)
	if got := p.DeliveredByLane()["u3"]; !slices.Equal(got, []string{id, next}) {
		t.Fatalf("lane u3 delivered %v, want %v", got, []string{id, next})
	}
}

// A fan-out's delivery an edge forwarded with its key is held to the
// fan-out's record at the cell: the same publish is one event, another
// one a dead letter.
func TestAnEdgesFanOutCopyIsCheckedAgainstTheCellsRecord(t *testing.T) {
	p := newPartner(t, http.StatusOK, nil)
	archRoot := t.TempDir()
	n := openDraining(t, t.TempDir(), mustDir(t, archRoot), []*rivorav1.Destination{dest("orders", p.URL(), 5)})
	n.setSubscriptions(&rivorav1.Subscription{Id: "sub_a", CustomerId: "acme", DestinationId: "orders", Types: []string{"*"}})
	same, err := n.publishKeyed("", "fan-1", "f1", `{"v":"cell"}`)
	if err != nil {
		t.Fatal(err)
	}
	other, err := n.publishKeyed("", "fan-2", "f1", `{"v":"cell"}`)
	if err != nil {
		t.Fatal(err)
	}
	n.forward("edge-a", "fan-1", edgeEvent(same, "orders", "sub_a", "f1", `{"v":"cell"}`))
	n.forward("edge-a", "fan-2", edgeEvent(other, "orders", "sub_a", "f1", `{"v":"edge"}`))
	n.run(true)
	p.WaitDelivered(t, []string{same, other}, 15*time.Second)
	n.waitDrained()
	if got := p.DeliveredByLane()["f1"]; !slices.Equal(got, []string{same, other}) {
		t.Fatalf("lane f1 delivered %v, want %v once each", got, []string{same, other})
	}
	letters := archived(t, archRoot)
	if len(letters) != 1 || letters[0].GetEvent().GetEventId() != other || letters[0].GetReason() != rivorav1.DeadReason_DEAD_REASON_IDEMPOTENCY_CONFLICT ||
		!strings.Contains(letters[0].GetLastError(), "subscription sub_a") {
		t.Fatalf("dead letters %v, want the edge's copy of %s (subscription sub_a), reason idempotency_conflict", letters, other)
	}
}

// archived are the dead letters in the archive under root.
func archived(t *testing.T, root string) []*rivorav1.DeadLetter {
	t.Helper()
	var out []*rivorav1.DeadLetter
	for _, o := range findObjects(t, root) {
		out = append(out, readObject(t, o)...)
	}
	return out
}

// edgeBuffer stands in for an edge's buffer in the cell's own server: a
// stream under prefix (edge.<x>.ingest.>) that INGEST sources, its
// subjects rewritten into INGEST's, so that the cell's source stamps
// what it takes (Nats-Stream-Source) as it does across a leaf.
func (n *node) edgeBuffer(stream, prefix string) {
	n.t.Helper()
	if _, err := n.srv.JetStream().CreateStream(context.Background(), jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + "ingest.>"}}); err != nil {
		n.t.Fatal(err)
	}
	// From its first sequence, as the edge's durable consumer would: a
	// source with no start of its own, added to a stream that removed
	// messages already (INGEST, a work queue, after a move), starts at
	// that stream's last message time (nats-server's guess for a
	// recovered stream), and would skip what the buffer holds from before.
	n.sourceFrom(stream, prefix, 1)
}

// sourceFrom makes INGEST source stream (under prefix) from sequence
// start (0: where it stands), replacing any source of it.
func (n *node) sourceFrom(stream, prefix string, start uint64) {
	n.t.Helper()
	ctx := context.Background()
	js := n.srv.JetStream()
	s, err := js.Stream(ctx, lanes.IngestStream)
	if err != nil {
		n.t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.Sources = slices.DeleteFunc(cfg.Sources, func(src *jetstream.StreamSource) bool { return src.Name == stream })
	if start > 0 { // a removed source is forgotten only once INGEST knows it gone
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			n.t.Fatal(err)
		}
	}
	cfg.Sources = append(cfg.Sources, &jetstream.StreamSource{
		Name: stream, OptStartSeq: start, SubjectTransforms: []jetstream.SubjectTransformConfig{{Source: prefix + "ingest.>", Destination: "ingest.>"}},
	})
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		n.t.Fatal(err)
	}
}

// storeAtEdge stores ev under prefix as edge edgeName's gateway does,
// its buffer's incarnation buffer; it returns the event id.
func (n *node) storeAtEdge(prefix, edgeName, buffer string, ev *rivorav1.Event) string {
	n.t.Helper()
	data, err := proto.Marshal(ev)
	if err != nil {
		n.t.Fatal(err)
	}
	msg := nats.NewMsg(prefix + lanes.IngestSubject(lanes.Partition(ev.GetDestinationId(), partitions), ev.GetDestinationId()))
	msg.Data = data
	msg.Header.Set(jetstream.MsgIDHeader, edge.MsgID(ev.GetEventId()))
	msg.Header.Set(edge.Header, edgeName)
	msg.Header.Set(edge.BufferHeader, buffer)
	if _, err := n.srv.JetStream().PublishMsg(context.Background(), msg); err != nil {
		n.t.Fatalf("store %s at the edge: %v", ev.GetEventId(), err)
	}
	return ev.GetEventId()
}

// A cell restarted in the second after it took an edge's events takes
// them again (the edge had not yet heard they were taken), and by then
// neither INGEST nor the delivered lanes remember their ids: the mover's
// mark of the buffer drops them, so each is delivered once. (Here the
// restarted cell's source is set to take the stand-in buffer's events
// from its start again.) A buffer
// recreated under the edge's name (another incarnation) starts from
// sequence 1 again and is not mistaken for a copy.
func TestAnEdgesEventsTakenAgainAfterACellRestartAreDeliveredOnce(t *testing.T) {
	p := newPartner(t, http.StatusOK, nil)
	dir, arch := t.TempDir(), mustDir(t, t.TempDir())
	dests := []*rivorav1.Destination{dest("orders", p.URL(), 50)}
	n := openDraining(t, dir, arch, dests)
	n.edgeBuffer("EDGE_OLD", "edge.old.")
	var ids []string
	for i := range 3 {
		ids = append(ids, n.storeAtEdge("edge.old.", "edge-a", "100", edgeEvent(uuid.NewString(), "orders", "", "u9", fmt.Sprintf(`{"v":%d}`, i))))
	}
	n.run(true)
	p.WaitDelivered(t, ids, 15*time.Second)
	n.waitDrained()
	n.stop()

	dropped := owner.Reforwarded()
	n = openDraining(t, dir, arch, dests)
	n.sourceFrom("EDGE_OLD", "edge.old.", 1)
	later := n.storeAtEdge("edge.old.", "edge-a", "100", edgeEvent(uuid.NewString(), "orders", "", "u9", `{"v":3}`))
	n.run(true)
	p.WaitDelivered(t, []string{later}, 15*time.Second)
	n.waitDrained()
	n.edgeBuffer("EDGE_NEW", "edge.new.")
	fresh := n.storeAtEdge("edge.new.", "edge-a", "200", edgeEvent(uuid.NewString(), "orders", "", "u9", `{"v":"new buffer"}`))
	p.WaitDelivered(t, []string{fresh}, 15*time.Second)
	n.waitDrained()
	if got, want := p.DeliveredByLane()["u9"], append(slices.Clone(ids), later, fresh); !slices.Equal(got, want) {
		t.Fatalf("lane u9 delivered %v, want %v: each event once, in order", got, want)
	}
	if got := owner.Reforwarded() - dropped; got != 3 {
		t.Fatalf("%v events dropped as taken again, want the 3 taken before the restart", got)
	}
}
