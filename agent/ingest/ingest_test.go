package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/subscriptions"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/eventid"
)

const (
	partitions = 4
	secret     = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	maxPayload = 1024
)

type fixture struct {
	srv *natsd.Server
	gw  gateway
	st  jetstream.Stream
	reg *destinations.Registry
	// subs and cat are the gateway's subscriptions and event types.
	subs *subscriptions.Table
	cat  *subscriptions.Catalogue
}

// gateway is the ingest gateway as its callers see it: its errors
// through errkind's mapping, as the agent's interceptor answers them
// (Connect codes and messages).
type gateway struct{ *ingest.Gateway }

func (g gateway) Publish(ctx context.Context, req *connect.Request[rivorav1.PublishRequest]) (*connect.Response[rivorav1.PublishResponse], error) {
	resp, err := g.Gateway.Publish(ctx, req)
	return resp, errkind.AsConnect(err)
}

func (g gateway) PublishBatch(ctx context.Context, req *connect.Request[rivorav1.PublishBatchRequest]) (*connect.Response[rivorav1.PublishBatchResponse], error) {
	resp, err := g.Gateway.PublishBatch(ctx, req)
	return resp, errkind.AsConnect(err)
}

func (g gateway) Resend(ctx context.Context, original *rivorav1.Event, dedupID string) (*rivorav1.Event, bool, error) {
	ev, dup, err := g.Gateway.Resend(ctx, original, dedupID)
	return ev, dup, errkind.AsConnect(err)
}

func (g gateway) Reingest(ctx context.Context, dls []*rivorav1.DeadLetter) (stored, duplicates int, err error) {
	stored, duplicates, err = g.Gateway.Reingest(ctx, dls)
	return stored, duplicates, errkind.AsConnect(err)
}

// newFixture starts an embedded NATS server and a gateway that knows the
// destinations "orders" and "billing", with no subscription and an empty,
// lenient catalogue.
func newFixture(t testing.TB) *fixture {
	t.Helper()
	srv, err := natsd.Start(natsd.Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("start embedded nats: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	reg := destinations.NewRegistry()
	reg.Replace(time.Now(), []*rivorav1.Destination{
		{Id: "orders", Url: "http://127.0.0.1:1/hook", Secret: secret},
		{Id: "billing", Url: "http://127.0.0.1:1/hook", Secret: secret},
	})
	f := &fixture{srv: srv, reg: reg, subs: subscriptions.NewTable(), cat: subscriptions.NewCatalogue()}
	f.gw = f.with(t, ingest.Config{})
	st, err := srv.JetStream().Stream(context.Background(), lanes.IngestStream)
	if err != nil {
		t.Fatalf("INGEST stream: %v", err)
	}
	f.st = st
	return f
}

// with is another gateway on f's server, registry, subscriptions and
// catalogue, configured as f's but for what cfg sets.
func (f *fixture) with(t testing.TB, cfg ingest.Config) gateway {
	t.Helper()
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = maxPayload
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 50
	}
	if cfg.Partitions == nil {
		cfg.Partitions = ingest.FixedCount(partitions)
	}
	if cfg.Subscriptions == nil {
		cfg.Subscriptions = f.subs
	}
	if cfg.Catalogue == nil {
		cfg.Catalogue = f.cat
	}
	gw, err := ingest.New(context.Background(), f.srv.JetStream(), f.reg, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("ingest.New: %v", err)
	}
	return gateway{gw}
}

// withLocal is another gateway on f's server whose local store is local.
func (f *fixture) withLocal(t testing.TB, local ingest.LocalStore) gateway {
	t.Helper()
	return f.with(t, ingest.Config{Local: local})
}

func valid() *rivorav1.PublishRequest {
	return &rivorav1.PublishRequest{
		DestinationId: "orders", CustomerId: "acme", LaneKey: "user-42", Type: "order.created",
		Payload: []byte(`{"order":1}`),
	}
}

func (f *fixture) msgs(t testing.TB) uint64 {
	t.Helper()
	info, err := f.st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// stored reads every event in INGEST, in stream order.
func (f *fixture) stored(t testing.TB) []*rivorav1.Event {
	t.Helper()
	ctx := context.Background()
	info, err := f.st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*rivorav1.Event
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		raw, err := f.st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("get seq %d: %v", seq, err)
		}
		ev := &rivorav1.Event{}
		if err := proto.Unmarshal(raw.Data, ev); err != nil {
			t.Fatalf("decode seq %d: %v", seq, err)
		}
		wantSubject := lanes.IngestSubject(lanes.Partition(ev.GetDestinationId(), partitions), ev.GetDestinationId())
		if raw.Subject != wantSubject {
			t.Fatalf("event %s stored on %q, want %q", ev.GetEventId(), raw.Subject, wantSubject)
		}
		// A re-ingest has its own dedup id (ReplayDedupID, the resend's).
		if got := raw.Header.Get(jetstream.MsgIDHeader); got != ev.GetEventId() && !ev.GetResent() && !ev.GetReplayed() {
			t.Fatalf("event %s stored with Nats-Msg-Id %q; dedup needs the event id", ev.GetEventId(), got)
		}
		out = append(out, ev)
	}
	return out
}

