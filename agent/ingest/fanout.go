package ingest

import (
	"context"
	"fmt"
	"mime"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent/subscriptions"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/routing"
	"github.com/rivora/rivora/sdk/eventid"
)

// MaxFanout bounds the subscriptions one publish is stored for. The
// control plane bounds a customer's subscriptions; this is the gateway's
// own defence (one request never multiplies without bound), and it bounds
// a fan-out's idempotency record.
const MaxFanout = 500

// unrouted counts fan-outs that matched nothing. It has no customer label
// on purpose: customer ids are the publishers' tenants, unbounded (a SaaS
// has as many as it has users), and a label per customer would grow a
// Prometheus series per tenant forever. Which customer's publishes go
// nowhere is in the trace instead (the rivora.ingest span carries
// rivora.customer and rivora.routes = 0).
var unrouted = promauto.NewCounter(prometheus.CounterOpts{
	Name: "rivora_ingest_unrouted_total",
	Help: "Publishes without destination_id that matched no subscription of their customer: accepted, answered with 0 routes, not stored (retries of a keyed one not counted again).",
})

// routed is a publish without destination_id: a fan-out to its
// customer's matching subscriptions, or a test event to one of them.
type routed struct {
	// base is the event as published: no id, destination or subscription.
	base *rivorav1.Event
	// key and fingerprint are set for a publish with an idempotency key.
	key         string
	fingerprint []byte
	// test is the subscription of a test event ("": a fan-out).
	test string
	// routes are the deliveries to store: those planned at prepare, or,
	// for a retry of a keyed publish, those its first try recorded.
	routes []route
	// retry is set when the key's record was there with this fingerprint.
	retry bool
	// deliveries are the routes' events, made by settle: one per route
	// but those in gone.
	deliveries []*prepared
	// gone (nil: none) marks, on a retry, the recorded routes whose
	// destination was deleted since the first try (settle): nothing is
	// stored for them again, and they are answered as recorded.
	gone []bool
}

// route is one delivery of a routed publish.
type route struct {
	Subscription string `json:"subscription"`
	Destination  string `json:"destination"`
	EventID      string `json:"event_id"`
	// Version is the config version the delivery was accepted under
	// (its event's config_version: the gateway's applied version, or its
	// destination's creation when newer), which tells a retry whether a
	// destination it does not find was deleted since or is not known to
	// it yet (settle). 0: not known (a record written before routes
	// carried it, or by a gateway that knows no version).
	Version uint64 `json:"version,omitempty"`
}

// prepareRouted plans a publish without destination_id: the
// subscriptions it goes to, each with its event id. At an edge these are
// the subscriptions of the config it last heard of: one whose config is
// stale (EdgeTarget.Stale) refuses a fan-out that matches none of them,
// which would otherwise be answered with no route and stored nowhere.
func (g *Gateway) prepareRouted(ctx context.Context, base *rivorav1.Event, key, test string) (*routed, error) {
	if g.subs == nil {
		return nil, errkind.Errorf(errkind.Precondition, "destination_id is empty, and this gateway routes no publish without one (it has no subscriptions); name destination_id")
	}
	r := &routed{base: base, key: key, test: test}
	subs, err := g.subscriptionsOf(ctx, r)
	if err != nil {
		return nil, err
	}
	if len(subs) == 0 && test == "" {
		if note := g.edge.stale(); note != "" {
			// Stored nowhere, it would be lost without a word if a
			// subscription created since matches it.
			return nil, errkind.Errorf(errkind.Unavailable, "customer %q has no subscription matching this event (type %q) in the config this edge has, but one may have been created since: %s; nothing was stored: retry later, or publish to the cell, which routes by its current subscriptions", base.GetCustomerId(), base.GetType(), note)
		}
	}
	if len(subs) > MaxFanout {
		return nil, errkind.Errorf(errkind.Precondition, "customer %s has %d subscriptions matching type %q; one publish reaches at most %d: narrow the subscriptions' types or filters", base.GetCustomerId(), len(subs), base.GetType(), MaxFanout)
	}
	r.routes = make([]route, len(subs))
	for i, s := range subs {
		d, ok := g.reg.Get(s.Destination)
		if !ok {
			return nil, unknownDestination(s.ID, s.Destination)
		}
		id := ""
		if key != "" {
			id = eventid.ForSubscription(s.ID, base.GetCustomerId(), key)
		} else if id, err = g.newID(); err != nil {
			return nil, fmt.Errorf("assign event id: %w", err)
		}
		r.routes[i] = route{Subscription: s.ID, Destination: s.Destination, EventID: id, Version: max(base.GetConfigVersion(), d.CreatedVersion)}
	}
	if key != "" {
		r.fingerprint = routedFingerprint(r)
	}
	return r, nil
}

