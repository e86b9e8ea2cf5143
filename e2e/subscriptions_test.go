package e2e

// Subscriptions against a real `rivora dev`: one publish without a
// destination reaches every matching subscription once, each at its own
// path and signed with its own secret (verified with the Standard
// Webhooks Go library); a retried publish stores nothing twice, also after
// a new subscription appeared; filters route by data; a paused
// subscription holds its events and delivers them in lane order on
// resume; deleting a subscription with pending events is refused without
// force and dead-letters them with it; the catalogue's schemas and
// --strict-event-types refuse what they must.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"google.golang.org/protobuf/types/known/structpb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

const c1Secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func subscriptionsAPI(d *devProc) rivorav1connect.SubscriptionServiceClient {
	return rivorav1connect.NewSubscriptionServiceClient(authedHTTP, d.URL())
}

// subscribe creates a subscription and waits until the agents apply it.
func subscribe(t *testing.T, d *devProc, req *rivorav1.CreateSubscriptionRequest) *rivorav1.Subscription {
	t.Helper()
	resp, err := subscriptionsAPI(d).CreateSubscription(ctxTimeout(t, 10*time.Second), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("CreateSubscription %s → %s: %v", req.GetCustomerId(), req.GetDestinationId(), err)
	}
	s := resp.Msg.GetSubscription()
	if !strings.HasPrefix(s.GetId(), "sub_") {
		t.Fatalf("CreateSubscription answered id %q, want sub_…", s.GetId())
	}
	waitConfigApplied(t, d, resp.Msg.GetVersion())
	return s
}

// fanOut publishes one event without a destination and returns its routes
// by subscription id.
func fanOut(t *testing.T, d *devProc, customer, typ, lane, key string, data map[string]any) map[string]*rivorav1.Route {
	t.Helper()
	v, err := structpb.NewValue(data)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := d.Ingest().Publish(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.PublishRequest{
		CustomerId: customer, Type: typ, LaneKey: lane, IdempotencyKey: key, Data: v,
	}))
	if err != nil {
		t.Fatalf("publish %s for %s without a destination: %v", typ, customer, err)
	}
	if !resp.Msg.GetFannedOut() || resp.Msg.GetEventId() != "" {
		t.Fatalf("a publish without a destination answered fanned_out=%v event_id=%q", resp.Msg.GetFannedOut(), resp.Msg.GetEventId())
	}
	out := map[string]*rivorav1.Route{}
	for _, r := range resp.Msg.GetRoutes() {
		if out[r.GetSubscriptionId()] != nil {
			t.Fatalf("subscription %s routed twice", r.GetSubscriptionId())
		}
		out[r.GetSubscriptionId()] = r
	}
	return out
}

func routeIDs(routes map[string]*rivorav1.Route) []string {
	var ids []string
	for _, r := range routes {
		ids = append(ids, r.GetEventId())
	}
	return ids
}

// requestsFor is every request p received for event id.
func requestsFor(p *partner.Partner, id string) []partner.Request {
	var out []partner.Request
	for _, r := range p.Requests() {
		if r.ID == id {
			out = append(out, r)
		}
	}
	return out
}

