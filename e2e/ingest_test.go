package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk"
)

// Invalid events are refused with InvalidArgument and a message naming what
// is wrong; a batch is all or nothing; an idempotency key stores once.
func TestIngestValidationAndIdempotency(t *testing.T) {
	d := startDev(t, devOptions{})
	p := newPartner(t)
	createDestination(t, d, "v", p, "", nil)
	ingest := d.Ingest()
	ctx := ctxTimeout(t, 2*time.Minute)

	good := func() *rivorav1.PublishRequest {
		return &rivorav1.PublishRequest{DestinationId: "v", CustomerId: "cust", LaneKey: "lane", Type: "t", Payload: []byte(`{}`)}
	}
	const maxPayload = 256 << 10

	cases := []struct {
		name string
		mod  func(*rivorav1.PublishRequest)
		want []string // the message must mention one of these (lower case)
	}{
		{"unknown destination", func(r *rivorav1.PublishRequest) { r.DestinationId = "no-such-dest" }, []string{"no-such-dest"}},
		{"empty lane key", func(r *rivorav1.PublishRequest) { r.LaneKey = "" }, []string{"lane"}},
		{"lane key over 256 bytes", func(r *rivorav1.PublishRequest) { r.LaneKey = strings.Repeat("l", 257) }, []string{"lane"}},
		{"bad customer id", func(r *rivorav1.PublishRequest) { r.CustomerId = "a/b c" }, []string{"customer"}},
		{"content type with CR/LF", func(r *rivorav1.PublishRequest) { r.ContentType = "application/json\r\nX-Injected: 1" }, []string{"content_type"}},
		{"reserved idempotency key", func(r *rivorav1.PublishRequest) { r.IdempotencyKey = "replay:x" }, []string{"reserves"}},
		{"payload over the limit", func(r *rivorav1.PublishRequest) { r.Payload = bytes.Repeat([]byte("x"), maxPayload+1) }, []string{"payload"}},
		{"bad idempotency key", func(r *rivorav1.PublishRequest) { r.IdempotencyKey = "not valid\n*>key" }, []string{"idempotency"}},
	}
	for _, tc := range cases {
		req := good()
		tc.mod(req)
		_, err := ingest.Publish(ctx, connect.NewRequest(req))
		requireInvalidArgument(t, tc.name, err, tc.want...)
	}

	// Through the SDK the code survives too.
	_, err := d.SDK().Publish(ctx, sdk.Event{Destination: "no-such-dest", Customer: "cust", Lane: "lane", Payload: []byte(`{}`)})
	requireInvalidArgument(t, "sdk: unknown destination", err, "no-such-dest")

	// A payload of exactly the limit is accepted and delivered intact.
	big := good()
	big.LaneKey = "big"
	big.Payload = bytes.Repeat([]byte("y"), maxPayload)
	bigResp, err := ingest.Publish(ctx, connect.NewRequest(big))
	if err != nil {
		t.Fatalf("payload of exactly %d bytes refused: %v", maxPayload, err)
	}
	// In JSON too, where the payload travels in base64, a third larger.
	jsonIngest := rivorav1connect.NewIngestServiceClient(authedHTTP, d.URL(), connect.WithProtoJSON())
	bigJSON := proto.Clone(big).(*rivorav1.PublishRequest)
	bigJSON.LaneKey = "big-json"
	if _, err := jsonIngest.Publish(ctx, connect.NewRequest(bigJSON)); err != nil {
		t.Fatalf("payload of exactly %d bytes in JSON refused: %v", maxPayload, err)
	}

	// Batch: one bad event (index 3) stores none of the five.
	const batchLane = "batch-lane"
	keys := make([]string, 5)
	batch := make([]*rivorav1.PublishRequest, 5)
	for i := range batch {
		keys[i] = fmt.Sprintf("idem-batch-%d-%d", time.Now().UnixNano(), i)
		batch[i] = good()
		batch[i].LaneKey = batchLane
		batch[i].IdempotencyKey = keys[i]
		batch[i].Payload = fmt.Appendf(nil, `{"batch":%d}`, i)
	}
	batch[3].LaneKey = ""
	_, err = ingest.PublishBatch(ctx, connect.NewRequest(&rivorav1.PublishBatchRequest{Events: batch}))
	requireInvalidArgument(t, "batch with a bad event", err, "lane")
	if err != nil && !regexp.MustCompile(`\b3\b`).MatchString(connectMessage(err)) {
		t.Errorf("batch error %q does not name index 3", connectMessage(err))
	}

	// Nothing of the refused batch was stored: a marker published after it in
	// the same lane is delivered with nothing before it.
	marker := good()
	marker.LaneKey = batchLane
	marker.Payload = []byte(`{"marker":true}`)
	markerResp, err := ingest.Publish(ctx, connect.NewRequest(marker))
	if err != nil {
		t.Fatalf("publish marker: %v", err)
	}
	p.WaitDelivered(t, []string{markerResp.Msg.GetEventId(), bigResp.Msg.GetEventId()}, 30*time.Second)
	for _, r := range p.Snapshot() {
		if r.LaneKey == batchLane && r.ID != markerResp.Msg.GetEventId() {
			t.Errorf("event %s of the refused batch was delivered", r.ID)
		}
		if r.ID == bigResp.Msg.GetEventId() && !bytes.Equal(r.Payload, big.Payload) {
			t.Errorf("256 KiB payload delivered as %d bytes", len(r.Payload))
		}
	}

	// The corrected batch is accepted: the keys were not burnt by the refusal.
	batch[3].LaneKey = batchLane
	bresp, err := ingest.PublishBatch(ctx, connect.NewRequest(&rivorav1.PublishBatchRequest{Events: batch}))
	if err != nil {
		t.Fatalf("corrected batch refused: %v", err)
	}
	batchIDs := bresp.Msg.GetEventIds()
	if len(batchIDs) != len(batch) {
		t.Fatalf("corrected batch: %d ids for %d events", len(batchIDs), len(batch))
	}
	p.WaitDelivered(t, batchIDs, 30*time.Second)
	pub := newPublished()
	pub.add("cust/"+batchLane, markerResp.Msg.GetEventId(), marker.Payload)
	for i, id := range batchIDs {
		pub.add("cust/"+batchLane, id, batch[i].Payload)
	}
	checkLaneOrder(t, p, pub.ByLane, pub.Payloads, nil)

	// Repeating an idempotency key returns the same id and delivers once.
	key := fmt.Sprintf("idem-once-%d", time.Now().UnixNano())
	once := good()
	once.LaneKey = "once"
	once.IdempotencyKey = key
	r1, err := ingest.Publish(ctx, connect.NewRequest(once))
	if err != nil {
		t.Fatalf("publish with idempotency key: %v", err)
	}
	if r1.Msg.GetDuplicate() {
		t.Errorf("first publish with key %s reported duplicate", key)
	}
	r2, err := ingest.Publish(ctx, connect.NewRequest(once))
	if err != nil {
		t.Fatalf("republish with the same idempotency key: %v", err)
	}
	if r2.Msg.GetEventId() != r1.Msg.GetEventId() {
		t.Errorf("same idempotency key gave ids %q and %q", r1.Msg.GetEventId(), r2.Msg.GetEventId())
	}
	if !r2.Msg.GetDuplicate() {
		t.Errorf("second publish with key %s not reported as duplicate", key)
	}
	id3, err := d.SDK().Publish(ctx, sdk.Event{Destination: "v", Customer: "cust", Lane: "once", Type: "t", Payload: []byte(`{}`), IdempotencyKey: key})
	if err != nil {
		t.Fatalf("sdk publish with the same idempotency key: %v", err)
	}
	if id3 != r1.Msg.GetEventId() {
		t.Errorf("sdk publish with the same key gave id %q, want %q", id3, r1.Msg.GetEventId())
	}
	after := good()
	after.LaneKey = "once"
	afterResp, err := ingest.Publish(ctx, connect.NewRequest(after))
	if err != nil {
		t.Fatalf("publish after: %v", err)
	}
	p.WaitDelivered(t, []string{r1.Msg.GetEventId(), afterResp.Msg.GetEventId()}, 30*time.Second)
	if n := p.AttemptsOf(r1.Msg.GetEventId()); n != 1 {
		t.Errorf("event published 3 times with one idempotency key reached the partner %d times, want 1", n)
	}

	// A key is scoped to its customer: another customer's same key is
	// another event, and both are delivered.
	other := good()
	other.CustomerId, other.LaneKey, other.IdempotencyKey = "cust-b", "once", key
	r4, err := ingest.Publish(ctx, connect.NewRequest(other))
	if err != nil {
		t.Fatalf("another customer publishing the same key: %v", err)
	}
	if r4.Msg.GetDuplicate() || r4.Msg.GetEventId() == r1.Msg.GetEventId() {
		t.Errorf("another customer's same key = %v, want a new event (not %s)", r4.Msg, r1.Msg.GetEventId())
	}
	p.WaitDelivered(t, []string{r4.Msg.GetEventId()}, 30*time.Second)
	// The same key for another payload is refused, and nothing is stored.
	conflicting := proto.Clone(once).(*rivorav1.PublishRequest)
	conflicting.Payload = []byte(`{"another":"event"}`)
	_, err = ingest.Publish(ctx, connect.NewRequest(conflicting))
	if connect.CodeOf(err) != connect.CodeAlreadyExists || !strings.Contains(connectMessage(err), "already used") {
		t.Errorf("same key with another payload: %v, want AlreadyExists saying the key was already used", err)
	}
	if n := p.AttemptsOf(r1.Msg.GetEventId()); n != 1 {
		t.Errorf("the refused reuse reached the partner: %d attempts of %s, want 1", n, r1.Msg.GetEventId())
	}

	// An unknown event id is NotFound.
	_, err = d.Events().GetEvent(ctx, connect.NewRequest(&rivorav1.GetEventRequest{EventId: "0190a5b2-0000-7000-8000-000000000000"}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetEvent(unknown id) = %v, want NotFound", err)
	}
}

func connectMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

func requireInvalidArgument(t testing.TB, what string, err error, mention ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted, want InvalidArgument", what)
		return
	}
	if code := connect.CodeOf(err); code != connect.CodeInvalidArgument {
		t.Errorf("%s: code %v (%v), want InvalidArgument", what, code, err)
		return
	}
	msg := strings.ToLower(connectMessage(err))
	for _, m := range mention {
		if strings.Contains(msg, strings.ToLower(m)) {
			t.Logf("%s: InvalidArgument %q", what, connectMessage(err))
			return
		}
	}
	t.Errorf("%s: message %q does not mention any of %q", what, connectMessage(err), mention)
}

