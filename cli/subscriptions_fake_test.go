package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk/webhook"
)

// fakeSubscriptions serves SubscriptionService and EventTypeService like
// the control plane, on a map, recording every request as it arrives; its
// fanOut answers a Publish without a destination as an agent would.
type fakeSubscriptions struct {
	rivorav1connect.UnimplementedSubscriptionServiceHandler
	rivorav1connect.UnimplementedEventTypeServiceHandler

	mu      sync.Mutex
	next    int
	subs    map[string]*rivorav1.Subscription
	order   []string
	pending map[string]int64
	// left: what a forced delete leaves to attempts in flight, by
	// subscription: events in flight, events queued behind them.
	left   map[string][2]int64
	types  map[string]*rivorav1.EventType
	strict bool
	// requests: every request message, in arrival order.
	requests []proto.Message
}

func newFakeSubscriptions() *fakeSubscriptions {
	return &fakeSubscriptions{subs: map[string]*rivorav1.Subscription{}, pending: map[string]int64{}, types: map[string]*rivorav1.EventType{}}
}

func (f *fakeSubscriptions) record(m proto.Message) {
	f.requests = append(f.requests, proto.Clone(m))
}

// last is the last request recorded.
func (f *fakeSubscriptions) last() proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		return nil
	}
	return f.requests[len(f.requests)-1]
}

func (f *fakeSubscriptions) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

// answer is a subscription as answers other than create's and rotate's
// carry it: secrets and header values replaced by fingerprints.
func answer(s *rivorav1.Subscription) *rivorav1.Subscription {
	s = proto.Clone(s).(*rivorav1.Subscription)
	if s.GetSecret() != "" {
		s.SecretFingerprint, s.Secret = auth.Fingerprint(s.GetSecret()), ""
	}
	if s.GetPreviousSecret() != "" {
		s.PreviousSecretFingerprint, s.PreviousSecret = auth.Fingerprint(s.GetPreviousSecret()), ""
	}
	for _, h := range s.GetHeaders() {
		h.ValueFingerprint, h.Value = auth.Fingerprint(h.GetValue()), ""
	}
	return s
}

func (f *fakeSubscriptions) find(id string) (*rivorav1.Subscription, error) {
	s, ok := f.subs[id]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("subscription %q not found", id))
	}
	return s, nil
}

func (f *fakeSubscriptions) CreateSubscription(_ context.Context, req *connect.Request[rivorav1.CreateSubscriptionRequest]) (*connect.Response[rivorav1.CreateSubscriptionResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(req.Msg)
	m := req.Msg
	if m.GetDestinationId() == "nope" {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("destination %q not found", m.GetDestinationId()))
	}
	if m.GetFilter() == "data.amount >" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("filter: Syntax error: unexpected end of input"))
	}
	f.next++
	s := &rivorav1.Subscription{
		Id: fmt.Sprintf("sub_%016x", f.next), CustomerId: m.GetCustomerId(), DestinationId: m.GetDestinationId(),
		Types: m.GetTypes(), Filter: m.GetFilter(), Path: m.GetPath(), Url: m.GetUrl(), Secret: m.GetSecret(),
		Headers: m.GetHeaders(), Description: m.GetDescription(), CreatedAt: fixedTime, UpdatedAt: fixedTime,
		DestinationState: "healthy",
	}
	s.DeliveryUrl = "https://" + s.GetDestinationId() + ".example" + s.GetPath()
	if s.GetUrl() != "" {
		s.DeliveryUrl = s.GetUrl()
	}
	if m.GetGenerateSecret() {
		var err error
		if s.Secret, err = webhook.NewSecret(); err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
	}
	f.subs[s.GetId()] = s
	f.order = append(f.order, s.GetId())
	out := answer(s)
	out.Secret, out.SecretFingerprint = s.GetSecret(), ""
	return connect.NewResponse(&rivorav1.CreateSubscriptionResponse{Subscription: out, Version: 11}), nil
}