func TestSubscriptionsFanOut(t *testing.T) {
	d := startDev(t, devOptions{})
	p1 := partner.New(t, partner.Options{})
	p2 := partner.New(t, partner.Options{})
	d1 := createDestination(t, d, "d1", p1, "", nil)
	d2 := createDestination(t, d, "d2", p2, "", nil)

	s1 := subscribe(t, d, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "d1", Types: []string{"order.*"}})
	s2 := subscribe(t, d, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "d2", Types: []string{"order.created"}, Path: "/in/c1", Secret: c1Secret})
	if s2.GetSecret() != c1Secret && s2.GetSecretFingerprint() == "" {
		t.Fatalf("the subscription's answer shows neither its secret nor its fingerprint: %v", s2)
	}
	// Everything d2 receives in this test comes through c1's subscription:
	// its partner verifies with c1's secret.
	if err := p2.SetSecret(c1Secret); err != nil {
		t.Fatal(err)
	}

	// One publish of order.created reaches d1 and d2, once each.
	first := fanOut(t, d, "c1", "order.created", "u1", "k-1", map[string]any{"amount": 150})
	if len(first) != 2 || first[s1.GetId()].GetDestinationId() != "d1" || first[s2.GetId()].GetDestinationId() != "d2" {
		t.Fatalf("order.created routes = %v, want %s→d1 and %s→d2", first, s1.GetId(), s2.GetId())
	}
	if first[s1.GetId()].GetEventId() == first[s2.GetId()].GetEventId() {
		t.Fatal("both routes have one event id; each delivery needs its own")
	}
	p1.WaitDelivered(t, []string{first[s1.GetId()].GetEventId()}, 30*time.Second)
	p2.WaitDelivered(t, []string{first[s2.GetId()].GetEventId()}, 30*time.Second)

	// d2's delivery is at c1's path, signed with c1's secret (the Standard
	// Webhooks library verifies it), not with d2's.
	got := requestsFor(p2, first[s2.GetId()].GetEventId())
	if len(got) != 1 || got[0].Path != "/in/c1" {
		t.Fatalf("d2 got %d requests for the event, path %q; want 1 at /in/c1", len(got), pathOf(got))
	}
	wh, err := standardwebhooks.NewWebhook(c1Secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(got[0].Payload, got[0].Header); err != nil {
		t.Fatalf("the delivery at c1's path does not verify with c1's secret: %v", err)
	}
	if whD2, _ := standardwebhooks.NewWebhook(d2.GetSecret()); whD2.Verify(got[0].Payload, got[0].Header) == nil {
		t.Fatal("the delivery at c1's path verifies with d2's own secret: it must be signed with the subscription's only")
	}
	gotD1 := requestsFor(p1, first[s1.GetId()].GetEventId())
	whD1, _ := standardwebhooks.NewWebhook(d1.GetSecret())
	if len(gotD1) != 1 || whD1.Verify(gotD1[0].Payload, gotD1[0].Header) != nil {
		t.Fatalf("d1 got %d requests for its route, or it does not verify with d1's secret", len(gotD1))
	}

	// order.updated reaches only d1; invoice.paid matches nothing and is
	// no error.
	updated := fanOut(t, d, "c1", "order.updated", "u1", "", map[string]any{"amount": 1})
	if len(updated) != 1 || updated[s1.GetId()] == nil {
		t.Fatalf("order.updated routes = %v, want only %s", updated, s1.GetId())
	}
	p1.WaitDelivered(t, routeIDs(updated), 30*time.Second)
	unroutedBefore := metricSum(t, d, "rivora_ingest_unrouted_total")
	if none := fanOut(t, d, "c1", "invoice.paid", "u1", "", map[string]any{}); len(none) != 0 {
		t.Fatalf("invoice.paid routes = %v, want none", none)
	}
	if after := metricSum(t, d, "rivora_ingest_unrouted_total"); after != unroutedBefore+1 {
		t.Fatalf("rivora_ingest_unrouted_total went from %v to %v, want +1", unroutedBefore, after)
	}

	// A subscription created after the publish does not receive its retry,
	// and the retry stores nothing twice: it answers the first routes.
	s3 := subscribe(t, d, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "d1", Types: []string{"*"}})
	retry := fanOut(t, d, "c1", "order.created", "u1", "k-1", map[string]any{"amount": 150})
	if len(retry) != 2 || retry[s3.GetId()] != nil || retry[s1.GetId()].GetEventId() != first[s1.GetId()].GetEventId() || retry[s2.GetId()].GetEventId() != first[s2.GetId()].GetEventId() {
		t.Fatalf("the retried publish answered %v, want the first routes %v", retry, first)
	}
	// The same key with another payload is refused.
	_, err = d.Ingest().Publish(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.PublishRequest{
		CustomerId: "c1", Type: "order.created", LaneKey: "u1", IdempotencyKey: "k-1", Payload: []byte(`{"amount":1}`),
	}))
	if connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("the key reused for another payload: %v, want already_exists", err)
	}
	// A sentinel behind it in every lane: once delivered, anything the
	// retry could have stored would have been delivered before it.
	sentinel := fanOut(t, d, "c1", "order.created", "u1", "", map[string]any{"amount": 2})
	if len(sentinel) != 3 {
		t.Fatalf("sentinel routes = %v, want 3 subscriptions", sentinel)
	}
	p1.WaitDelivered(t, []string{sentinel[s1.GetId()].GetEventId(), sentinel[s3.GetId()].GetEventId()}, 30*time.Second)
	p2.WaitDelivered(t, []string{sentinel[s2.GetId()].GetEventId()}, 30*time.Second)
	for _, r := range first {
		p := p1
		if r.GetDestinationId() == "d2" {
			p = p2
		}
		if n := len(requestsFor(p, r.GetEventId())); n != 1 {
			t.Fatalf("event %s (%s) was delivered %d times; the retry stored it again", r.GetEventId(), r.GetSubscriptionId(), n)
		}
	}
	if n := len(p1.Requests()) + len(p2.Requests()); n != 6 {
		t.Fatalf("the partners got %d requests, want 6 (2 first, 1 order.updated, 3 sentinel)", n)
	}

	// A filter on data routes only the matching events.
	big := subscribe(t, d, &rivorav1.CreateSubscriptionRequest{CustomerId: "c2", DestinationId: "d1", Types: []string{"order.*"}, Filter: "data.amount > 100"})
	if small := fanOut(t, d, "c2", "order.created", "u9", "", map[string]any{"amount": 50}); len(small) != 0 {
		t.Fatalf("amount 50 routed to %v; the filter wants > 100", small)
	}
	if noField := fanOut(t, d, "c2", "order.created", "u9", "", map[string]any{"other": 500}); len(noField) != 0 {
		t.Fatalf("data without amount routed to %v; a missing field does not match", noField)
	}
	large := fanOut(t, d, "c2", "order.created", "u9", "", map[string]any{"amount": 150})
	if len(large) != 1 || large[big.GetId()] == nil {
		t.Fatalf("amount 150 routes = %v, want %s", large, big.GetId())
	}
	p1.WaitDelivered(t, routeIDs(large), 30*time.Second)
	_, err = subscriptionsAPI(d).CreateSubscription(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.CreateSubscriptionRequest{
		CustomerId: "c2", DestinationId: "d1", Types: []string{"*"}, Filter: "data.amount >",
	}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a filter that does not compile: %v, want invalid_argument", err)
	}
}

