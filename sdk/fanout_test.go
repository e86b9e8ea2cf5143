package sdk_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk"
)

// fanOutServer answers like an agent that routes by subscription: an
// event without a destination goes to one route per subscription in
// routes (event id "<subscription>/<key>"), an event with one is stored
// under "<destination>/<key>". failFirst calls fail Unavailable.
type fanOutServer struct {
	rivorav1connect.UnimplementedIngestServiceHandler

	routes    map[string][]string // type -> subscriptions (all to "d-"+subscription)
	failFirst int
	// batchIDsOnly answers batches as a server from before fan-out did:
	// event ids, no results.
	batchIDsOnly bool

	mu       sync.Mutex
	calls    int
	requests []*rivorav1.PublishRequest
}

func (s *fanOutServer) answer(req *rivorav1.PublishRequest) *rivorav1.PublishResponse {
	key := req.GetIdempotencyKey()
	if req.GetDestinationId() != "" {
		return &rivorav1.PublishResponse{EventId: req.GetDestinationId() + "/" + key}
	}
	resp := &rivorav1.PublishResponse{FannedOut: true}
	subs := s.routes[req.GetType()]
	if req.GetSubscriptionId() != "" {
		subs = []string{req.GetSubscriptionId()}
	}
	for _, sub := range subs {
		resp.Routes = append(resp.Routes, &rivorav1.Route{SubscriptionId: sub, DestinationId: "d-" + sub, EventId: sub + "/" + key})
	}
	return resp
}

func (s *fanOutServer) call(reqs ...*rivorav1.PublishRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	for _, r := range reqs {
		s.requests = append(s.requests, proto.Clone(r).(*rivorav1.PublishRequest))
	}
	if s.calls <= s.failFirst {
		return connect.NewError(connect.CodeUnavailable, nil)
	}
	return nil
}

func (s *fanOutServer) Publish(_ context.Context, req *connect.Request[rivorav1.PublishRequest]) (*connect.Response[rivorav1.PublishResponse], error) {
	if err := s.call(req.Msg); err != nil {
		return nil, err
	}
	return connect.NewResponse(s.answer(req.Msg)), nil
}

func (s *fanOutServer) PublishBatch(_ context.Context, req *connect.Request[rivorav1.PublishBatchRequest]) (*connect.Response[rivorav1.PublishBatchResponse], error) {
	if err := s.call(req.Msg.GetEvents()...); err != nil {
		return nil, err
	}
	resp := &rivorav1.PublishBatchResponse{}
	for _, e := range req.Msg.GetEvents() {
		r := s.answer(e)
		resp.EventIds = append(resp.EventIds, r.GetEventId())
		if !s.batchIDsOnly {
			resp.Results = append(resp.Results, r)
		}
	}
	return connect.NewResponse(resp), nil
}

func startFanOut(t *testing.T, s *fanOutServer) *sdk.Client {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewIngestServiceHandler(s))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return sdk.New(ts.URL, fastRetry())
}

var fanOutEvent = sdk.Event{Customer: "c1", Lane: "u1", Type: "order.created", Payload: []byte(`{"amount":120}`)}

func TestPublishResultFansOut(t *testing.T) {
	srv := &fanOutServer{routes: map[string][]string{"order.created": {"sub_1", "sub_2"}}, failFirst: 1}
	c := startFanOut(t, srv)

	res, err := c.PublishResult(t.Context(), fanOutEvent)
	if err != nil {
		t.Fatalf("PublishResult: %v", err)
	}
	key := srv.requests[0].GetIdempotencyKey()
	if k, err := uuid.Parse(key); err != nil || k.Version() != 7 || srv.requests[1].GetIdempotencyKey() != key {
		t.Fatalf("keys %q then %q: want one UUIDv7 assigned before the first try, sent again on the retry", key, srv.requests[1].GetIdempotencyKey())
	}
	if srv.requests[1].GetDestinationId() != "" || srv.requests[1].GetCustomerId() != "c1" || srv.requests[1].GetType() != "order.created" {
		t.Fatalf("request = %v", srv.requests[1])
	}
	want := sdk.Result{FannedOut: true, Routes: []sdk.Route{
		{Subscription: "sub_1", Destination: "d-sub_1", EventID: "sub_1/" + key},
		{Subscription: "sub_2", Destination: "d-sub_2", EventID: "sub_2/" + key},
	}}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("PublishResult = %+v, want %+v", res, want)
	}
	if ids := res.EventIDs(); !reflect.DeepEqual(ids, []string{"sub_1/" + key, "sub_2/" + key}) {
		t.Fatalf("EventIDs = %v", ids)
	}

	// No subscription matched: not an error, nothing stored.
	res, err = c.PublishResult(t.Context(), sdk.Event{Customer: "c1", Lane: "u1", Type: "invoice.paid", Payload: []byte("{}")})
	if err != nil || !res.FannedOut || len(res.Routes) != 0 || len(res.EventIDs()) != 0 {
		t.Fatalf("no match: %+v, %v", res, err)
	}

	// A test event to one subscription.
	ev := fanOutEvent
	ev.Subscription, ev.IdempotencyKey = "sub_9", "test-1"
	res, err = c.PublishResult(t.Context(), ev)
	if err != nil || len(res.Routes) != 1 || res.Routes[0].EventID != "sub_9/test-1" || srv.requests[len(srv.requests)-1].GetSubscriptionId() != "sub_9" {
		t.Fatalf("test event: %+v, %v (request %v)", res, err, srv.requests[len(srv.requests)-1])
	}
}