func (f *fakeSubscriptions) GetSubscription(_ context.Context, req *connect.Request[rivorav1.GetSubscriptionRequest]) (*connect.Response[rivorav1.GetSubscriptionResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(req.Msg)
	s, err := f.find(req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.GetSubscriptionResponse{Subscription: answer(s), Pending: f.pending[s.GetId()]}), nil
}

func (f *fakeSubscriptions) ListSubscriptions(_ context.Context, req *connect.Request[rivorav1.ListSubscriptionsRequest]) (*connect.Response[rivorav1.ListSubscriptionsResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(req.Msg)
	resp := &rivorav1.ListSubscriptionsResponse{}
	for _, id := range f.order {
		s, ok := f.subs[id]
		if !ok || (req.Msg.GetCustomerId() != "" && s.GetCustomerId() != req.Msg.GetCustomerId()) ||
			(req.Msg.GetDestinationId() != "" && s.GetDestinationId() != req.Msg.GetDestinationId()) {
			continue
		}
		resp.Subscriptions = append(resp.Subscriptions, answer(s))
	}
	return connect.NewResponse(resp), nil
}

func (f *fakeSubscriptions) UpdateSubscription(_ context.Context, req *connect.Request[rivorav1.UpdateSubscriptionRequest]) (*connect.Response[rivorav1.UpdateSubscriptionResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(req.Msg)
	m := req.Msg
	s, err := f.find(m.GetId())
	if err != nil {
		return nil, err
	}
	if m.GetSetTypes() {
		s.Types = m.GetTypes()
	}
	if m.Filter != nil {
		s.Filter = m.GetFilter()
	}
	if m.Path != nil || m.Url != nil {
		s.Path, s.Url = m.GetPath(), m.GetUrl()
	}
	if m.Description != nil {
		s.Description = m.GetDescription()
	}
	s.Headers = append(s.Headers, m.GetSetHeaders()...)
	return connect.NewResponse(&rivorav1.UpdateSubscriptionResponse{Subscription: answer(s), Version: 12}), nil
}

func (f *fakeSubscriptions) PauseSubscription(_ context.Context, req *connect.Request[rivorav1.PauseSubscriptionRequest]) (*connect.Response[rivorav1.PauseSubscriptionResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(req.Msg)
	s, err := f.find(req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	s.Paused = true
	s.Pauses = append(s.Pauses, &rivorav1.PauseInterval{Start: fixedTime, Reason: req.Msg.GetReason()})
	return connect.NewResponse(&rivorav1.PauseSubscriptionResponse{Subscription: answer(s), Version: 13}), nil
}

func (f *fakeSubscriptions) ResumeSubscription(_ context.Context, req *connect.Request[rivorav1.ResumeSubscriptionRequest]) (*connect.Response[rivorav1.ResumeSubscriptionResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(req.Msg)
	s, err := f.find(req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	s.Paused = false
	if n := len(s.Pauses); n > 0 {
		s.Pauses[n-1].End = fixedTime
	}
	return connect.NewResponse(&rivorav1.ResumeSubscriptionResponse{Subscription: answer(s), Version: 14}), nil
}

func (f *fakeSubscriptions) RotateSubscriptionSecret(_ context.Context, req *connect.Request[rivorav1.RotateSubscriptionSecretRequest]) (*connect.Response[rivorav1.RotateSubscriptionSecretResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(req.Msg)
	s, err := f.find(req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	secret := req.Msg.GetSecret()
	if secret == "" {
		if secret, err = webhook.NewSecret(); err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
	}
	grace := 24 * time.Hour
	if req.Msg.GetGrace() != nil {
		grace = req.Msg.GetGrace().AsDuration()
	}
	s.PreviousSecret, s.PreviousSecretExpiresAt, s.Secret = s.GetSecret(), timestamppb.New(time.Now().Add(grace)), secret
	out := answer(s)
	out.Secret, out.SecretFingerprint = secret, ""
	return connect.NewResponse(&rivorav1.RotateSubscriptionSecretResponse{Subscription: out, Version: 15}), nil
}

func (f *fakeSubscriptions) DeleteSubscription(_ context.Context, req *connect.Request[rivorav1.DeleteSubscriptionRequest]) (*connect.Response[rivorav1.DeleteSubscriptionResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(req.Msg)
	id := req.Msg.GetId()
	if _, err := f.find(id); err != nil {
		return nil, err
	}
	n := f.pending[id]
	if n > 0 && !req.Msg.GetForce() {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("subscription %q has %d pending events", id, n))
	}
	delete(f.subs, id)
	left := f.left[id]
	return connect.NewResponse(&rivorav1.DeleteSubscriptionResponse{Archived: n - left[0] - left[1], InFlight: left[0], ArchivedLater: left[1], Version: 16}), nil
}

// fanOut answers a publish without a destination: one route per
// subscription of the customer whose types match (exact, "*", or a
// trailing "*" glob), or the one subscription named.
func (f *fakeSubscriptions) fanOut(m *rivorav1.PublishRequest) (*connect.Response[rivorav1.PublishResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &rivorav1.PublishResponse{FannedOut: true}
	for _, id := range f.order {
		s, ok := f.subs[id]
		if !ok || s.GetCustomerId() != m.GetCustomerId() {
			continue
		}
		if m.GetSubscriptionId() != "" && id != m.GetSubscriptionId() {
			continue
		}
		if m.GetSubscriptionId() == "" && (s.GetPaused() || !fakeTypeMatch(s.GetTypes(), m.GetType())) {
			continue
		}
		resp.Routes = append(resp.Routes, &rivorav1.Route{SubscriptionId: id, DestinationId: s.GetDestinationId(), EventId: "evt-" + id + "-" + m.GetIdempotencyKey()})
	}
	if m.GetSubscriptionId() != "" && len(resp.Routes) == 0 {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("subscription %q not found", m.GetSubscriptionId()))
	}
	return connect.NewResponse(resp), nil
}

func fakeTypeMatch(patterns []string, typ string) bool {
	for _, p := range patterns {
		if prefix, glob := strings.CutSuffix(p, "*"); p == typ || (glob && strings.HasPrefix(typ, prefix)) {
			return true
		}
	}
	return false
}

func (f *fakeSubscriptions) CreateEventType(_ context.Context, req *connect.Request[rivorav1.CreateEventTypeRequest]) (*connect.Response[rivorav1.CreateEventTypeResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(req.Msg)
	m := req.Msg
	if _, ok := f.types[m.GetName()]; ok {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("event type %q already exists", m.GetName()))
	}
	t := &rivorav1.EventType{Name: m.GetName(), Description: m.GetDescription(), Schema: m.GetSchema(), CreatedAt: fixedTime, UpdatedAt: fixedTime}
	f.types[t.GetName()] = t
	return connect.NewResponse(&rivorav1.CreateEventTypeResponse{EventType: t, Version: 21}), nil
}

func (f *fakeSubscriptions) findType(name string) (*rivorav1.EventType, error) {
	t, ok := f.types[name]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("event type %q not found", name))
	}
	return t, nil
}

func (f *fakeSubscriptions) GetEventType(_ context.Context, req *connect.Request[rivorav1.GetEventTypeRequest]) (*connect.Response[rivorav1.GetEventTypeResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(req.Msg)
	t, err := f.findType(req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.GetEventTypeResponse{EventType: t}), nil
}

func (f *fakeSubscriptions) ListEventTypes(_ context.Context, req *connect.Request[rivorav1.ListEventTypesRequest]) (*connect.Response[rivorav1.ListEventTypesResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(req.Msg)
	resp := &rivorav1.ListEventTypesResponse{Strict: f.strict}
	for _, name := range sortedKeys(f.types) {
		if t := f.types[name]; !t.GetDeprecated() || req.Msg.GetIncludeDeprecated() {
			resp.EventTypes = append(resp.EventTypes, t)
		}
	}
	return connect.NewResponse(resp), nil
}

func (f *fakeSubscriptions) UpdateEventType(_ context.Context, req *connect.Request[rivorav1.UpdateEventTypeRequest]) (*connect.Response[rivorav1.UpdateEventTypeResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(req.Msg)
	t, err := f.findType(req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	if req.Msg.Description != nil {
		t.Description = req.Msg.GetDescription()
	}
	if req.Msg.Schema != nil {
		t.Schema = req.Msg.GetSchema()
	}
	return connect.NewResponse(&rivorav1.UpdateEventTypeResponse{EventType: t, Version: 22}), nil
}

func (f *fakeSubscriptions) DeprecateEventType(_ context.Context, req *connect.Request[rivorav1.DeprecateEventTypeRequest]) (*connect.Response[rivorav1.DeprecateEventTypeResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(req.Msg)
	t, err := f.findType(req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	t.Deprecated = !req.Msg.GetUndo()
	return connect.NewResponse(&rivorav1.DeprecateEventTypeResponse{EventType: t, Version: 23}), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