func pathOf(rs []partner.Request) string {
	var paths []string
	for _, r := range rs {
		paths = append(paths, r.Path)
	}
	return strings.Join(paths, ",")
}

// metricSum adds every sample of a metric family (all label sets).
func metricSum(t *testing.T, d *devProc, family string) float64 {
	t.Helper()
	var sum float64
	for _, line := range strings.Split(metricsText(t, d), "\n") {
		name, rest, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") || (name != family && !strings.HasPrefix(name, family+"{")) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(rest, &v); err == nil {
			sum += v
		}
	}
	return sum
}

// A paused subscription holds its events while another subscription's
// events to the same destination flow; on resume they arrive in lane
// order. Deleting it with events pending is refused; with force its events
// become dead letters with reason deleted.
func TestPausedSubscriptionHoldsAndDeleteArchives(t *testing.T) {
	d := startDev(t, devOptions{})
	p := partner.New(t, partner.Options{})
	createDestination(t, d, "d1", p, "", nil)
	held := subscribe(t, d, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "d1", Types: []string{"order.*"}})
	other := subscribe(t, d, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "d1", Types: []string{"*"}})
	api := subscriptionsAPI(d)
	ctx := ctxTimeout(t, 2*time.Minute)
	paused, err := api.PauseSubscription(ctx, connect.NewRequest(&rivorav1.PauseSubscriptionRequest{Id: held.GetId(), Reason: "maintenance"}))
	if err != nil {
		t.Fatal(err)
	}
	waitConfigApplied(t, d, paused.Msg.GetVersion())

	var heldIDs, otherIDs []string
	for i := range 5 {
		r := fanOut(t, d, "c1", "order.created", "u1", "", map[string]any{"n": i})
		heldIDs = append(heldIDs, r[held.GetId()].GetEventId())
		otherIDs = append(otherIDs, r[other.GetId()].GetEventId())
	}
	// The other subscription's events, published at the same moments to
	// the same destination, arrive: the paused one's wait.
	p.WaitDelivered(t, otherIDs, 30*time.Second)
	for _, id := range heldIDs {
		if n := p.Sent(id); n != 0 {
			t.Fatalf("event %s of the paused subscription was sent %d times", id, n)
		}
		ev, err := d.Events().GetEvent(ctx, connect.NewRequest(&rivorav1.GetEventRequest{EventId: id}))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Msg.GetState() != rivorav1.EventState_EVENT_STATE_PENDING || ev.Msg.GetSubscriptionId() != held.GetId() || len(ev.Msg.GetAttempts()) != 0 {
			t.Fatalf("event %s of the paused subscription: state %v, subscription %q, %d attempts; want pending, %s, none",
				id, ev.Msg.GetState(), ev.Msg.GetSubscriptionId(), len(ev.Msg.GetAttempts()), held.GetId())
		}
	}
	resumed, err := api.ResumeSubscription(ctx, connect.NewRequest(&rivorav1.ResumeSubscriptionRequest{Id: held.GetId()}))
	if err != nil {
		t.Fatal(err)
	}
	waitConfigApplied(t, d, resumed.Msg.GetVersion())
	p.WaitDelivered(t, heldIDs, 30*time.Second)
	var order []string
	for _, r := range p.Requests() {
		if slices.Contains(heldIDs, r.ID) && r.Status/100 == 2 {
			order = append(order, r.ID)
		}
	}
	if !slices.Equal(order, heldIDs) {
		t.Fatalf("after resume the held events arrived as %v, want lane order %v", order, heldIDs)
	}

	// Pending events again, then delete.
	paused, err = api.PauseSubscription(ctx, connect.NewRequest(&rivorav1.PauseSubscriptionRequest{Id: held.GetId(), Reason: "hold for the delete"}))
	if err != nil {
		t.Fatal(err)
	}
	waitConfigApplied(t, d, paused.Msg.GetVersion())
	var pending []string
	for i := range 2 {
		r := fanOut(t, d, "c1", "order.created", "u2", "", map[string]any{"n": i})
		pending = append(pending, r[held.GetId()].GetEventId())
	}
	_, err = api.DeleteSubscription(ctx, connect.NewRequest(&rivorav1.DeleteSubscriptionRequest{Id: held.GetId()}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("deleting a subscription with 2 pending events: %v, want failed_precondition", err)
	}
	del, err := api.DeleteSubscription(ctx, connect.NewRequest(&rivorav1.DeleteSubscriptionRequest{Id: held.GetId(), Force: true}))
	if err != nil {
		t.Fatalf("force delete: %v", err)
	}
	if del.Msg.GetArchived() != 2 {
		t.Fatalf("force delete archived %d events, want 2", del.Msg.GetArchived())
	}
	archive := rivorav1connect.NewArchiveServiceClient(authedHTTP, d.URL())
	err = poll.Until(ctx, 30*time.Second, 100*time.Millisecond, func() error {
		resp, err := archive.ListDeadLetters(ctx, connect.NewRequest(&rivorav1.ListDeadLettersRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "d1", SubscriptionId: held.GetId()}}))
		if err != nil {
			return poll.GiveUp(err)
		}
		var ids []string
		for _, dl := range resp.Msg.GetDeadLetters() {
			if dl.GetReason() != rivorav1.DeadReason_DEAD_REASON_DELETED {
				return poll.GiveUp(errors.New("a dead letter of the deleted subscription has reason " + dl.GetReason().String()))
			}
			ids = append(ids, dl.GetEvent().GetEventId())
		}
		slices.Sort(ids)
		want := slices.Sorted(slices.Values(pending))
		if !slices.Equal(ids, want) {
			return errors.New("dead letters " + strings.Join(ids, ",") + ", want " + strings.Join(want, ","))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the deleted subscription's events in the archive: %v", err)
	}
	if _, err := api.GetSubscription(ctx, connect.NewRequest(&rivorav1.GetSubscriptionRequest{Id: held.GetId()})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("get of the deleted subscription: %v, want not_found", err)
	}
	// A replay may name the subscription alone: its destination is looked
	// up. A deleted one's is unknown, and the refusal says how to name it.
	if out, stderr, err := runRivoractl(d, "replay", "--subscription", other.GetId(), "--dry-run"); err != nil {
		t.Fatalf("replay --subscription %s --dry-run: %v\n%s%s", other.GetId(), err, out, stderr)
	}
	if _, stderr, err := runRivoractl(d, "replay", "--subscription", held.GetId(), "--dry-run"); err == nil || !strings.Contains(stderr, "--destination D --subscription "+held.GetId()) {
		t.Fatalf("replay --subscription of a deleted one: %v\n%s; want a refusal naming --destination D --subscription %s", err, stderr, held.GetId())
	}
}