// Publish and PublishBatch keep answering the destination-named event's id.
func TestPublishUnchangedBesideResults(t *testing.T) {
	srv := &fanOutServer{routes: map[string][]string{"order.created": {"sub_1"}}}
	c := startFanOut(t, srv)
	named := fanOutEvent
	named.Destination, named.IdempotencyKey = "orders", "k1"
	id, err := c.Publish(t.Context(), named)
	if err != nil || id != "orders/k1" {
		t.Fatalf("Publish = %q, %v", id, err)
	}
	res, err := c.PublishResult(t.Context(), named)
	if err != nil || !reflect.DeepEqual(res, sdk.Result{EventID: "orders/k1"}) || !reflect.DeepEqual(res.EventIDs(), []string{"orders/k1"}) {
		t.Fatalf("PublishResult of a destination-named event = %+v, %v", res, err)
	}
	// A fan-out has no single id: Publish answers "" (PublishResult has them).
	if id, err := c.Publish(t.Context(), fanOutEvent); err != nil || id != "" {
		t.Fatalf("Publish of a fan-out = %q, %v", id, err)
	}
	ids, err := c.PublishBatch(t.Context(), []sdk.Event{named, fanOutEvent})
	if err != nil || len(ids) != 2 || ids[0] != "orders/k1" || ids[1] != "" {
		t.Fatalf("PublishBatch = %q, %v", ids, err)
	}
}

func TestPublishBatchResults(t *testing.T) {
	srv := &fanOutServer{routes: map[string][]string{"order.created": {"sub_1", "sub_2"}}, failFirst: 1}
	c := startFanOut(t, srv)
	named := fanOutEvent
	named.Destination, named.IdempotencyKey = "orders", "k1"
	results, err := c.PublishBatchResults(t.Context(), []sdk.Event{named, fanOutEvent})
	if err != nil {
		t.Fatalf("PublishBatchResults: %v", err)
	}
	key := srv.requests[1].GetIdempotencyKey()
	if key == "" || srv.requests[3].GetIdempotencyKey() != key {
		t.Fatalf("the fan-out's key was not kept across the retry: %q then %q", key, srv.requests[3].GetIdempotencyKey())
	}
	want := []sdk.Result{{EventID: "orders/k1"}, {FannedOut: true, Routes: []sdk.Route{
		{Subscription: "sub_1", Destination: "d-sub_1", EventID: "sub_1/" + key},
		{Subscription: "sub_2", Destination: "d-sub_2", EventID: "sub_2/" + key},
	}}}
	if !reflect.DeepEqual(results, want) {
		t.Fatalf("PublishBatchResults = %+v, want %+v", results, want)
	}
	if results, err := c.PublishBatchResults(t.Context(), nil); err != nil || results != nil {
		t.Fatalf("empty batch = %v, %v", results, err)
	}

	// A server from before fan-out answers ids only.
	old := &fanOutServer{batchIDsOnly: true}
	results, err = startFanOut(t, old).PublishBatchResults(t.Context(), []sdk.Event{named})
	if err != nil || !reflect.DeepEqual(results, []sdk.Result{{EventID: "orders/k1"}}) {
		t.Fatalf("PublishBatchResults from an ids-only server = %+v, %v", results, err)
	}
}

// SubscriptionEventID is the server's id of a keyed fan-out's delivery to
// one subscription (a vector of sdk/eventid), never an EventID.
func TestSubscriptionEventID(t *testing.T) {
	const want = "8a7ce3c3-283f-896d-9c25-92d3c4b9683c" // testdata/subscription_eventid_vectors.json
	if got := sdk.SubscriptionEventID("sub_0123456789abcdef", "acme", "order-1"); got != want {
		t.Fatalf("SubscriptionEventID = %q, want %q", got, want)
	}
	if sdk.EventID("sub_0123456789abcdef", "acme", "order-1") == want {
		t.Fatal("EventID and SubscriptionEventID agree on the same parts")
	}
}