// subscriptionsOf are the subscriptions a routed publish goes to: the one
// a test event names (whatever its types and filter say), or those of its
// customer that match. A paused subscription is one: its events are
// stored and held until it resumes.
func (g *Gateway) subscriptionsOf(ctx context.Context, r *routed) ([]*subscriptions.Subscription, error) {
	customer := r.base.GetCustomerId()
	if r.test == "" {
		return g.match(ctx, r.base)
	}
	if err := lanes.ValidateID("subscription_id", r.test); err != nil {
		return nil, err
	}
	s, ok := g.subs.Get(r.test)
	if !ok || s.Customer != customer {
		// Another customer's subscription answers as an absent one does.
		if note := g.edge.stale(); note != "" {
			return nil, errkind.Errorf(errkind.Unavailable, "subscription %q of customer %q is not in the config this edge has, but it may have been created since: %s; retry later, or send the test event to the cell", r.test, customer, note)
		}
		return nil, errkind.Errorf(errkind.NotFound, "subscription %q of customer %q not found (one created moments ago reaches the agents within seconds: retry then)", r.test, customer)
	}
	return []*subscriptions.Subscription{s}, nil
}

// match lists the customer's subscriptions the event matches. The
// event's JSON is decoded once, and only when a subscription whose types
// match has a filter that reads data; the filters' shared budget
// (routing.EventFilterBudget) and cost limit (routing.MaxEventFilterCost)
// start after it. A filter that could not answer (past its cost limit,
// or the budget ended first) refuses the publish (filterBudgetError):
// storing the event without the deliveries of the filters not run would
// drop them without a word; so does a payload that says it is JSON but
// is not (jsonData).
func (g *Gateway) match(ctx context.Context, ev *rivorav1.Event) ([]*subscriptions.Subscription, error) {
	subs := g.subs.ForCustomer(ev.GetCustomerId())
	filtered := slices.ContainsFunc(subs, func(s *subscriptions.Subscription) bool {
		return s.Filter != nil && routing.TypeMatches(s.Types, ev.GetType())
	})
	reader := slices.IndexFunc(subs, func(s *subscriptions.Subscription) bool {
		return s.Filter != nil && s.Filter.ReadsData() && routing.TypeMatches(s.Types, ev.GetType())
	})
	var input routing.Input
	filterCtx := ctx
	if filtered {
		var data any
		if reader >= 0 {
			var err error
			if data, err = jsonData(ev); err != nil {
				return nil, errkind.Errorf(errkind.Invalid, "payload is not valid JSON (%v), though its content type is %s, and subscription %s's filter is to read it: nothing was stored; send valid JSON, or set the payload's own content type", err, ev.GetContentType(), subs[reader].ID)
			}
		}
		input = routing.Input{Data: data, NotJSON: !isJSON(ev.GetContentType()), Type: ev.GetType(), Customer: ev.GetCustomerId(), Lane: ev.GetLaneKey()}
		var cancel context.CancelFunc
		filterCtx, cancel = routing.FilterContext(ctx)
		defer cancel()
	}
	in := func() routing.Input { return input }
	var out []*subscriptions.Subscription
	for _, s := range subs {
		ok, err := s.Matches(filterCtx, ev.GetType(), in)
		if err != nil {
			return nil, filterBudgetError(ctx, s.ID, err)
		}
		if ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// filterBudgetError is the publish's answer when the filters could not
// all answer: its caller gone (ctx ended); subscription's filter past its
// cost limit on this event's data (routing.OverCost) — the same answer
// whatever the load, so the event's: invalid_argument; or the event's
// time for its filters spent before subscription's answered — this
// agent's load, not the event's fault (the cost limits keep an event's
// filters well within it on an agent that is not overloaded), so
// unavailable, which publishers retry.
func filterBudgetError(ctx context.Context, subscription string, err error) error {
	if ctx.Err() != nil {
		return errkind.Errorf(errkind.Canceled, "routing the event to its subscriptions: %w", ctx.Err())
	}
	if routing.OverCost(err) {
		return errkind.Errorf(errkind.Invalid, "subscription %s's filter is too costly for this event: %v; nothing was stored: make that filter cheaper (iterate less over the data) or send less data", subscription, err)
	}
	return errkind.Errorf(errkind.Unavailable, "this agent is too busy to run this event's filters within %s (subscription %s's filter had not answered: %v); nothing was stored: retry shortly", routing.EventFilterBudget, subscription, err)
}

// jsonData is the event's payload decoded for a filter: nil when its
// content type is not JSON (a filter reading a field of data then does
// not match, and is counted as failed: routing.FilterFailed),
// an error when it says JSON but the payload is not: a filter would read
// null there too, and the event miss the deliveries its data would have
// had, without a word.
func jsonData(ev *rivorav1.Event) (any, error) {
	if !isJSON(ev.GetContentType()) {
		return nil, nil
	}
	return routing.DecodeData(ev.GetPayload())
}

// isJSON tells whether a content type is JSON: application/json or a
// +json suffix (application/cloudevents+json).
func isJSON(contentType string) bool {
	if contentType == defaultContentType {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == defaultContentType || strings.HasSuffix(mt, "+json"))
}

func unknownDestination(subscription, destination string) error {
	return errkind.Errorf(errkind.Unavailable, "subscription %s goes to destination %s, which this agent does not know yet (its configuration is on the way); retry shortly", subscription, destination)
}

// settle makes the routes' events: one per route, each in its lane
// (destination, customer, lane key, subscription), in its destination's
// partition, stored under its event id. A route whose destination this
// agent does not know is refused Unavailable, never dropped — but on a
// retry, a recorded route whose destination was deleted since the first
// try (routeGone) stores nothing again: the first try stored its event
// (its delivery became a dead letter, reason deleted, with the
// destination), and the retry answers the recorded routes as a
// subscription's deletion leaves them.
func (g *Gateway) settle(r *routed) error {
	n := g.count()
	applied := g.configVersion()
	r.deliveries = make([]*prepared, 0, len(r.routes))
	r.gone = nil
	for i, rt := range r.routes {
		d, ok := g.reg.Get(rt.Destination)
		if r.retry && routeGone(rt, d, ok, applied) {
			if r.gone == nil {
				r.gone = make([]bool, len(r.routes))
			}
			r.gone[i] = true
			continue
		}
		if !ok {
			return unknownDestination(rt.Subscription, rt.Destination)
		}
		ev := withRoute(r.base, rt.EventID, rt.Destination, rt.Subscription)
		ev.ConfigVersion = max(ev.GetConfigVersion(), d.CreatedVersion) // as versionFor
		data, err := proto.Marshal(ev)
		if err != nil {
			return fmt.Errorf("encode event: %w", err)
		}
		r.deliveries = append(r.deliveries, &prepared{partition: lanes.Partition(rt.Destination, n), event: ev, data: data, msgID: rt.EventID, key: r.key})
	}
	return nil
}

// withRoute is base (an event as published) with its id, destination and
// subscription: what is stored. The payload is shared, not copied.
func withRoute(base *rivorav1.Event, id, destination, subscription string) *rivorav1.Event {
	return &rivorav1.Event{
		EventId:        id,
		DestinationId:  destination,
		SubscriptionId: subscription,
		CustomerId:     base.GetCustomerId(),
		LaneKey:        base.GetLaneKey(),
		Type:           base.GetType(),
		Payload:        base.GetPayload(),
		ContentType:    base.GetContentType(),
		AcceptedAt:     base.GetAcceptedAt(),
		ConfigVersion:  base.GetConfigVersion(),
	}
}

// answer is the routed publish's answer, given the store's duplicate flag
// of each of its deliveries: a duplicate when it is a retry whose every
// delivery was stored already. A route settle found gone (its
// destination deleted since the first try) is answered as recorded,
// stored by the first try.
func (r *routed) answer(dups []bool) *rivorav1.PublishResponse {
	resp := &rivorav1.PublishResponse{FannedOut: true, Routes: make([]*rivorav1.Route, len(r.routes)), Duplicate: r.retry}
	stored := 0
	for i, rt := range r.routes {
		resp.Routes[i] = &rivorav1.Route{SubscriptionId: rt.Subscription, DestinationId: rt.Destination, EventId: rt.EventID}
		if r.gone != nil && r.gone[i] {
			continue
		}
		resp.Duplicate = resp.Duplicate && dups[stored]
		stored++
	}
	return resp
}