// The catalogue: a publish whose data breaks its type's schema is
// refused naming the path; with --strict-event-types an unknown type is
// refused.
func TestEventTypeSchemaAndStrict(t *testing.T) {
	d := startDev(t, devOptions{Args: []string{"--strict-event-types"}})
	p := partner.New(t, partner.Options{})
	createDestination(t, d, "d1", p, "", nil)
	types := rivorav1connect.NewEventTypeServiceClient(authedHTTP, d.URL())
	ctx := ctxTimeout(t, time.Minute)
	created, err := types.CreateEventType(ctx, connect.NewRequest(&rivorav1.CreateEventTypeRequest{
		Name: "order.created", Description: "An order was placed.",
		Schema: `{"type":"object","required":["amount"],"properties":{"amount":{"type":"number","minimum":0}}}`,
	}))
	if err != nil {
		t.Fatal(err)
	}
	waitConfigApplied(t, d, created.Msg.GetVersion())
	if _, err := types.CreateEventType(ctx, connect.NewRequest(&rivorav1.CreateEventTypeRequest{Name: "bad.schema", Schema: `{"type": 12}`})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a schema that does not compile: %v, want invalid_argument", err)
	}
	publish := func(typ, data string) error {
		_, err := d.Ingest().Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{
			DestinationId: "d1", CustomerId: "c1", LaneKey: "u1", Type: typ, Payload: []byte(data),
		}))
		return err
	}
	if err := publish("order.created", `{"amount": 5}`); err != nil {
		t.Fatalf("valid data: %v", err)
	}
	err = publish("order.created", `{"amount": "five"}`)
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "data/amount") {
		t.Fatalf("data breaking the schema: %v, want invalid_argument naming data/amount", err)
	}
	err = publish("order.unknown", `{}`)
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "catalogue") {
		t.Fatalf("a type not in the catalogue of a strict cell: %v, want invalid_argument", err)
	}
	list, err := types.ListEventTypes(ctx, connect.NewRequest(&rivorav1.ListEventTypesRequest{}))
	if err != nil || !list.Msg.GetStrict() || len(list.Msg.GetEventTypes()) != 1 {
		t.Fatalf("ListEventTypes: %v %v, want strict and one type", list, err)
	}
}