// What docs/api.md's curl example sends: JSON with the body in data, not
// base64 in payload. The partner receives that JSON, compact, as
// application/json; both fields at once is refused.
func TestPublishJSONDataOverHTTP(t *testing.T) {
	d := startDev(t, devOptions{})
	p := newPartner(t)
	createDestination(t, d, "orders", p, "", nil)
	post := func(body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, d.URL()+rivorav1connect.IngestServicePublishProcedure, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := authedHTTP.Do(req)
		if err != nil {
			t.Fatalf("POST Publish: %v", err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	status, out := post(`{"destinationId":"orders","customerId":"acme","laneKey":"u1","type":"order.created",
		"data": {"order": 1, "items": [{"sku": "a-1", "qty": 2}], "note": "<ok> & done"}}`)
	if status != http.StatusOK {
		t.Fatalf("Publish with data: %d %s", status, out)
	}
	var answer struct{ EventID string }
	if err := json.Unmarshal(out, &answer); err != nil || answer.EventID == "" {
		t.Fatalf("Publish answered %s (%v); want an eventId", out, err)
	}
	p.WaitDelivered(t, []string{answer.EventID}, 30*time.Second)
	var got delivery
	for _, r := range p.Snapshot() {
		if r.ID == answer.EventID {
			got = r
		}
	}
	if want := `{"items":[{"qty":2,"sku":"a-1"}],"note":"<ok> & done","order":1}`; string(got.Payload) != want {
		t.Fatalf("partner received %q, want %q", got.Payload, want)
	}
	if ct := got.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("delivered with content-type %q, want application/json", ct)
	}
	// Binary protobuf encodes data up to 6 times larger than its JSON:
	// data whose compact JSON is just under --max-payload (256 KiB) still
	// fits the request bound.
	zeros := make([]*structpb.Value, 130_000) // "[0,0,…]": 260,001 bytes of JSON, 1.4 MB of protobuf
	for i := range zeros {
		zeros[i] = structpb.NewNumberValue(0)
	}
	big, err := d.Ingest().Publish(ctxTimeout(t, 30*time.Second), connect.NewRequest(&rivorav1.PublishRequest{
		DestinationId: "orders", CustomerId: "acme", LaneKey: "u2", Type: "t",
		Data: structpb.NewListValue(&structpb.ListValue{Values: zeros}),
	}))
	if err != nil {
		t.Fatalf("binary Publish of data whose JSON is 260,001 bytes: %v", err)
	}
	p.WaitDelivered(t, []string{big.Msg.GetEventId()}, 30*time.Second)
	for _, r := range p.Snapshot() {
		if r.ID == big.Msg.GetEventId() && len(r.Payload) != 260_001 {
			t.Fatalf("partner received %d bytes, want the 260,001 of the compact JSON", len(r.Payload))
		}
	}
	status, out = post(`{"destinationId":"orders","customerId":"acme","laneKey":"u1","type":"x","payload":"e30=","data":{}}`)
	if status != http.StatusBadRequest || !strings.Contains(string(out), "set payload (bytes) or data (a JSON value), not both") {
		t.Fatalf("payload and data: %d %s; want 400 naming the two", status, out)
	}
}
