package sdk_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk"
)

var created = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// subscriptionServer is a real SubscriptionService and EventTypeService
// over HTTP that records each request and the Authorization it came with,
// answers with canned messages, and fails the first failFirst calls
// Unavailable.
type subscriptionServer struct {
	rivorav1connect.UnimplementedSubscriptionServiceHandler
	rivorav1connect.UnimplementedEventTypeServiceHandler

	failFirst int

	mu       sync.Mutex
	calls    int
	requests []proto.Message
	auths    []string
}

func (s *subscriptionServer) record(req connect.AnyRequest, m proto.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.requests = append(s.requests, proto.Clone(m))
	s.auths = append(s.auths, req.Header().Get("Authorization"))
	if s.calls <= s.failFirst {
		return connect.NewError(connect.CodeUnavailable, errors.New("injected"))
	}
	return nil
}

func (s *subscriptionServer) snapshot() (calls int, last proto.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, s.requests[len(s.requests)-1]
}

// sub is the canned subscription every answer carries.
func sub(secret string) *rivorav1.Subscription {
	return &rivorav1.Subscription{
		Id: "sub_0000000000000001", CustomerId: "c1", DestinationId: "d2", Types: []string{"order.*"}, Filter: "data.amount > 100",
		Path: "/in/c1", DeliveryUrl: "https://d2.example/in/c1", Secret: secret, SecretFingerprint: "fp-new",
		PreviousSecretFingerprint: "fp-old", PreviousSecretExpiresAt: timestamppb.New(created.Add(time.Hour)),
		Headers: []*rivorav1.Header{{Name: "X-Tenant", ValueFingerprint: "fp-h"}}, Paused: true, Description: "c1's ERP",
		DestinationState: "degraded", CreatedAt: timestamppb.New(created), UpdatedAt: timestamppb.New(created),
	}
}

func (s *subscriptionServer) CreateSubscription(_ context.Context, req *connect.Request[rivorav1.CreateSubscriptionRequest]) (*connect.Response[rivorav1.CreateSubscriptionResponse], error) {
	if err := s.record(req, req.Msg); err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.CreateSubscriptionResponse{Subscription: sub("whsec_created")}), nil
}

func (s *subscriptionServer) GetSubscription(_ context.Context, req *connect.Request[rivorav1.GetSubscriptionRequest]) (*connect.Response[rivorav1.GetSubscriptionResponse], error) {
	if err := s.record(req, req.Msg); err != nil {
		return nil, err
	}
	if req.Msg.GetId() == "sub_404" {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("subscription \"sub_404\" not found"))
	}
	return connect.NewResponse(&rivorav1.GetSubscriptionResponse{Subscription: sub(""), Pending: 7}), nil
}

func (s *subscriptionServer) ListSubscriptions(_ context.Context, req *connect.Request[rivorav1.ListSubscriptionsRequest]) (*connect.Response[rivorav1.ListSubscriptionsResponse], error) {
	if err := s.record(req, req.Msg); err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.ListSubscriptionsResponse{Subscriptions: []*rivorav1.Subscription{sub(""), sub("")}}), nil
}

func (s *subscriptionServer) UpdateSubscription(_ context.Context, req *connect.Request[rivorav1.UpdateSubscriptionRequest]) (*connect.Response[rivorav1.UpdateSubscriptionResponse], error) {
	if err := s.record(req, req.Msg); err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.UpdateSubscriptionResponse{Subscription: sub("")}), nil
}

func (s *subscriptionServer) PauseSubscription(_ context.Context, req *connect.Request[rivorav1.PauseSubscriptionRequest]) (*connect.Response[rivorav1.PauseSubscriptionResponse], error) {
	if err := s.record(req, req.Msg); err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.PauseSubscriptionResponse{Subscription: sub("")}), nil
}

func (s *subscriptionServer) ResumeSubscription(_ context.Context, req *connect.Request[rivorav1.ResumeSubscriptionRequest]) (*connect.Response[rivorav1.ResumeSubscriptionResponse], error) {
	if err := s.record(req, req.Msg); err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.ResumeSubscriptionResponse{Subscription: sub("")}), nil
}

func (s *subscriptionServer) RotateSubscriptionSecret(_ context.Context, req *connect.Request[rivorav1.RotateSubscriptionSecretRequest]) (*connect.Response[rivorav1.RotateSubscriptionSecretResponse], error) {
	if err := s.record(req, req.Msg); err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.RotateSubscriptionSecretResponse{Subscription: sub("whsec_rotated")}), nil
}

func (s *subscriptionServer) DeleteSubscription(_ context.Context, req *connect.Request[rivorav1.DeleteSubscriptionRequest]) (*connect.Response[rivorav1.DeleteSubscriptionResponse], error) {
	if err := s.record(req, req.Msg); err != nil {
		return nil, err
	}
	if !req.Msg.GetForce() {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("3 events pending"))
	}
	return connect.NewResponse(&rivorav1.DeleteSubscriptionResponse{Archived: 3}), nil
}