func publish(f *fixture, req *rivorav1.PublishRequest) (*rivorav1.PublishResponse, error) {
	resp, err := f.gw.Publish(context.Background(), connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// TestPublishData: a JSON value in data is stored (and so delivered) as
// compact JSON with sorted keys and no HTML escaping, as application/json,
// and names the same event as the same bytes in payload.
func TestPublishData(t *testing.T) {
	f := newFixture(t)
	data, err := structpb.NewValue(map[string]any{
		"order": 1, "note": "<b>&</b>", "items": []any{"a", 2.5, nil, true}, "customer": map[string]any{"z": 1, "a": "é"},
	})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"customer":{"a":"é","z":1},"items":["a",2.5,null,true],"note":"<b>&</b>","order":1}`
	req := valid()
	req.Payload, req.Data, req.IdempotencyKey = nil, data, "order-1"
	first, err := publish(f, req)
	if err != nil {
		t.Fatalf("Publish with data: %v", err)
	}
	// The same JSON as payload bytes is the same event: a duplicate.
	asBytes := valid()
	asBytes.Payload, asBytes.IdempotencyKey = []byte(want), "order-1"
	again, err := publish(f, asBytes)
	if err != nil || !again.GetDuplicate() || again.GetEventId() != first.GetEventId() {
		t.Fatalf("the same JSON as payload = %v, %v; want a duplicate of %s", again, err, first.GetEventId())
	}
	// A bare JSON scalar is a body too.
	scalar := valid()
	scalar.Payload, scalar.Data = nil, structpb.NewNumberValue(42)
	if _, err := publish(f, scalar); err != nil {
		t.Fatalf("Publish with data 42: %v", err)
	}
	got := f.stored(t)
	if len(got) != 2 {
		t.Fatalf("stored %d events, want 2", len(got))
	}
	if string(got[0].GetPayload()) != want || got[0].GetContentType() != "application/json" {
		t.Fatalf("stored %q as %q, want %q as application/json", got[0].GetPayload(), got[0].GetContentType(), want)
	}
	if string(got[1].GetPayload()) != "42" {
		t.Fatalf("stored %q for data 42", got[1].GetPayload())
	}
}

func TestPublishStoresBeforeAnswering(t *testing.T) {
	f := newFixture(t)
	before := time.Now()
	req := valid()
	req.Payload = []byte{0x00, 0xff, '{', '}', 0x80} // any bytes, kept exactly
	resp, err := publish(f, req)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if resp.GetDuplicate() {
		t.Fatal("first publish reported duplicate")
	}
	id, err := uuid.Parse(resp.GetEventId())
	if err != nil || id.Version() != 7 {
		t.Fatalf("event id %q: want a UUIDv7 (err %v)", resp.GetEventId(), err)
	}
	// No polling: the answer means the event is in the stream already.
	got := f.stored(t)
	if len(got) != 1 {
		t.Fatalf("INGEST holds %d events right after Publish returned, want 1", len(got))
	}
	ev := got[0]
	want := &rivorav1.Event{
		EventId: resp.GetEventId(), DestinationId: "orders", CustomerId: "acme", LaneKey: "user-42",
		Type: "order.created", Payload: req.Payload, ContentType: "application/json",
	}
	at := ev.GetAcceptedAt().AsTime()
	ev.AcceptedAt = nil
	if !proto.Equal(ev, want) {
		t.Fatalf("stored event\n got %v\nwant %v", ev, want)
	}
	if at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
		t.Fatalf("accepted_at %v not around now", at)
	}
}

func TestPublishKeepsContentType(t *testing.T) {
	f := newFixture(t)
	req := valid()
	req.ContentType = "application/cloudevents+json"
	if _, err := publish(f, req); err != nil {
		t.Fatal(err)
	}
	if got := f.stored(t)[0].GetContentType(); got != req.ContentType {
		t.Fatalf("content type = %q, want %q", got, req.ContentType)
	}
}

// When the store cannot acknowledge, the gateway must not answer success.
func TestPublishWithoutStoreFails(t *testing.T) {
	f := newFixture(t)
	if err := f.srv.JetStream().DeleteStream(context.Background(), lanes.IngestStream); err != nil {
		t.Fatal(err)
	}
	_, err := publish(f, valid())
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("Publish with no INGEST stream: err = %v (code %v), want Unavailable", err, connect.CodeOf(err))
	}
	if !strings.Contains(err.Error(), "retry with the same idempotency key") {
		t.Fatalf("error %q does not say what to do", err)
	}
	// The advice is the publisher's, apart from the error: a replay
	// re-ingesting dead letters tells the error without it.
	if msg := errkind.WithoutAdvice(err); strings.Contains(msg, "idempotency key") || !strings.Contains(msg, "store event: ") {
		t.Fatalf("the error without its advice: %q", msg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = f.gw.Publish(ctx, connect.NewRequest(valid()))
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("Publish with a cancelled context: err = %v, want DeadlineExceeded", err)
	}
	_, err = f.gw.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{valid()}}))
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("PublishBatch with no INGEST stream: err = %v, want Unavailable", err)
	}
}

// Until the control plane told it the cell's partition count, the gateway
// cannot route an event: it refuses with Unavailable and stores nothing.
func TestPublishBeforeConfig(t *testing.T) {
	srv, err := natsd.Start(natsd.Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	reg := destinations.NewRegistry()
	reg.Replace(time.Now(), []*rivorav1.Destination{{Id: "orders", Url: "http://127.0.0.1:1/", Secret: secret}})
	var count laterCount
	raw, err := ingest.New(context.Background(), srv.JetStream(), reg, ingest.Config{Partitions: &count}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	gw := gateway{raw}
	f := &fixture{srv: srv, gw: gw}
	if f.st, err = srv.JetStream().Stream(context.Background(), lanes.IngestStream); err != nil {
		t.Fatal(err)
	}
	_, err = publish(f, valid())
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "control plane") {
		t.Fatalf("Publish before config: %v, want Unavailable naming the control plane", err)
	}
	_, err = gw.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{valid()}}))
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("PublishBatch before config: %v, want Unavailable", err)
	}
	if n := f.msgs(t); n != 0 {
		t.Fatalf("INGEST holds %d messages", n)
	}
	count.n.Store(partitions)
	if _, err := publish(f, valid()); err != nil {
		t.Fatalf("Publish after config: %v", err)
	}
}

func TestPublishValidation(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name string
		mod  func(*rivorav1.PublishRequest)
		want []string // substrings of the message
	}{
		{"unknown destination", func(r *rivorav1.PublishRequest) { r.DestinationId = "nope" }, []string{`destination "nope" is not registered`, "rivoractl destinations create nope"}},
		{"destination and subscription", func(r *rivorav1.PublishRequest) { r.SubscriptionId = "sub_a" }, []string{"destination_id", "subscription_id", "not both"}},
		{"destination with a dot", func(r *rivorav1.PublishRequest) { r.DestinationId = "orders.eu" }, []string{"destination_id", `'.'`, "use letters, digits"}},
		{"destination with a wildcard", func(r *rivorav1.PublishRequest) { r.DestinationId = "orders>" }, []string{"destination_id", `'>'`}},
		{"long destination", func(r *rivorav1.PublishRequest) { r.DestinationId = strings.Repeat("d", 65) }, []string{"destination_id", "65 bytes", "limit is 64"}},
		{"empty customer", func(r *rivorav1.PublishRequest) { r.CustomerId = "" }, []string{"customer_id is empty"}},
		{"customer with a space", func(r *rivorav1.PublishRequest) { r.CustomerId = "ac me" }, []string{"customer_id", `' '`, "at byte 2"}},
		{"customer with a star", func(r *rivorav1.PublishRequest) { r.CustomerId = "*" }, []string{"customer_id", `'*'`}},
		{"empty lane key", func(r *rivorav1.PublishRequest) { r.LaneKey = "" }, []string{"lane_key is empty", "end user's id"}},
		{"invalid UTF-8 lane key", func(r *rivorav1.PublishRequest) { r.LaneKey = "user\xff" }, []string{"lane_key is not valid UTF-8"}},
		{"long lane key", func(r *rivorav1.PublishRequest) { r.LaneKey = strings.Repeat("k", 257) }, []string{"lane_key is 257 bytes", "limit is 256"}},
		{"empty type", func(r *rivorav1.PublishRequest) { r.Type = "" }, []string{"type must be 1–128 bytes", "order.created", "got 0 bytes"}},
		{"long type", func(r *rivorav1.PublishRequest) { r.Type = strings.Repeat("t", 129) }, []string{"type must be", "got 129 bytes"}},
		{"type with a space", func(r *rivorav1.PublishRequest) { r.Type = "order created" }, []string{`event type "order created" has ' ' at byte 5`, "._-:"}},
		{"type with a letter outside ASCII", func(r *rivorav1.PublishRequest) { r.Type = "bestellung.geändert" }, []string{`'ä' at byte 13`}},
		{"payload over the limit", func(r *rivorav1.PublishRequest) { r.Payload = make([]byte, maxPayload+1) }, []string{fmt.Sprintf("payload is %d bytes; the limit is %d", maxPayload+1, maxPayload)}},
		{"idempotency key with a space", func(r *rivorav1.PublishRequest) { r.IdempotencyKey = "order 1" }, []string{"idempotency_key", `' '`, "use letters, digits, '_', '-' and ':'"}},
		{"idempotency key with a dot", func(r *rivorav1.PublishRequest) { r.IdempotencyKey = "order.1" }, []string{"idempotency_key", `'.'`}},
		{"long idempotency key", func(r *rivorav1.PublishRequest) { r.IdempotencyKey = strings.Repeat("i", 129) }, []string{"idempotency_key is 129 bytes", "limit is 128"}},
		{"content type with CR/LF", func(r *rivorav1.PublishRequest) { r.ContentType = "application/json\r\nx-injected: 1" }, []string{"content_type must not contain control characters"}},
		// mime.ParseMediaType lets these through in a quoted parameter;
		// no HTTP transport sends them.
		{"content type with a control in a quoted parameter", func(r *rivorav1.PublishRequest) { r.ContentType = "application/json; x=\"\x01\"" }, []string{"content_type must not contain control characters"}},
		{"content type with DEL in a quoted parameter", func(r *rivorav1.PublishRequest) { r.ContentType = "application/json; x=\"\x7f\"" }, []string{"content_type must not contain control characters"}},
		{"content type that is no media type", func(r *rivorav1.PublishRequest) { r.ContentType = "json" }, []string{`content_type "json" is not a media type`}},
		{"long content type", func(r *rivorav1.PublishRequest) { r.ContentType = "text/" + strings.Repeat("x", 300) }, []string{"content_type is 305 bytes", "limit is 256"}},
		{"no body", func(r *rivorav1.PublishRequest) { r.Payload = nil }, []string{"the event has no body: set payload (bytes) or data (a JSON value)"}},
		{"payload and data", func(r *rivorav1.PublishRequest) { r.Data = structpb.NewBoolValue(true) }, []string{"set payload (bytes) or data (a JSON value), not both"}},
		{"data with another content type", func(r *rivorav1.PublishRequest) {
			r.Payload, r.Data, r.ContentType = nil, structpb.NewStringValue("x"), "text/plain"
		}, []string{`content_type "text/plain" needs payload`}},
		{"data with no value", func(r *rivorav1.PublishRequest) { r.Payload, r.Data = nil, &structpb.Value{} }, []string{"data has no value"}},
		{"data with NaN inside", func(r *rivorav1.PublishRequest) {
			r.Payload, r.Data = nil, structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"items": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(1), structpb.NewNumberValue(math.NaN())}}),
			}})
		}, []string{"data.items[1] is NaN, which JSON cannot carry"}},
		{"data over the limit", func(r *rivorav1.PublishRequest) {
			r.Payload, r.Data = nil, structpb.NewStringValue(strings.Repeat("x", maxPayload))
		}, []string{fmt.Sprintf("data is %d bytes as JSON; the limit is %d", maxPayload+2, maxPayload)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := valid()
			tc.mod(req)
			_, err := publish(f, req)
			if connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("err = %v (code %v), want InvalidArgument", err, connect.CodeOf(err))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if n := f.msgs(t); n != 0 {
		t.Fatalf("INGEST holds %d messages after only invalid publishes", n)
	}
	// The limits themselves are accepted.
	req := valid()
	req.Payload = make([]byte, maxPayload)
	req.LaneKey = strings.Repeat("é", 128) // 256 bytes
	req.Type = strings.Repeat("t", 128)
	req.IdempotencyKey = strings.Repeat("k", 127) + ":"
	req.CustomerId = strings.Repeat("c", 64)
	if _, err := publish(f, req); err != nil {
		t.Fatalf("publish at every limit: %v", err)
	}
}

func TestPublishBatch(t *testing.T) {
	f := newFixture(t)
	events := make([]*rivorav1.PublishRequest, 5)
	for i := range events {
		events[i] = valid()
		events[i].LaneKey = fmt.Sprintf("user-%d", i%2)
		events[i].Payload = fmt.Appendf(nil, `{"n":%d}`, i)
	}
	events[3].DestinationId = "billing"
	resp, err := f.gw.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{Events: events}))
	if err != nil {
		t.Fatalf("PublishBatch: %v", err)
	}
	ids := resp.Msg.GetEventIds()
	if len(ids) != len(events) {
		t.Fatalf("got %d ids for %d events", len(ids), len(events))
	}
	got := f.stored(t)
	if len(got) != len(events) {
		t.Fatalf("INGEST holds %d events, want %d", len(got), len(events))
	}
	for i, ev := range got {
		if ev.GetEventId() != ids[i] || string(ev.GetPayload()) != fmt.Sprintf(`{"n":%d}`, i) || ev.GetDestinationId() != events[i].GetDestinationId() {
			t.Fatalf("stored[%d] = %s %s %q; want ids[%d] = %s in request order", i, ev.GetEventId(), ev.GetDestinationId(), ev.GetPayload(), i, ids[i])
		}
	}
}

func TestPublishBatchAllOrNothing(t *testing.T) {
	f := newFixture(t)
	events := []*rivorav1.PublishRequest{valid(), valid(), valid(), valid()}
	events[2] = valid()
	events[2].LaneKey = ""
	_, err := f.gw.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{Events: events}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("err = %v, want InvalidArgument", err)
	}
	for _, w := range []string{"events[2]", "lane_key is empty", "nothing in this batch was stored"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
	if n := f.msgs(t); n != 0 {
		t.Fatalf("INGEST holds %d messages after a rejected batch, want 0", n)
	}

	_, err = f.gw.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "events is empty") {
		t.Fatalf("empty batch: err = %v", err)
	}
	big := make([]*rivorav1.PublishRequest, 51)
	for i := range big {
		big[i] = valid()
	}
	_, err = f.gw.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{Events: big}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "51 events; the limit is 50") {
		t.Fatalf("oversized batch: err = %v", err)
	}
	if n := f.msgs(t); n != 0 {
		t.Fatalf("INGEST holds %d messages after rejected batches, want 0", n)
	}
}

func TestIdempotencyKey(t *testing.T) {
	f := newFixture(t)
	req := valid()
	req.IdempotencyKey = "order-1:created"
	first, err := publish(f, req)
	if err != nil {
		t.Fatal(err)
	}
	wantID := eventid.FromKey(req.DestinationId, req.CustomerId, req.IdempotencyKey)
	if first.GetEventId() != wantID || first.GetDuplicate() {
		t.Fatalf("first publish = %+v, want id %q, not duplicate", first, wantID)
	}
	// The same key and the same event: the first id, stored once.
	again := proto.Clone(req).(*rivorav1.PublishRequest)
	second, err := publish(f, again)
	if err != nil {
		t.Fatal(err)
	}
	if second.GetEventId() != first.GetEventId() || !second.GetDuplicate() {
		t.Fatalf("repeated publish = %+v, want id %q with duplicate=true", second, first.GetEventId())
	}
	// A batch repeating the key is deduplicated too.
	if _, err := f.gw.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{again}})); err != nil {
		t.Fatal(err)
	}
	got := f.stored(t)
	if len(got) != 1 {
		t.Fatalf("INGEST holds %d events after three publishes with one key, want 1", len(got))
	}
	if string(got[0].GetPayload()) != string(req.GetPayload()) {
		t.Fatalf("stored payload %q, want the first publish's %q", got[0].GetPayload(), req.GetPayload())
	}
}

// A key is scoped to its customer and destination: another customer's
// (or destination's) same key is another event.
func TestIdempotencyKeyIsScoped(t *testing.T) {
	f := newFixture(t)
	seen := map[string]bool{}
	for _, scope := range [][2]string{{"orders", "acme"}, {"orders", "globex"}, {"billing", "acme"}} {
		req := valid()
		req.DestinationId, req.CustomerId, req.IdempotencyKey = scope[0], scope[1], "invoice-7"
		resp, err := publish(f, req)
		if err != nil {
			t.Fatalf("%v: %v", scope, err)
		}
		if resp.GetDuplicate() || seen[resp.GetEventId()] {
			t.Fatalf("%v: %+v, want a new event", scope, resp)
		}
		seen[resp.GetEventId()] = true
	}
	if n := len(f.stored(t)); n != 3 {
		t.Fatalf("INGEST holds %d events, want 3 (one per scope)", n)
	}
}

// Stripe's rule: a key reused for another event is refused, alone or in
// a batch (which then stores nothing), and the first event stays.
func TestIdempotencyKeyReusedForAnotherEvent(t *testing.T) {
	f := newFixture(t)
	req := valid()
	req.IdempotencyKey = "order-9"
	first, err := publish(f, req)
	if err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(*rivorav1.PublishRequest){
		"payload":      func(r *rivorav1.PublishRequest) { r.Payload = []byte(`{"order":2}`) },
		"type":         func(r *rivorav1.PublishRequest) { r.Type = "order.cancelled" },
		"lane":         func(r *rivorav1.PublishRequest) { r.LaneKey = "user-43" },
		"content type": func(r *rivorav1.PublishRequest) { r.ContentType = "text/plain" },
	} {
		other := proto.Clone(req).(*rivorav1.PublishRequest)
		change(other)
		_, err := publish(f, other)
		if connect.CodeOf(err) != connect.CodeAlreadyExists || !strings.Contains(err.Error(), `idempotency key "order-9" was already used`) || !strings.Contains(err.Error(), first.GetEventId()) {
			t.Fatalf("another %s with the same key: err = %v, want AlreadyExists naming the key and event %s", name, err, first.GetEventId())
		}
		fresh := valid()
		fresh.IdempotencyKey = "fresh-" + strings.ReplaceAll(name, " ", "-")
		_, err = f.gw.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{fresh, other}}))
		if connect.CodeOf(err) != connect.CodeAlreadyExists || !strings.Contains(err.Error(), "events[1]") || !strings.Contains(err.Error(), "nothing in this batch was stored") {
			t.Fatalf("batch reusing the key for another %s: err = %v, want AlreadyExists for events[1]", name, err)
		}
	}
	got := f.stored(t)
	if len(got) != 1 || string(got[0].GetPayload()) != string(req.GetPayload()) {
		t.Fatalf("INGEST holds %v, want only the first event", got)
	}
	// The batch's other event was refused with it, and is accepted alone.
	fresh := valid()
	fresh.IdempotencyKey = "fresh-payload"
	if resp, err := publish(f, fresh); err != nil || resp.GetDuplicate() {
		t.Fatalf("the refused batch's other event alone: %+v, %v; want stored", resp, err)
	}
}

func TestIdempotencyKeyReservedPrefix(t *testing.T) {
	f := newFixture(t)
	for _, key := range []string{"replay:abc:1", "resend:abc:1"} {
		req := valid()
		req.IdempotencyKey = key
		_, err := publish(f, req)
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "reserves") {
			t.Fatalf("key %q: err = %v, want InvalidArgument (reserved)", key, err)
		}
	}
}

// FuzzPublish feeds hostile field values through the public handler: it
// never panics, and answers either InvalidArgument (nothing stored) or
// success with the event stored exactly as sent.
func FuzzPublish(f *testing.F) {
	fx := newFixture(f)
	f.Add("orders", "acme", "user-1", "order.created", []byte(`{}`), "", "")
	f.Add("billing", "c_1", "é ü \u2028", "t", []byte{0, 1, 2}, "text/plain", "key:1")
	f.Add("orders", "acme", "a.b.*.>", "x", []byte{}, "", "key.1")
	f.Add("orders", "acme", "\xff\xfe", "x", []byte{}, "", "")
	f.Add("orders", "acme", "~41~", "x", []byte{}, "", "")
	f.Add("orders>", "acme", "k", "x", []byte{}, "", "")
	f.Add("orders", "ac me", "k", "x", []byte{}, "", "")
	f.Add("", "", "", "", []byte(nil), "", "")
	f.Add("orders", "acme", "k", strings.Repeat("t", 200), []byte{}, "", "")
	f.Add("orders", "acme", "k", "x", make([]byte, maxPayload+1), "", "")
	f.Fuzz(func(t *testing.T, dest, cust, key, typ string, payload []byte, contentType, idem string) {
		req := &rivorav1.PublishRequest{DestinationId: dest, CustomerId: cust, LaneKey: key, Type: typ, Payload: payload, ContentType: contentType, IdempotencyKey: idem}
		before := fx.msgs(t)
		resp, err := fx.gw.Publish(context.Background(), connect.NewRequest(req))
		if err != nil {
			// AlreadyExists: the fuzzer reused a key for another event.
			if code := connect.CodeOf(err); code != connect.CodeInvalidArgument && (code != connect.CodeAlreadyExists || idem == "") {
				t.Fatalf("Publish(%v): err = %v, want InvalidArgument, AlreadyExists for a reused key, or success", req, err)
			}
			if after := fx.msgs(t); after != before {
				t.Fatalf("rejected publish changed INGEST from %d to %d messages", before, after)
			}
			return
		}
		if resp.Msg.GetFannedOut() {
			// No destination: a fan-out, and the fixture has no subscription.
			if dest != "" || len(resp.Msg.GetRoutes()) != 0 || fx.msgs(t) != before {
				t.Fatalf("Publish(%v) fanned out: %v, want only without destination, to no route, storing nothing", req, resp.Msg)
			}
			return
		}
		if resp.Msg.GetDuplicate() {
			if idem == "" || resp.Msg.GetEventId() != eventid.FromKey(dest, cust, idem) {
				t.Fatalf("duplicate without a repeated idempotency key: %v", resp.Msg)
			}
			return
		}
		subject := lanes.IngestSubject(lanes.Partition(dest, partitions), dest)
		raw, err := fx.st.GetLastMsgForSubject(context.Background(), subject)
		if err != nil {
			t.Fatalf("accepted event not on %q: %v", subject, err)
		}
		ev := &rivorav1.Event{}
		if err := proto.Unmarshal(raw.Data, ev); err != nil {
			t.Fatal(err)
		}
		wantType := contentType
		if wantType == "" {
			wantType = "application/json"
		}
		if ev.GetEventId() != resp.Msg.GetEventId() || ev.GetDestinationId() != dest || ev.GetCustomerId() != cust ||
			ev.GetLaneKey() != key || ev.GetType() != typ || string(ev.GetPayload()) != string(payload) || ev.GetContentType() != wantType {
			t.Fatalf("stored %v, want the request %v", ev, req)
		}
		// What was accepted must make a well-formed lane subject that
		// parses back to the same lane.
		id := lanes.ID{Destination: dest, Customer: cust, Key: key}
		if _, back, err := lanes.ParseSubject(id.Subject(0)); err != nil || back != id {
			t.Fatalf("accepted lane %+v does not round-trip through its subject: %+v, %v", id, back, err)
		}
	})
}

// A resend keeps the event id and is stored under its own dedup id: the
// original's dedup entry does not swallow it, two resends with different
// ids are both stored, and the same id again is a duplicate.
func TestResendIsStoredOncePerDedupID(t *testing.T) {
	f := newFixture(t)
	first, err := publish(f, valid())
	if err != nil {
		t.Fatal(err)
	}
	original := f.stored(t)[0]
	before := time.Now()
	for i, dedup := range []string{"resend:a", "resend:b", "resend:a"} {
		ev, dup, err := f.gw.Resend(context.Background(), original, dedup)
		if err != nil {
			t.Fatalf("Resend: %v", err)
		}
		if want := i == 2; dup != want {
			t.Fatalf("resend %d (%s): duplicate = %v, want %v", i, dedup, dup, want)
		}
		if ev.GetEventId() != first.GetEventId() || !ev.GetResent() || ev.GetAcceptedAt().AsTime().Before(before) {
			t.Fatalf("resent event = %v; want id %s, resent, accepted now", ev, first.GetEventId())
		}
	}
	if n := f.msgs(t); n != 3 {
		t.Fatalf("INGEST holds %d events after a publish and two distinct resends, want 3", n)
	}
	raw, err := f.st.GetMsg(context.Background(), 3)
	if err != nil {
		t.Fatal(err)
	}
	ev := &rivorav1.Event{}
	if err := proto.Unmarshal(raw.Data, ev); err != nil {
		t.Fatal(err)
	}
	if ev.GetEventId() != first.GetEventId() || !ev.GetResent() || string(ev.GetPayload()) != string(original.GetPayload()) {
		t.Fatalf("stored resend = %v; want the original's id and payload, resent", ev)
	}
	if id := raw.Header.Get(jetstream.MsgIDHeader); id != "resend:b" {
		t.Fatalf("resend stored with Nats-Msg-Id %q, want resend:b", id)
	}
	gone := proto.Clone(original).(*rivorav1.Event)
	gone.DestinationId = "deleted"
	if _, _, err := f.gw.Resend(context.Background(), gone, "resend:c"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("Resend to an unregistered destination = %v, want FailedPrecondition", err)
	}
}

// failingStore owns every partition and fails every write.
type failingStore struct{}

func (failingStore) AppendLocal(context.Context, int, []ingest.LocalEvent) ([]ingest.Stored, bool, error) {
	return nil, true, errors.New("disk full")
}

func (failingStore) Owns(int) bool { return true }

func (failingStore) MayHold(int, string) bool                         { return true }
func (failingStore) WaitsInIngest(context.Context, int) (bool, error) { return true, nil }

// A key binds only an event that was stored: after a failed store, a
// retry may carry a rebuilt payload.
func TestIdempotencyKeyFreeAfterAFailedStore(t *testing.T) {
	f := newFixture(t)
	plain := f.gw
	f.gw = f.withLocal(t, failingStore{})
	req := valid()
	req.IdempotencyKey = "order-3"
	if _, err := publish(f, req); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("publish into a failing store: %v, want Unavailable", err)
	}
	batch := []*rivorav1.PublishRequest{proto.Clone(req).(*rivorav1.PublishRequest)}
	batch[0].IdempotencyKey = "order-4"
	if _, err := f.gw.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{Events: batch})); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("batch into a failing store: %v, want Unavailable", err)
	}
	f.gw = plain
	for _, key := range []string{"order-3", "order-4"} {
		rebuilt := valid()
		rebuilt.IdempotencyKey = key
		rebuilt.Payload = []byte(`{"order":3,"at":"retry"}`)
		if resp, err := publish(f, rebuilt); err != nil || resp.GetDuplicate() {
			t.Fatalf("retry of %s with a rebuilt payload: %+v, %v; want stored", key, resp, err)
		}
	}
	if n := len(f.stored(t)); n != 2 {
		t.Fatalf("INGEST holds %d events, want the 2 retries", n)
	}
}

// laterCount is a partition count that becomes known later, as the
// control plane's first config makes it.
type laterCount struct{ n atomic.Int32 }

func (c *laterCount) Count() int { return int(c.n.Load()) }

// TestPublishWhileTheStoreIsDown: once the agent's store is gone (its
// embedded server disabled JetStream on a full disk), Publish and
// PublishBatch are refused at once as Unavailable, naming why, and
// nothing is stored; before that, and once it is back, they are accepted.
func TestPublishWhileTheStoreIsDown(t *testing.T) {
	f := newFixture(t)
	var down atomic.Pointer[error]
	gw := f.with(t, ingest.Config{StoreDown: func() error {
		if p := down.Load(); p != nil {
			return *p
		}
		return nil
	}})
	if _, err := gw.Publish(context.Background(), connect.NewRequest(valid())); err != nil {
		t.Fatalf("Publish with the store up: %v", err)
	}
	lost := fmt.Errorf("%w (store /data/jetstream): the disk is full (0 bytes free)", natsd.ErrJetStreamDisabled)
	down.Store(&lost)
	before := f.msgs(t)
	_, err := gw.Publish(context.Background(), connect.NewRequest(valid()))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "disk is full") || !strings.Contains(err.Error(), "another agent") {
		t.Fatalf("Publish with the store down: %v, want Unavailable saying the disk is full and to publish through another agent", err)
	}
	_, err = gw.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{valid()}}))
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("PublishBatch with the store down: %v, want Unavailable", err)
	}
	if n := f.msgs(t); n != before {
		t.Fatalf("INGEST went from %d to %d messages while the store was down", before, n)
	}
	down.Store(nil)
	if _, err := gw.Publish(context.Background(), connect.NewRequest(valid())); err != nil {
		t.Fatalf("Publish with the store back: %v", err)
	}
}

// An event of another customer that reached a customer's own destination
// (stored before publishing to one was checked) is never sent to it
// again: neither a replay nor a resend takes it.
func TestOthersEventIsNotSentAgainToACustomersOwnDestination(t *testing.T) {
	f := newFixture(t)
	f.reg.Update(time.Now(), []*rivorav1.Destination{{Id: "acme-hooks", Url: "http://127.0.0.1:1/hook", Secret: secret, OwnerCustomer: "acme"}}, nil)
	theirs := &rivorav1.Event{EventId: "01900000-0000-7000-8000-000000000001", DestinationId: "acme-hooks", CustomerId: "globex", LaneKey: "u", Type: "t", Payload: []byte(`{}`)}
	err := f.gw.Replayable(context.Background(), &rivorav1.DeadLetter{Event: theirs})
	if connect.CodeOf(errkind.AsConnect(err)) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), `destination "acme-hooks" is customer "acme"'s own`) {
		t.Errorf("replaying globex's dead letter to acme's own destination: %v; want refused as acme's own", err)
	}
	if _, _, err := f.gw.Resend(context.Background(), theirs, "resend:test"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("resending globex's event to acme's own destination: %v; want failed_precondition", err)
	}
	mine := proto.Clone(theirs).(*rivorav1.Event)
	mine.CustomerId = "acme"
	if err := f.gw.Replayable(context.Background(), &rivorav1.DeadLetter{Event: mine}); err != nil {
		t.Errorf("replaying acme's own dead letter: %v", err)
	}
}

