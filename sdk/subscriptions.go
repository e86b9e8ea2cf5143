package sdk

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// Subscription routes one customer's events of some types to a
// destination, as Rivora answers it.
type Subscription struct {
	// ID is "sub_" + 16 hex digits, assigned by Rivora.
	ID          string
	Customer    string
	Destination string
	// Types are exact event types and globs where "*" matches any run of
	// characters ("order.*"; "*" is every type).
	Types []string
	// Filter, when set, is a CEL expression over data, type, customer and
	// lane that must be true for an event to match.
	Filter string
	// Path or URL, when set, is where deliveries go instead of the
	// destination's URL (on its origin); DeliveryURL is the URL they go to
	// (to a customer token, of a shared destination's URL only its origin,
	// scheme://host[:port], with the subscription's own path if any).
	Path        string
	URL         string
	DeliveryURL string
	// Secret is the subscription's own signing secret, only in the answers
	// to Create (when one was set or generated) and RotateSecret; other
	// answers carry SecretFingerprint. Both empty: the destination's
	// secret signs.
	Secret            string
	SecretFingerprint string
	// PreviousSecretFingerprint names the secret a rotation replaced, which
	// keeps signing too until PreviousSecretExpiresAt.
	PreviousSecretFingerprint string
	PreviousSecretExpiresAt   time.Time
	// DestinationSecretUntil is set when a rotation gave a subscription
	// that was signed with its destination's secret one of its own: the
	// destination's secret signs its deliveries too until then, so its
	// receiver can switch without refusing any (PreviousSecret… stay
	// empty: the subscription never held that secret).
	DestinationSecretUntil time.Time
	// Headers are custom headers added to deliveries; answers carry only
	// their values' fingerprints.
	Headers     []Header
	Paused      bool
	Description string
	// DestinationState is the destination's health as the customer may
	// see it: "healthy", "degraded", "down", "paused" or "unknown".
	DestinationState string
	CreatedAt        time.Time
	UpdatedAt        time.Time
	// Pending counts the subscription's undelivered, unarchived events;
	// only Get fills it in.
	Pending int64
}

// Header is one custom HTTP header of a subscription. Value is what you
// set; answers carry ValueFingerprint instead.
type Header struct {
	Name             string
	Value            string
	ValueFingerprint string
}

// NewSubscription is what Create makes.
type NewSubscription struct {
	Customer    string
	Destination string
	// Types is required: exact event types and "*" globs.
	Types  []string
	Filter string
	// Set Path or URL, not both; neither delivers to the destination's URL.
	Path string
	URL  string
	// Secret ("whsec_" + base64 key) signs this subscription's deliveries
	// instead of the destination's; GenerateSecret has one generated.
	// Create's answer shows it, once.
	Secret         string
	GenerateSecret bool
	Headers        []Header
	Description    string
}

// SubscriptionChange is what Update changes: only the fields set (non-nil,
// or non-empty for the header lists).
type SubscriptionChange struct {
	// Types, when non-nil, replace the subscription's types.
	Types []string
	// Filter replaces the filter ("" clears it).
	Filter *string
	// Path or URL replace where deliveries go; both "" deliver to the
	// destination's URL again.
	Path          *string
	URL           *string
	SetHeaders    []Header
	RemoveHeaders []string
	Description   *string
}

// SubscriptionFilter narrows List; empty fields do not filter. A customer
// token lists only its customers' subscriptions.
type SubscriptionFilter struct {
	Customer    string
	Destination string
}

// SecretRotation is what RotateSecret does.
type SecretRotation struct {
	// Secret is the new secret; empty has one generated.
	Secret string
	// Grace is how long the previous secret keeps signing too: nil means
	// Rivora's default (24h), 0 no overlap; at most 7 days.
	Grace *time.Duration
}