var orderType = &rivorav1.EventType{Name: "order.created", Description: "An order was placed", Schema: `{"type":"object"}`,
	CreatedAt: timestamppb.New(created), UpdatedAt: timestamppb.New(created)}

func (s *subscriptionServer) ListEventTypes(_ context.Context, req *connect.Request[rivorav1.ListEventTypesRequest]) (*connect.Response[rivorav1.ListEventTypesResponse], error) {
	if err := s.record(req, req.Msg); err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.ListEventTypesResponse{EventTypes: []*rivorav1.EventType{orderType}}), nil
}

func (s *subscriptionServer) GetEventType(_ context.Context, req *connect.Request[rivorav1.GetEventTypeRequest]) (*connect.Response[rivorav1.GetEventTypeResponse], error) {
	if err := s.record(req, req.Msg); err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.GetEventTypeResponse{EventType: orderType}), nil
}

func startSubscriptions(t *testing.T, s *subscriptionServer) *sdk.SubscriptionClient {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewSubscriptionServiceHandler(s))
	mux.Handle(rivorav1connect.NewEventTypeServiceHandler(s))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return sdk.NewSubscriptionClient(ts.URL+"/", sdk.WithToken("rvt_customer"), fastRetry())
}

// wantSub is sub("") as the SDK returns it.
func wantSub() sdk.Subscription {
	return sdk.Subscription{
		ID: "sub_0000000000000001", Customer: "c1", Destination: "d2", Types: []string{"order.*"}, Filter: "data.amount > 100",
		Path: "/in/c1", DeliveryURL: "https://d2.example/in/c1", SecretFingerprint: "fp-new",
		PreviousSecretFingerprint: "fp-old", PreviousSecretExpiresAt: created.Add(time.Hour),
		Headers: []sdk.Header{{Name: "X-Tenant", ValueFingerprint: "fp-h"}}, Paused: true, Description: "c1's ERP",
		DestinationState: "degraded", CreatedAt: created, UpdatedAt: created,
	}
}

func TestSubscriptionClientCreate(t *testing.T) {
	srv := &subscriptionServer{}
	c := startSubscriptions(t, srv)
	got, err := c.Create(t.Context(), sdk.NewSubscription{
		Customer: "c1", Destination: "d2", Types: []string{"order.*"}, Filter: "data.amount > 100", Path: "/in/c1",
		GenerateSecret: true, Headers: []sdk.Header{{Name: "X-Tenant", Value: "c1"}}, Description: "c1's ERP",
	})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	want := wantSub()
	want.Secret = "whsec_created"
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Create = %+v, want %+v", got, want)
	}
	_, req := srv.snapshot()
	wantReq := &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "d2", Types: []string{"order.*"}, Filter: "data.amount > 100",
		Path: "/in/c1", GenerateSecret: true, Headers: []*rivorav1.Header{{Name: "X-Tenant", Value: "c1"}}, Description: "c1's ERP"}
	if !proto.Equal(req, wantReq) {
		t.Fatalf("CreateSubscription request = %v, want %v", req, wantReq)
	}
	if srv.auths[0] != "Bearer rvt_customer" {
		t.Fatalf("Authorization = %q", srv.auths[0])
	}
}

// A change is tried once (its answer may have been lost after it was
// applied); a read is retried.
func TestSubscriptionClientRetriesReadsOnly(t *testing.T) {
	srv := &subscriptionServer{failFirst: 1}
	c := startSubscriptions(t, srv)
	_, err := c.Create(t.Context(), sdk.NewSubscription{Customer: "c1", Destination: "d2", Types: []string{"*"}})
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("Create against an unavailable server = %v, want Unavailable", err)
	}
	if calls, _ := srv.snapshot(); calls != 1 {
		t.Fatalf("Create was tried %d times, want once", calls)
	}
	srv.mu.Lock()
	srv.failFirst = 2
	srv.mu.Unlock()
	got, err := c.Get(t.Context(), "sub_0000000000000001")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	want := wantSub()
	want.Pending = 7
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Get = %+v, want %+v", got, want)
	}
	if calls, _ := srv.snapshot(); calls != 3 {
		t.Fatalf("server saw %d calls, want 3 (a failed create, a failed get, its retry)", calls)
	}
	_, err = c.Get(t.Context(), "sub_404")
	if connect.CodeOf(err) != connect.CodeNotFound || err.Error() != `rivora get subscription "sub_404": not_found: subscription "sub_404" not found` {
		t.Fatalf("Get of an absent id = %v", err)
	}
}