// With room for a few events at once, concurrent publishes of several
// customers, batches larger than the room among them, all wait their
// turns and are all stored: none is lost or left waiting.
func TestPublishesTakeTurns(t *testing.T) {
	f := newFixture(t)
	gw := f.with(t, ingest.Config{ConcurrentEvents: 3})
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for c := range 4 {
		for i := range 10 {
			wg.Go(func() {
				ev := valid()
				ev.CustomerId = fmt.Sprintf("customer-%d", c)
				ev.Payload = fmt.Appendf(nil, `{"c":%d,"i":%d}`, c, i)
				if i%2 == 0 {
					_, err := gw.Publish(context.Background(), connect.NewRequest(ev))
					errs <- err
					return
				}
				batch := []*rivorav1.PublishRequest{ev}
				for j := range 4 {
					more := proto.Clone(ev).(*rivorav1.PublishRequest)
					more.Payload = fmt.Appendf(nil, `{"c":%d,"i":%d,"j":%d}`, c, i, j)
					batch = append(batch, more)
				}
				_, err := gw.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{Events: batch}))
				errs <- err
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a publish waiting its turn failed: %v", err)
		}
	}
	if got, want := f.msgs(t), uint64(4*(5*1+5*5)); got != want {
		t.Fatalf("INGEST holds %d events, want %d", got, want)
	}
}