// EventType is one entry of the event-type catalogue.
type EventType struct {
	Name        string
	Description string
	// Schema, when set, is the JSON Schema (draft 2020-12, or 2019-09,
	// draft-07, draft-06 or draft-04 when its $schema names one) the data
	// of every event of this type must satisfy.
	Schema     string
	Deprecated bool
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// SubscriptionClient manages subscriptions through the control plane's
// SubscriptionService and reads its event-type catalogue: the self-service
// a customer token allows (its own customers' subscriptions only; another
// customer's answer NotFound, as absent ids do), and all of it for
// operators and admins. It is safe for concurrent use.
//
// Reads are retried like publishes (WithRetry, WithAttemptTimeout apply).
// Changes are tried once: one whose answer was lost may have been applied,
// so read the subscription back (Get) before trying again.
type SubscriptionClient struct {
	subs  rivorav1connect.SubscriptionServiceClient
	types rivorav1connect.EventTypeServiceClient
	cfg   config
}

// NewSubscriptionClient returns a client for the Rivora control plane at
// baseURL (with `rivora dev`, the same address as the agent), with the
// same options as New; WithToken is usually a customer token.
func NewSubscriptionClient(baseURL string, opts ...Option) *SubscriptionClient {
	cfg, baseURL := newConfig(baseURL, opts)
	copts := cfg.connectOptions()
	return &SubscriptionClient{
		subs:  rivorav1connect.NewSubscriptionServiceClient(cfg.httpClient, baseURL, copts...),
		types: rivorav1connect.NewEventTypeServiceClient(cfg.httpClient, baseURL, copts...),
		cfg:   cfg,
	}
}

// Create creates a subscription. From now on the customer's events that
// name no destination and match it are delivered through it.
func (c *SubscriptionClient) Create(ctx context.Context, s NewSubscription) (Subscription, error) {
	req := &rivorav1.CreateSubscriptionRequest{
		CustomerId: s.Customer, DestinationId: s.Destination, Types: s.Types, Filter: s.Filter,
		Path: s.Path, Url: s.URL, Secret: s.Secret, GenerateSecret: s.GenerateSecret,
		Headers: headersToProto(s.Headers), Description: s.Description,
	}
	resp, err := once(ctx, c.cfg, func(ctx context.Context) (*connect.Response[rivorav1.CreateSubscriptionResponse], error) {
		return c.subs.CreateSubscription(ctx, connect.NewRequest(req))
	})
	if err != nil {
		return Subscription{}, fmt.Errorf("rivora create subscription: %w", err)
	}
	return subscriptionOf(resp.Msg.GetSubscription()), nil
}

// Get returns one subscription, with its pending count.
func (c *SubscriptionClient) Get(ctx context.Context, id string) (Subscription, error) {
	var resp *rivorav1.GetSubscriptionResponse
	err := c.cfg.retry(ctx, func(ctx context.Context) error {
		r, err := c.subs.GetSubscription(ctx, connect.NewRequest(&rivorav1.GetSubscriptionRequest{Id: id}))
		if err == nil {
			resp = r.Msg
		}
		return err
	})
	if err != nil {
		return Subscription{}, fmt.Errorf("rivora get subscription %q: %w", id, err)
	}
	s := subscriptionOf(resp.GetSubscription())
	s.Pending = resp.GetPending()
	return s, nil
}

// List returns the subscriptions f selects.
func (c *SubscriptionClient) List(ctx context.Context, f SubscriptionFilter) ([]Subscription, error) {
	var resp *rivorav1.ListSubscriptionsResponse
	err := c.cfg.retry(ctx, func(ctx context.Context) error {
		r, err := c.subs.ListSubscriptions(ctx, connect.NewRequest(&rivorav1.ListSubscriptionsRequest{CustomerId: f.Customer, DestinationId: f.Destination}))
		if err == nil {
			resp = r.Msg
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rivora list subscriptions: %w", err)
	}
	out := make([]Subscription, 0, len(resp.GetSubscriptions()))
	for _, s := range resp.GetSubscriptions() {
		out = append(out, subscriptionOf(s))
	}
	return out, nil
}

// Update changes what ch sets and returns the subscription as it now is.
func (c *SubscriptionClient) Update(ctx context.Context, id string, ch SubscriptionChange) (Subscription, error) {
	req := &rivorav1.UpdateSubscriptionRequest{
		Id: id, SetTypes: ch.Types != nil, Types: ch.Types, Filter: ch.Filter, Path: ch.Path, Url: ch.URL,
		SetHeaders: headersToProto(ch.SetHeaders), RemoveHeaders: ch.RemoveHeaders, Description: ch.Description,
	}
	resp, err := once(ctx, c.cfg, func(ctx context.Context) (*connect.Response[rivorav1.UpdateSubscriptionResponse], error) {
		return c.subs.UpdateSubscription(ctx, connect.NewRequest(req))
	})
	if err != nil {
		return Subscription{}, fmt.Errorf("rivora update subscription %q: %w", id, err)
	}
	return subscriptionOf(resp.Msg.GetSubscription()), nil
}

// Pause holds the subscription's events: they keep being accepted and
// routed to it, nothing is dropped, until Resume. reason is required
// (a blank one is InvalidArgument): the audit log and Get say it.
func (c *SubscriptionClient) Pause(ctx context.Context, id, reason string) (Subscription, error) {
	resp, err := once(ctx, c.cfg, func(ctx context.Context) (*connect.Response[rivorav1.PauseSubscriptionResponse], error) {
		return c.subs.PauseSubscription(ctx, connect.NewRequest(&rivorav1.PauseSubscriptionRequest{Id: id, Reason: reason}))
	})
	if err != nil {
		return Subscription{}, fmt.Errorf("rivora pause subscription %q: %w", id, err)
	}
	return subscriptionOf(resp.Msg.GetSubscription()), nil
}

// Resume lets a paused subscription's events drain, in lane order.
func (c *SubscriptionClient) Resume(ctx context.Context, id string) (Subscription, error) {
	resp, err := once(ctx, c.cfg, func(ctx context.Context) (*connect.Response[rivorav1.ResumeSubscriptionResponse], error) {
		return c.subs.ResumeSubscription(ctx, connect.NewRequest(&rivorav1.ResumeSubscriptionRequest{Id: id}))
	})
	if err != nil {
		return Subscription{}, fmt.Errorf("rivora resume subscription %q: %w", id, err)
	}
	return subscriptionOf(resp.Msg.GetSubscription()), nil
}

// RotateSecret gives the subscription a new signing secret, returned in
// Subscription.Secret (the one answer that shows it), and keeps the
// previous one signing for the grace period.
func (c *SubscriptionClient) RotateSecret(ctx context.Context, id string, r SecretRotation) (Subscription, error) {
	req := &rivorav1.RotateSubscriptionSecretRequest{Id: id, Secret: r.Secret}
	if r.Grace != nil {
		req.Grace = durationpb.New(*r.Grace)
	}
	resp, err := once(ctx, c.cfg, func(ctx context.Context) (*connect.Response[rivorav1.RotateSubscriptionSecretResponse], error) {
		return c.subs.RotateSubscriptionSecret(ctx, connect.NewRequest(req))
	})
	if err != nil {
		return Subscription{}, fmt.Errorf("rivora rotate the secret of subscription %q: %w", id, err)
	}
	return subscriptionOf(resp.Msg.GetSubscription()), nil
}

// Delete deletes the subscription. It is refused (FailedPrecondition)
// while its events are pending, unless force: then they are archived as
// dead letters (reason "deleted"), and archived counts them.
func (c *SubscriptionClient) Delete(ctx context.Context, id string, force bool) (archived int64, err error) {
	resp, err := once(ctx, c.cfg, func(ctx context.Context) (*connect.Response[rivorav1.DeleteSubscriptionResponse], error) {
		return c.subs.DeleteSubscription(ctx, connect.NewRequest(&rivorav1.DeleteSubscriptionRequest{Id: id, Force: force}))
	})
	if err != nil {
		return 0, fmt.Errorf("rivora delete subscription %q: %w", id, err)
	}
	return resp.Msg.GetArchived(), nil
}

// EventTypes lists the catalogue: what may be subscribed to (deprecated
// types only when includeDeprecated).
func (c *SubscriptionClient) EventTypes(ctx context.Context, includeDeprecated bool) ([]EventType, error) {
	var resp *rivorav1.ListEventTypesResponse
	err := c.cfg.retry(ctx, func(ctx context.Context) error {
		r, err := c.types.ListEventTypes(ctx, connect.NewRequest(&rivorav1.ListEventTypesRequest{IncludeDeprecated: includeDeprecated}))
		if err == nil {
			resp = r.Msg
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rivora list event types: %w", err)
	}
	out := make([]EventType, 0, len(resp.GetEventTypes()))
	for _, t := range resp.GetEventTypes() {
		out = append(out, eventTypeOf(t))
	}
	return out, nil
}

// EventType returns one event type of the catalogue, with its schema.
func (c *SubscriptionClient) EventType(ctx context.Context, name string) (EventType, error) {
	var resp *rivorav1.GetEventTypeResponse
	err := c.cfg.retry(ctx, func(ctx context.Context) error {
		r, err := c.types.GetEventType(ctx, connect.NewRequest(&rivorav1.GetEventTypeRequest{Name: name}))
		if err == nil {
			resp = r.Msg
		}
		return err
	})
	if err != nil {
		return EventType{}, fmt.Errorf("rivora get event type %q: %w", name, err)
	}
	return eventTypeOf(resp.GetEventType()), nil
}

// once makes one try of a change, bounded like every try.
func once[T any](ctx context.Context, cfg config, call func(context.Context) (*connect.Response[T], error)) (*connect.Response[T], error) {
	var resp *connect.Response[T]
	err := cfg.try(ctx, func(ctx context.Context) error {
		var err error
		resp, err = call(ctx)
		return err
	})
	return resp, err
}

func subscriptionOf(s *rivorav1.Subscription) Subscription {
	out := Subscription{
		ID: s.GetId(), Customer: s.GetCustomerId(), Destination: s.GetDestinationId(), Types: s.GetTypes(),
		Filter: s.GetFilter(), Path: s.GetPath(), URL: s.GetUrl(), DeliveryURL: s.GetDeliveryUrl(),
		Secret: s.GetSecret(), SecretFingerprint: s.GetSecretFingerprint(),
		PreviousSecretFingerprint: s.GetPreviousSecretFingerprint(), PreviousSecretExpiresAt: timeOf(s.GetPreviousSecretExpiresAt()),
		DestinationSecretUntil: timeOf(s.GetDestinationSecretUntil()),
		Paused:                 s.GetPaused(), Description: s.GetDescription(), DestinationState: s.GetDestinationState(),
		CreatedAt: timeOf(s.GetCreatedAt()), UpdatedAt: timeOf(s.GetUpdatedAt()),
	}
	for _, h := range s.GetHeaders() {
		out.Headers = append(out.Headers, Header{Name: h.GetName(), Value: h.GetValue(), ValueFingerprint: h.GetValueFingerprint()})
	}
	return out
}

func eventTypeOf(t *rivorav1.EventType) EventType {
	return EventType{
		Name: t.GetName(), Description: t.GetDescription(), Schema: t.GetSchema(), Deprecated: t.GetDeprecated(),
		CreatedAt: timeOf(t.GetCreatedAt()), UpdatedAt: timeOf(t.GetUpdatedAt()),
	}
}

func headersToProto(hs []Header) []*rivorav1.Header {
	out := make([]*rivorav1.Header, 0, len(hs))
	for _, h := range hs {
		out = append(out, &rivorav1.Header{Name: h.Name, Value: h.Value})
	}
	return out
}

// timeOf is ts as a time, the zero time when unset.
func timeOf(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}
