package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/subscriptions"
	"github.com/rivora/rivora/edge"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/eventid"
)

// edgeFixture is a gateway in edge mode on an edge's own server and
// buffer of bufferBytes.
type edgeFixture struct {
	srv    *natsd.Server
	gw     gateway
	buffer jetstream.Stream
	buf    *edge.Buffer
	// refuse, when set, is what Admit answers.
	refuse atomic.Pointer[error]
	// stale, when set, is what Stale answers.
	stale atomic.Pointer[string]
	// reserved counts the bytes Reserve admitted.
	reserved atomic.Int64
}

const edgeName = "edge-x"

func newEdgeFixture(t *testing.T, bufferBytes int64) *edgeFixture {
	t.Helper()
	ctx := context.Background()
	srv, err := natsd.Start(natsd.Config{DataDir: t.TempDir(), Name: edgeName, Domain: edge.Domain(edgeName)}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	buf, err := edge.Open(ctx, srv.JetStream(), edge.Config{Name: edgeName, MaxBytes: bufferBytes, DedupWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	reg := destinations.NewRegistry()
	reg.Replace(time.Now(), []*rivorav1.Destination{{Id: "orders", Url: "http://127.0.0.1:1/hook", Secret: secret}})
	f := &edgeFixture{srv: srv, buf: buf}
	gw, err := ingest.New(ctx, srv.JetStream(), reg, ingest.Config{
		MaxPayload: 16 << 10, Partitions: ingest.FixedCount(partitions), Subscriptions: subscriptions.NewTable(), Catalogue: subscriptions.NewCatalogue(),
		Applied: func() uint64 { return 7 },
		Edge: &ingest.EdgeTarget{
			Name: edgeName, Buffer: "1",
			Admit: func() error {
				if err := f.refuse.Load(); err != nil {
					return *err
				}
				return nil
			},
			Reserve: func(n int64) (func(bool), error) {
				done, ok := buf.Reserve(n)
				if !ok {
					return nil, errkind.WithInfo(errkind.Errorf(errkind.Exhausted, "the test's full buffer"), edge.BufferFullReason, nil)
				}
				f.reserved.Add(n)
				return done, nil
			},
			Full: func() error { return errkind.Errorf(errkind.Exhausted, "the test's full buffer") },
			Stale: func() string {
				if note := f.stale.Load(); note != nil {
					return *note
				}
				return ""
			},
		},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	f.gw = gateway{gw}
	if f.buffer, err = srv.JetStream().Stream(ctx, edge.StreamName); err != nil {
		t.Fatal(err)
	}
	return f
}

// An edge's gateway stores into the edge's buffer, under the edge's
// subject, with the edge's header and an "edge:" dedup id; it creates
// neither INGEST nor the cell's IDEMPOTENCY bucket (its records are in
// its own), and keeps the agent's rules: idempotency, conflicts, the
// config version.
func TestEdgeModeStoresIntoTheBuffer(t *testing.T) {
	ctx := context.Background()
	f := newEdgeFixture(t, 1<<20)
	req := valid()
	req.IdempotencyKey = "order-1"
	resp, err := f.gw.Publish(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	id := eventid.FromKey("orders", "acme", "order-1")
	if resp.Msg.GetEventId() != id || resp.Msg.GetDuplicate() {
		t.Fatalf("answer %v, want event %s, not a duplicate", resp.Msg, id)
	}
	again, err := f.gw.Publish(ctx, connect.NewRequest(req))
	if err != nil || !again.Msg.GetDuplicate() || again.Msg.GetEventId() != id {
		t.Fatalf("the same key again: %v, %v; want a duplicate of %s", again, err, id)
	}
	other := valid()
	other.IdempotencyKey, other.Payload = "order-1", []byte(`{"order":2}`)
	if _, err := f.gw.Publish(ctx, connect.NewRequest(other)); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("the key reused for another payload: %v, want already_exists", err)
	}

	info, err := f.buffer.Info(ctx)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("buffer holds %+v, %v; want 1 event", info.State, err)
	}
	m, err := f.buffer.GetMsg(ctx, info.State.FirstSeq)
	if err != nil {
		t.Fatal(err)
	}
	if want := edge.Subject(edgeName, lanes.Partition("orders", partitions), "orders"); m.Subject != want {
		t.Fatalf("stored on %q, want %q", m.Subject, want)
	}
	if got := m.Header.Get(edge.Header); got != edgeName {
		t.Fatalf("header %s = %q, want %q", edge.Header, got, edgeName)
	}
	if got := m.Header.Get(jetstream.MsgIDHeader); got != "edge:"+id {
		t.Fatalf("dedup id %q, want edge:%s", got, id)
	}
	ev := &rivorav1.Event{}
	if err := proto.Unmarshal(m.Data, ev); err != nil || ev.GetEventId() != id || ev.GetConfigVersion() != 7 {
		t.Fatalf("stored event %v (%v): want id %s, config version 7", ev, err, id)
	}

	js := f.srv.JetStream()
	if _, err := js.Stream(ctx, lanes.IngestStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("INGEST at the edge: %v, want none", err)
	}
	if _, err := js.KeyValue(ctx, ingest.IdempotencyBucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("the cell's %s bucket at the edge: %v, want none", ingest.IdempotencyBucket, err)
	}
	kv, err := js.KeyValue(ctx, edge.IdempotencyBucket(edgeName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, id); err != nil {
		t.Fatalf("the key's record in %s: %v", edge.IdempotencyBucket(edgeName), err)
	}
}

// Refused by Admit (over age), a request records and stores nothing and
// answers Admit's error; a full buffer answers Full's, resource_exhausted.
func TestEdgeModeRefusals(t *testing.T) {
	ctx := context.Background()
	f := newEdgeFixture(t, 64<<10)
	overAge := errkind.Errorf(errkind.Exhausted, "over age")
	f.refuse.Store(&overAge)
	req := valid()
	req.IdempotencyKey = "k-1"
	_, err := f.gw.Publish(ctx, connect.NewRequest(req))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "over age") {
		t.Fatalf("refused by Admit: %v, want resource_exhausted: over age", err)
	}
	kv, err := f.srv.JetStream().KeyValue(ctx, edge.IdempotencyBucket(edgeName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, eventid.FromKey("orders", "acme", "k-1")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a refused request's idempotency record: %v, want none", err)
	}
	f.refuse.Store(nil)

	big := valid()
	big.Payload = []byte(`"` + strings.Repeat("x", 8<<10) + `"`)
	for i := range 20 {
		_, err = f.gw.Publish(ctx, connect.NewRequest(big))
		if err != nil {
			break
		}
		if i == 19 {
			t.Fatal("160 KiB accepted into a 64 KiB buffer")
		}
	}
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "the test's full buffer") {
		t.Fatalf("publish into a full buffer: %v, want resource_exhausted with Full's message", err)
	}
}

// A batch the buffer has no room for is refused whole, resource_exhausted
// with the reason edge.BufferFullReason, and stores nothing: JetStream
// refuses a full stream's messages one at a time, so a batch that
// reached --max-buffer was stored up to there. Its idempotency records go
// too: the same batch is stored whole once there is room. What Reserve
// admits is what the buffer's stream counts, to the byte.
func TestEdgeModeRefusesABatchWhole(t *testing.T) {
	ctx := context.Background()
	const maxBuffer = 256 << 10
	f := newEdgeFixture(t, maxBuffer)
	batch := func(round int) *rivorav1.PublishBatchRequest {
		req := &rivorav1.PublishBatchRequest{}
		for i := range 50 {
			ev := valid()
			ev.LaneKey = fmt.Sprintf("user-%d", i)
			ev.Payload = []byte(`"` + strings.Repeat("x", 1000) + `"`)
			ev.IdempotencyKey = fmt.Sprintf("round-%d-%d", round, i)
			req.Events = append(req.Events, ev)
		}
		return req
	}
	held := func() uint64 {
		t.Helper()
		info, err := f.buffer.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	acked, round := uint64(0), 0
	var refusal error
	for ; refusal == nil; round++ {
		if round > 20 {
			t.Fatalf("%d events acknowledged into a %d-byte buffer and none refused", acked, maxBuffer)
		}
		if _, refusal = f.gw.PublishBatch(ctx, connect.NewRequest(batch(round))); refusal == nil {
			acked += 50
		}
	}
	round-- // the refused one
	if got := held(); got != acked {
		t.Fatalf("the buffer holds %d events after %d were acknowledged and a batch was refused: %d of the refused batch were stored", got, acked, got-acked)
	}
	if connect.CodeOf(refusal) != connect.CodeResourceExhausted || !strings.Contains(refusal.Error(), "nothing in this batch was stored") {
		t.Fatalf("a batch into a full buffer: %v, want resource_exhausted saying nothing of it was stored", refusal)
	}
	if _, ok := errkind.Info(refusal, edge.BufferFullReason); !ok {
		t.Fatalf("the full buffer's refusal %v carries no %s ErrorInfo", refusal, edge.BufferFullReason)
	}
	info, err := f.buffer.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if int64(info.State.Bytes) != f.reserved.Load() || info.State.Bytes > maxBuffer {
		t.Fatalf("the buffer holds %d bytes; Reserve admitted %d, under %d", info.State.Bytes, f.reserved.Load(), maxBuffer)
	}

	// The cell takes everything: the refused batch is stored whole, not
	// taken for a retry of records left behind.
	if err := f.buffer.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.buf.Stats(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := f.gw.PublishBatch(ctx, connect.NewRequest(batch(round)))
	if err != nil {
		t.Fatalf("the refused batch once there is room: %v", err)
	}
	for i, r := range resp.Msg.GetResults() {
		if r.GetDuplicate() {
			t.Fatalf("event %d of the refused batch, sent again with room: answered a duplicate", i)
		}
	}
	if got := held(); got != 50 {
		t.Fatalf("the buffer holds %d events, want the batch's 50", got)
	}
}

// While the edge's config is stale (it has not heard from its control
// plane lately), what it does not know may have been created since: a
// destination, a test event's subscription, a subscription a fan-out
// would match. Each is refused unavailable with the edge's note, never
// invalid_argument or not_found (which a client does not retry), and a
// fan-out is never answered with no route (stored nowhere). Fresh, the
// edge answers as an agent does.
func TestEdgeModeStaleConfigRefusesTheUnknownUnavailable(t *testing.T) {
	ctx := context.Background()
	f := newEdgeFixture(t, 1<<20)
	unknown := valid()
	unknown.DestinationId = "d4"
	fanout := valid()
	fanout.DestinationId = ""
	test := valid()
	test.DestinationId, test.SubscriptionId = "", "sub_new"

	if _, err := f.gw.Publish(ctx, connect.NewRequest(unknown)); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("fresh, an unknown destination: %v, want invalid_argument", err)
	}
	if resp, err := f.gw.Publish(ctx, connect.NewRequest(fanout)); err != nil || !resp.Msg.GetFannedOut() || len(resp.Msg.GetRoutes()) != 0 {
		t.Fatalf("fresh, a fan-out matching nothing: %v, %v; want fanned out to no route", resp, err)
	}
	if _, err := f.gw.Publish(ctx, connect.NewRequest(test)); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("fresh, a test event to an unknown subscription: %v, want not_found", err)
	}

	note := "edge edge-x has not heard from its control plane since 2026-01-02T03:04:05Z (1m0s ago)"
	f.stale.Store(&note)
	for _, tc := range []struct {
		name string
		req  *rivorav1.PublishRequest
		says string
	}{
		{"an unknown destination", unknown, `destination "d4" is not in the config this edge has`},
		{"a fan-out matching nothing", fanout, "no subscription matching this event"},
		{"a test event to an unknown subscription", test, `subscription "sub_new" of customer "acme" is not in the config this edge has`},
	} {
		_, err := f.gw.Publish(ctx, connect.NewRequest(tc.req))
		if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), note) {
			t.Errorf("stale, %s: %v; want unavailable saying %q and the edge's note", tc.name, err, tc.says)
		}
		_, err = f.gw.PublishBatch(ctx, connect.NewRequest(&rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{valid(), tc.req}}))
		if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "events[1]") {
			t.Errorf("stale, %s in a batch: %v; want unavailable naming events[1]", tc.name, err)
		}
	}
	if _, err := f.gw.Publish(ctx, connect.NewRequest(valid())); err != nil {
		t.Fatalf("stale, a destination the edge knows: %v", err)
	}
	info, err := f.buffer.Info(ctx)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("buffer holds %+v, %v; want only the known destination's event", info.State, err)
	}
}