func TestSubscriptionClientChanges(t *testing.T) {
	srv := &subscriptionServer{}
	c := startSubscriptions(t, srv)
	ctx := t.Context()
	const id = "sub_0000000000000001"
	empty, path := "", "/in/v2"

	list, err := c.List(ctx, sdk.SubscriptionFilter{Customer: "c1"})
	if _, req := srv.snapshot(); err != nil || len(list) != 2 || !proto.Equal(req, &rivorav1.ListSubscriptionsRequest{CustomerId: "c1"}) {
		t.Fatalf("List = %d subscriptions, %v (request %v)", len(list), err, req)
	}
	// Only what is set: nil Types leave them, a non-nil empty Filter clears it.
	if _, err := c.Update(ctx, id, sdk.SubscriptionChange{Filter: &empty, Path: &path, RemoveHeaders: []string{"X-Old"}}); err != nil {
		t.Fatal(err)
	}
	if _, req := srv.snapshot(); !proto.Equal(req, &rivorav1.UpdateSubscriptionRequest{Id: id, Filter: &empty, Path: &path, RemoveHeaders: []string{"X-Old"}}) {
		t.Fatalf("UpdateSubscription request = %v", req)
	}
	if _, err := c.Update(ctx, id, sdk.SubscriptionChange{Types: []string{"order.*", "invoice.paid"}}); err != nil {
		t.Fatal(err)
	}
	if _, req := srv.snapshot(); !proto.Equal(req, &rivorav1.UpdateSubscriptionRequest{Id: id, SetTypes: true, Types: []string{"order.*", "invoice.paid"}}) {
		t.Fatalf("UpdateSubscription request = %v", req)
	}
	if s, err := c.Pause(ctx, id, "maintenance"); err != nil || !s.Paused {
		t.Fatalf("Pause = %+v, %v", s, err)
	}
	if _, req := srv.snapshot(); !proto.Equal(req, &rivorav1.PauseSubscriptionRequest{Id: id, Reason: "maintenance"}) {
		t.Fatalf("PauseSubscription request = %v", req)
	}
	if _, err := c.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	// Grace: nil is the server's default, zero no overlap.
	s, err := c.RotateSecret(ctx, id, sdk.SecretRotation{})
	if _, req := srv.snapshot(); err != nil || s.Secret != "whsec_rotated" || !proto.Equal(req, &rivorav1.RotateSubscriptionSecretRequest{Id: id}) {
		t.Fatalf("RotateSecret = %q, %v (request %v)", s.Secret, err, req)
	}
	zero := time.Duration(0)
	if _, err := c.RotateSecret(ctx, id, sdk.SecretRotation{Secret: "whsec_mine", Grace: &zero}); err != nil {
		t.Fatal(err)
	}
	if _, req := srv.snapshot(); !proto.Equal(req, &rivorav1.RotateSubscriptionSecretRequest{Id: id, Secret: "whsec_mine", Grace: durationpb.New(0)}) {
		t.Fatalf("RotateSubscriptionSecret request = %v", req)
	}
	if _, err := c.Delete(ctx, id, false); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("Delete with pending events = %v, want FailedPrecondition", err)
	}
	if n, err := c.Delete(ctx, id, true); err != nil || n != 3 {
		t.Fatalf("Delete --force = %d, %v", n, err)
	}
}

func TestSubscriptionClientEventTypes(t *testing.T) {
	srv := &subscriptionServer{}
	c := startSubscriptions(t, srv)
	want := sdk.EventType{Name: "order.created", Description: "An order was placed", Schema: `{"type":"object"}`, CreatedAt: created, UpdatedAt: created}
	types, err := c.EventTypes(t.Context(), true)
	if _, req := srv.snapshot(); err != nil || !reflect.DeepEqual(types, []sdk.EventType{want}) || !proto.Equal(req, &rivorav1.ListEventTypesRequest{IncludeDeprecated: true}) {
		t.Fatalf("EventTypes = %+v, %v (request %v)", types, err, req)
	}
	et, err := c.EventType(t.Context(), "order.created")
	if err != nil || !reflect.DeepEqual(et, want) {
		t.Fatalf("EventType = %+v, %v", et, err)
	}
}

// A string that is not valid UTF-8 (protobuf cannot encode it) is refused
// before sending, naming the field, wherever it sits in the request.
func TestSubscriptionClientRefusesInvalidUTF8(t *testing.T) {
	srv := &subscriptionServer{}
	c := startSubscriptions(t, srv)
	bad := "caf\xe9"
	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"filter", func() error {
			_, err := c.Create(t.Context(), sdk.NewSubscription{Customer: "c1", Destination: "d2", Types: []string{"*"}, Filter: bad})
			return err
		}, "field filter is not valid UTF-8"},
		{"header value", func() error {
			_, err := c.Create(t.Context(), sdk.NewSubscription{Customer: "c1", Destination: "d2", Types: []string{"*"},
				Headers: []sdk.Header{{Name: "X-Ok", Value: "ok"}, {Name: "X-Tenant", Value: bad}}})
			return err
		}, "field headers[1].value is not valid UTF-8"},
		{"type", func() error {
			_, err := c.Update(t.Context(), "sub_0000000000000001", sdk.SubscriptionChange{Types: []string{"order.*", bad}})
			return err
		}, "field types[1] is not valid UTF-8"},
		{"id of a read", func() error {
			_, err := c.Get(t.Context(), bad)
			return err
		}, "field id is not valid UTF-8"},
	}
	for _, tc := range cases {
		err := tc.call()
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want invalid_argument saying %q", tc.name, err, tc.want)
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.calls != 0 {
		t.Fatalf("the server saw %d calls, want none", srv.calls)
	}
}
