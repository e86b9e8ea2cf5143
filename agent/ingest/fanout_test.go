package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/subscriptions"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/routing"
	"github.com/rivora/rivora/sdk/eventid"
)

// withSubscriptions installs subs in the fixture's table.
func (f *fixture) withSubscriptions(t testing.TB, subs ...*rivorav1.Subscription) {
	t.Helper()
	for _, s := range f.subs.Replace(time.Now(), subs) {
		if s.Unusable != nil {
			t.Fatal(s.Unusable)
		}
	}
}

// fanOut is a publish without destination for customer acme.
func fanOut(typ, payload string) *rivorav1.PublishRequest {
	return &rivorav1.PublishRequest{CustomerId: "acme", LaneKey: "user-42", Type: typ, Payload: []byte(payload)}
}

// routeSet lists a fan-out answer's routes as "subscription>destination".
func routeSet(resp *rivorav1.PublishResponse) []string {
	var out []string
	for _, r := range resp.GetRoutes() {
		out = append(out, r.GetSubscriptionId()+">"+r.GetDestinationId())
	}
	return out
}

// storedByID reads INGEST's events by event id.
func (f *fixture) storedByID(t testing.TB) map[string]*rivorav1.Event {
	t.Helper()
	out := map[string]*rivorav1.Event{}
	for _, ev := range f.stored(t) {
		if _, dup := out[ev.GetEventId()]; dup {
			t.Fatalf("event %s stored twice", ev.GetEventId())
		}
		out[ev.GetEventId()] = ev
	}
	return out
}

// errorInfo is the google.rpc.ErrorInfo detail of a Connect error, or nil.
func errorInfo(err error) *errdetails.ErrorInfo {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if info, ok := v.(*errdetails.ErrorInfo); ok {
				return info
			}
		}
	}
	return nil
}

// counter reads a counter without labels from the default registry.
func counter(t testing.TB, name string) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// acmeSubscriptions: three of acme's match order.created (by exact type,
// glob and filter), one is another type, one another customer's.
var acmeSubscriptions = []*rivorav1.Subscription{
	{Id: "sub_glob", CustomerId: "acme", DestinationId: "orders", Types: []string{"order.*"}},
	{Id: "sub_exact", CustomerId: "acme", DestinationId: "billing", Types: []string{"order.created", "invoice.paid"}},
	{Id: "sub_big", CustomerId: "acme", DestinationId: "billing", Types: []string{"*.created"}, Filter: "data.amount > 100"},
	{Id: "sub_invoices", CustomerId: "acme", DestinationId: "orders", Types: []string{"invoice.*"}},
	{Id: "sub_other", CustomerId: "globex", DestinationId: "orders", Types: []string{"*"}},
}

// A publish without destination is stored once per matching subscription
// of its customer, each delivery with its own id, in its subscription's
// lane; type globs and filters decide which match.
func TestFanOutToEachMatchingSubscription(t *testing.T) {
	f := newFixture(t)
	f.withSubscriptions(t, acmeSubscriptions...)
	cases := []struct {
		typ, payload string
		want         []string
	}{
		{"order.created", `{"amount":150}`, []string{"sub_big>billing", "sub_exact>billing", "sub_glob>orders"}},
		{"order.created", `{"amount":50}`, []string{"sub_exact>billing", "sub_glob>orders"}},
		// A filter reading a field the data lacks does not match.
		{"order.created", `{"total":500}`, []string{"sub_exact>billing", "sub_glob>orders"}},
		{"order.updated", `{"amount":500}`, []string{"sub_glob>orders"}},
		{"invoice.paid", `{}`, []string{"sub_exact>billing", "sub_invoices>orders"}},
	}
	total := 0
	for _, tc := range cases {
		resp, err := publish(f, fanOut(tc.typ, tc.payload))
		if err != nil {
			t.Fatalf("%s %s: %v", tc.typ, tc.payload, err)
		}
		if got := routeSet(resp); !resp.GetFannedOut() || resp.GetEventId() != "" || strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Fatalf("%s %s: fanned_out %v, event_id %q, routes %v; want fanned out to %v", tc.typ, tc.payload, resp.GetFannedOut(), resp.GetEventId(), got, tc.want)
		}
		stored := f.storedByID(t)
		total += len(tc.want)
		if len(stored) != total {
			t.Fatalf("INGEST holds %d events, want %d", len(stored), total)
		}
		for _, r := range resp.GetRoutes() {
			ev := stored[r.GetEventId()]
			if ev == nil {
				t.Fatalf("route %v: its event is not stored", r)
			}
			if id, err := uuid.Parse(r.GetEventId()); err != nil || id.Version() != 7 {
				t.Fatalf("route %v: event id is not a fresh UUIDv7", r)
			}
			if ev.GetSubscriptionId() != r.GetSubscriptionId() || ev.GetDestinationId() != r.GetDestinationId() || ev.GetCustomerId() != "acme" ||
				ev.GetType() != tc.typ || string(ev.GetPayload()) != tc.payload {
				t.Fatalf("route %v stored %v", r, ev)
			}
			lane := lanes.EventLane(ev)
			if lane.Subscription != r.GetSubscriptionId() || lane.Key != "user-42" {
				t.Fatalf("route %v: lane %+v, want the subscription's", r, lane)
			}
			if _, back, err := lanes.ParseSubject(lane.Subject(lanes.Partition(ev.GetDestinationId(), partitions))); err != nil || back != lane {
				t.Fatalf("lane %+v does not round-trip through its subject: %+v, %v", lane, back, err)
			}
		}
	}
}

// A payload that is not JSON never matches a filter reading data, and
// is no error of the publish; subscriptions without filters still get
// it. The filter's miss is counted in
// rivora_subscription_filter_errors_total (it read as a missing field,
// and the subscription lost every such event without a word), and a
// JSON payload's missing field still is not. The counter is the
// process's: the filter's subscription has an id no other test uses
// (sub_big's filter under its own name), so another test's publishes,
// in parallel or not, never move the series it reads.
func TestFanOutFilterOnNonJSON(t *testing.T) {
	f := newFixture(t)
	big := proto.Clone(acmeSubscriptions[2]).(*rivorav1.Subscription)
	big.Id = "sub_big_filter_on_non_json"
	f.withSubscriptions(t, acmeSubscriptions[0], acmeSubscriptions[1], big)
	failures := func() float64 {
		return labeledCounter(t, "rivora_subscription_filter_errors_total", "subscription", big.Id)
	}
	before := failures()
	req := fanOut("order.created", "amount=500")
	req.ContentType = "text/plain"
	resp, err := publish(f, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := routeSet(resp); strings.Join(got, ",") != "sub_exact>billing,sub_glob>orders" {
		t.Fatalf("routes %v", got)
	}
	if got := failures() - before; got != 1 {
		t.Fatalf("%s's filter on a text/plain payload counted %v failures, want 1", big.Id, got)
	}
	if _, err := publish(f, fanOut("order.created", `{"other":1}`)); err != nil {
		t.Fatal(err)
	}
	if got := failures() - before; got != 1 {
		t.Fatalf("%s's filter on JSON without amount counted %v failures in all, want still 1 (a missing field is a no)", big.Id, got)
	}
}

// labeledCounter reads the counter of name whose label is value, from the
// default registry (0: no such series yet).
func labeledCounter(t testing.TB, name, label, value string) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// A number past a double's range (1e400) is infinity to a filter, as the
// event type's schema orders it: the rest of the data is read as sent.
// It made the whole payload undecodable, so every filter read null and
// an event whose amount said yes reached no filtered subscription.
func TestFanOutFilterOnANumberPastADouble(t *testing.T) {
	f := newFixture(t)
	f.withSubscriptions(t, acmeSubscriptions...)
	if err := f.cat.Replace([]*rivorav1.EventType{
		{Name: "order.created", Schema: `{"type":"object","properties":{"amount":{"type":"number","exclusiveMinimum":-1e300}}}`},
	}, false); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		payload string
		want    []string
	}{
		{`{"amount":150,"note":1e400}`, []string{"sub_big>billing", "sub_exact>billing", "sub_glob>orders"}},
		{`{"amount":1e400}`, []string{"sub_big>billing", "sub_exact>billing", "sub_glob>orders"}},
		{`{"amount":50,"items":[1e-400,-2e999]}`, []string{"sub_exact>billing", "sub_glob>orders"}},
	}
	for _, tc := range cases {
		resp, err := publish(f, fanOut("order.created", tc.payload))
		if err != nil {
			t.Fatalf("%s: %v", tc.payload, err)
		}
		if got := routeSet(resp); strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Fatalf("%s: routes %v, want %v", tc.payload, got, tc.want)
		}
	}
	// The schema and the filter agree on -1e400: below every number.
	if _, err := publish(f, fanOut("order.created", `{"amount":-1e400}`)); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "exclusiveMinimum") {
		t.Fatalf("amount -1e400 under exclusiveMinimum -1e300: %v, want InvalidArgument", err)
	}
}

// A payload that says it is JSON but is not is refused when a filter is
// to read it, naming the subscription: each filter read null, and the
// event was stored without the deliveries its data would have had.
// Without a filter to run, it is delivered as is.
func TestFanOutFilterOnInvalidJSONIsRefused(t *testing.T) {
	f := newFixture(t)
	f.withSubscriptions(t, acmeSubscriptions...)
	_, err := publish(f, fanOut("order.created", `{"amount": 150`))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "not valid JSON") || !strings.Contains(err.Error(), "sub_big") {
		t.Fatalf("fan-out of broken JSON to a filter: %v, want InvalidArgument naming sub_big", err)
	}
	if n := f.msgs(t); n != 0 {
		t.Fatalf("INGEST holds %d events", n)
	}
	resp, err := publish(f, fanOut("order.updated", `{"amount": 150`))
	if err != nil {
		t.Fatal(err)
	}
	if got := routeSet(resp); strings.Join(got, ",") != "sub_glob>orders" {
		t.Fatalf("broken JSON with no filter to run: routes %v", got)
	}
	// A filter that does not read data runs on broken JSON as on any
	// payload: it was refused as if the filter read it.
	f.withSubscriptions(t, &rivorav1.Subscription{Id: "sub_lane", CustomerId: "acme", DestinationId: "orders", Types: []string{"order.*"}, Filter: `lane.startsWith("u")`})
	resp, err = publish(f, fanOut("order.created", `{"amount": 150`))
	if err != nil {
		t.Fatalf("broken JSON to a filter over the lane alone: %v, want it routed", err)
	}
	if got := routeSet(resp); strings.Join(got, ",") != "sub_lane>orders" {
		t.Fatalf("broken JSON to a filter over the lane alone: routes %v, want sub_lane>orders", got)
	}
}

// No match is not an error: 0 routes, nothing stored, and counted.
func TestFanOutNoMatchIsCounted(t *testing.T) {
	f := newFixture(t)
	f.withSubscriptions(t, acmeSubscriptions...)
	before := counter(t, "rivora_ingest_unrouted_total")
	resp, err := publish(f, fanOut("shipment.sent", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetFannedOut() || len(resp.GetRoutes()) != 0 || resp.GetDuplicate() {
		t.Fatalf("answer %v, want fanned out to no route", resp)
	}
	// A customer with no subscription at all is the same.
	other := fanOut("order.created", `{}`)
	other.CustomerId = "initech"
	if resp, err := publish(f, other); err != nil || len(resp.GetRoutes()) != 0 {
		t.Fatalf("customer without subscriptions: %v, %v", resp, err)
	}
	if got := counter(t, "rivora_ingest_unrouted_total") - before; got != 2 {
		t.Fatalf("rivora_ingest_unrouted_total grew by %v, want 2", got)
	}
	if n := f.msgs(t); n != 0 {
		t.Fatalf("INGEST holds %d events", n)
	}
}

// A keyed fan-out is one event: each delivery's id derives from (the
// subscription, customer, key); a retry stores nothing new and answers
// the same routes, even after a subscription that matches was created;
// the key with another payload is already_exists.
func TestFanOutKeyedRetry(t *testing.T) {
	f := newFixture(t)
	f.withSubscriptions(t, acmeSubscriptions...)
	req := fanOut("order.created", `{"amount":150}`)
	req.IdempotencyKey = "order-1"
	first, err := publish(f, req)
	if err != nil {
		t.Fatal(err)
	}
	if first.GetDuplicate() || len(first.GetRoutes()) != 3 {
		t.Fatalf("first publish %v", first)
	}
	for _, r := range first.GetRoutes() {
		if want := eventid.ForSubscription(r.GetSubscriptionId(), "acme", "order-1"); r.GetEventId() != want {
			t.Fatalf("route %v: event id, want %s", r, want)
		}
	}
	// Unrouted, keyed: its retry stays unrouted too.
	none := fanOut("shipment.sent", `{}`)
	none.IdempotencyKey = "ship-1"
	if resp, err := publish(f, none); err != nil || len(resp.GetRoutes()) != 0 {
		t.Fatalf("keyed publish matching nothing: %v, %v", resp, err)
	}
	f.subs.Update(time.Now(), []*rivorav1.Subscription{
		{Id: "sub_new", CustomerId: "acme", DestinationId: "orders", Types: []string{"*"}},
	}, []string{"sub_glob"})
	again, err := publish(f, proto.Clone(req).(*rivorav1.PublishRequest))
	if err != nil {
		t.Fatal(err)
	}
	if !again.GetDuplicate() || !proto.Equal(&rivorav1.PublishResponse{Routes: again.GetRoutes()}, &rivorav1.PublishResponse{Routes: first.GetRoutes()}) {
		t.Fatalf("retry answered %v, want the first routes %v as a duplicate", again, first.GetRoutes())
	}
	if resp, err := publish(f, proto.Clone(none).(*rivorav1.PublishRequest)); err != nil || len(resp.GetRoutes()) != 0 || !resp.GetDuplicate() {
		t.Fatalf("retry of the unrouted publish after sub_new matches everything: %v, %v; want 0 routes, duplicate", resp, err)
	}
	if n := f.msgs(t); n != 3 {
		t.Fatalf("INGEST holds %d events after retries, want the first 3", n)
	}
	other := proto.Clone(req).(*rivorav1.PublishRequest)
	other.Payload = []byte(`{"amount":151}`)
	_, err = publish(f, other)
	if connect.CodeOf(err) != connect.CodeAlreadyExists || !strings.Contains(err.Error(), `idempotency key "order-1"`) {
		t.Fatalf("the key for another payload: %v, want AlreadyExists naming the key", err)
	}
	// The same key on a destination by name is another scope: a new event.
	direct := valid()
	direct.IdempotencyKey = "order-1"
	if resp, err := publish(f, direct); err != nil || resp.GetDuplicate() {
		t.Fatalf("the key on a named destination: %v, %v; want a new event", resp, err)
	}
}

// partitionStore owns one partition and fails every write to it; other
// partitions' events go to INGEST.
type partitionStore struct{ failing int }

func (s partitionStore) AppendLocal(_ context.Context, p int, _ []ingest.LocalEvent) ([]ingest.Stored, bool, error) {
	if p != s.failing {
		return nil, false, nil
	}
	return nil, true, errors.New("disk full")
}

func (s partitionStore) Owns(p int) bool { return p == s.failing }

func (partitionStore) MayHold(int, string) bool                         { return true }
func (partitionStore) WaitsInIngest(context.Context, int) (bool, error) { return true, nil }

// A keyed fan-out whose store failed midway keeps its record: the retry
// stores exactly the routes the first try chose (completing it, even
// though a new subscription matches now), and the key cannot be reused
// for another payload.
func TestFanOutRetryCompletesAPartialStore(t *testing.T) {
	f := newFixture(t)
	// A destination in another partition than orders and billing.
	other := ""
	for i := range 20 {
		name := fmt.Sprintf("partner%d", i)
		if p := lanes.Partition(name, partitions); p != lanes.Partition("orders", partitions) && p != lanes.Partition("billing", partitions) {
			other = name
			break
		}
	}
	f.reg.Replace(time.Now(), []*rivorav1.Destination{
		{Id: "orders", Url: "http://127.0.0.1:1/hook", Secret: secret},
		{Id: "billing", Url: "http://127.0.0.1:1/hook", Secret: secret},
		{Id: other, Url: "http://127.0.0.1:1/hook", Secret: secret},
	})
	f.withSubscriptions(t, append([]*rivorav1.Subscription{{Id: "sub_partner", CustomerId: "acme", DestinationId: other, Types: []string{"order.created"}}}, acmeSubscriptions...)...)
	failing := f.withLocal(t, partitionStore{failing: lanes.Partition(other, partitions)})
	req := fanOut("order.created", `{"amount":150}`)
	req.IdempotencyKey = "order-2"
	if _, err := failing.Publish(context.Background(), connect.NewRequest(req)); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("publish into a store failing for billing: %v, want Unavailable", err)
	}
	if n := f.msgs(t); n != 3 {
		t.Fatalf("INGEST holds %d events after the partial store, want orders' and billing's 3", n)
	}
	f.subs.Update(time.Now(), []*rivorav1.Subscription{{Id: "sub_new", CustomerId: "acme", DestinationId: "orders", Types: []string{"*"}}}, nil)
	rebuilt := proto.Clone(req).(*rivorav1.PublishRequest)
	rebuilt.Payload = []byte(`{"amount":150,"retry":true}`)
	if _, err := publish(f, rebuilt); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("another payload after a partial store: %v, want AlreadyExists", err)
	}
	resp, err := publish(f, req)
	if err != nil {
		t.Fatal(err)
	}
	want := "sub_big>billing,sub_exact>billing,sub_glob>orders,sub_partner>" + other
	if got := routeSet(resp); resp.GetDuplicate() || strings.Join(got, ",") != want {
		t.Fatalf("retry answered %v (duplicate %v), want the first try's routes %s, not a duplicate", got, resp.GetDuplicate(), want)
	}
	stored := f.storedByID(t)
	if len(stored) != 4 {
		t.Fatalf("INGEST holds %d events, want the 4 routes once each", len(stored))
	}
	for _, r := range resp.GetRoutes() {
		if stored[r.GetEventId()] == nil {
			t.Fatalf("route %v not stored", r)
		}
	}
}

// Of racing publishes with one key the first record decides: those with
// its payload answer its routes, the others already_exists; and a
// gateway that sees other subscriptions (an agent whose config lags)
// answers the recorded routes, not its own.
func TestFanOutRacingPublishesWithOneKey(t *testing.T) {
	f := newFixture(t)
	f.withSubscriptions(t, acmeSubscriptions...)
	lagging := subscriptions.NewTable()
	lagging.Replace(time.Now(), append([]*rivorav1.Subscription{{Id: "sub_extra", CustomerId: "acme", DestinationId: "orders", Types: []string{"*"}}}, acmeSubscriptions...))
	other := f.with(t, ingest.Config{Subscriptions: lagging})
	for round := range 5 {
		key := fmt.Sprintf("race-%d", round)
		var wg sync.WaitGroup
		answers := make([]*rivorav1.PublishResponse, 8)
		errs := make([]error, 8)
		for i := range answers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := fanOut("order.created", fmt.Sprintf(`{"amount":%d}`, 150+i%2))
				req.IdempotencyKey = key
				gw := f.gw
				if i%4 >= 2 {
					gw = other
				}
				resp, err := gw.Publish(context.Background(), connect.NewRequest(req))
				if err == nil {
					answers[i] = resp.Msg
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		var winner []string
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won == -1:
				won, winner = i%2, routeSet(answers[i])
			case err == nil:
				if i%2 != won || strings.Join(routeSet(answers[i]), ",") != strings.Join(winner, ",") {
					t.Fatalf("round %d: publish %d answered %v; the winner (payload %d) %v", round, i, routeSet(answers[i]), won, winner)
				}
			case connect.CodeOf(err) != connect.CodeAlreadyExists:
				t.Fatalf("round %d: publish %d: %v", round, i, err)
			}
		}
		for i, err := range errs {
			if (i%2 == won) != (err == nil) {
				t.Fatalf("round %d: publish %d (payload %d) answered %v; the winner's payload is %d", round, i, i%2, err, won)
			}
		}
	}
	// Each round stored its winner's routes once each: f.gw's 3, or the
	// lagging gateway's 4 (with sub_extra), whichever recorded first.
	stored := f.storedByID(t)
	total := 0
	for round := range 5 {
		n := 0
		for _, sub := range []string{"sub_glob", "sub_exact", "sub_big", "sub_extra"} {
			if stored[eventid.ForSubscription(sub, "acme", fmt.Sprintf("race-%d", round))] != nil {
				n++
			}
		}
		if n != 3 && n != 4 {
			t.Fatalf("round %d stored %d deliveries, want 3 or 4", round, n)
		}
		total += n
	}
	if len(stored) != total {
		t.Fatalf("INGEST holds %d events, want the rounds' %d", len(stored), total)
	}
}

// The race above only shows agreement; this shows adoption: a gateway
// whose own match differs answers the routes the key's first publish
// recorded.
func TestFanOutRetryOnAnotherAgentAdoptsTheRecordedRoutes(t *testing.T) {
	f := newFixture(t)
	f.withSubscriptions(t, acmeSubscriptions...)
	lagging := subscriptions.NewTable()
	lagging.Replace(time.Now(), []*rivorav1.Subscription{{Id: "sub_extra", CustomerId: "acme", DestinationId: "orders", Types: []string{"*"}}})
	other := f.with(t, ingest.Config{Subscriptions: lagging})
	req := fanOut("order.created", `{"amount":150}`)
	req.IdempotencyKey = "order-3"
	first, err := publish(f, req)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := other.Publish(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(routeSet(resp.Msg), ",") != strings.Join(routeSet(first), ",") || !resp.Msg.GetDuplicate() {
		t.Fatalf("the other agent answered %v, want the recorded %v as a duplicate", routeSet(resp.Msg), routeSet(first))
	}
	if n := f.msgs(t); n != 3 {
		t.Fatalf("INGEST holds %d events, want 3", n)
	}
}

// A subscription whose destination this agent does not know yet is
// refused Unavailable (its config is on the way), nothing stored.
func TestFanOutUnknownDestinationIsUnavailable(t *testing.T) {
	f := newFixture(t)
	f.withSubscriptions(t, append([]*rivorav1.Subscription{{Id: "sub_ghost", CustomerId: "acme", DestinationId: "ghost", Types: []string{"*"}}}, acmeSubscriptions...)...)
	_, err := publish(f, fanOut("order.created", `{}`))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "ghost") {
		t.Fatalf("fan-out to an unknown destination: %v, want Unavailable naming it", err)
	}
	if n := f.msgs(t); n != 0 {
		t.Fatalf("INGEST holds %d events", n)
	}
	// A keyed publish's retry whose recorded route's destination this
	// agent no longer knows is refused the same way, not cut short, when
	// nothing tells that it was deleted (this gateway knows no config
	// version: TestFanOutRetryAfterItsDestinationWasDeleted).
	f.withSubscriptions(t, acmeSubscriptions...)
	req := fanOut("order.created", `{}`)
	req.IdempotencyKey = "order-5"
	if _, err := publish(f, req); err != nil {
		t.Fatal(err)
	}
	f.reg.Replace(time.Now(), []*rivorav1.Destination{{Id: "orders", Url: "http://127.0.0.1:1/hook", Secret: secret}})
	f.withSubscriptions(t, acmeSubscriptions[0])
	_, err = publish(f, req)
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "billing") {
		t.Fatalf("retry with a recorded route to a destination gone from this agent: %v, want Unavailable naming it", err)
	}
}

// A keyed fan-out's retry after one of its destinations was deleted
// (its subscriptions with it) answers the recorded routes as a duplicate,
// storing nothing new: the first try stored that route's event, which
// died with its destination. It was refused Unavailable ("not known
// yet, retry shortly") for good, and retried by publishers until they
// gave up. An agent behind the route's config version may just not know
// the destination yet: it still refuses Unavailable. A destination made
// again under the id since is another one: the route stays as recorded.
func TestFanOutRetryAfterItsDestinationWasDeleted(t *testing.T) {
	f := newFixture(t)
	dests := func(billing uint64) []*rivorav1.Destination {
		out := []*rivorav1.Destination{{Id: "orders", Url: "http://127.0.0.1:1/hook", Secret: secret, CreatedVersion: 1}}
		if billing != 0 {
			out = append(out, &rivorav1.Destination{Id: "billing", Url: "http://127.0.0.1:1/hook", Secret: secret, CreatedVersion: billing})
		}
		return out
	}
	f.reg.Replace(time.Now(), dests(1))
	f.withSubscriptions(t, acmeSubscriptions...)
	var applied atomic.Uint64
	applied.Store(2)
	f.gw = f.with(t, ingest.Config{Applied: applied.Load})
	req := fanOut("order.created", `{"amount":150}`)
	req.IdempotencyKey = "order-gone"
	first, err := publish(f, req)
	if err != nil || len(first.GetRoutes()) != 3 {
		t.Fatalf("first publish: %v, %v; want 3 routes", first, err)
	}
	// Version 3 deletes billing and its subscriptions.
	f.reg.Replace(time.Now(), dests(0))
	f.withSubscriptions(t, acmeSubscriptions[0], acmeSubscriptions[3], acmeSubscriptions[4])
	applied.Store(3)
	retried := func(what string) {
		t.Helper()
		again, err := publish(f, proto.Clone(req).(*rivorav1.PublishRequest))
		if err != nil {
			t.Fatalf("%s: %v; want the recorded routes as a duplicate", what, err)
		}
		if !again.GetDuplicate() || !proto.Equal(&rivorav1.PublishResponse{Routes: again.GetRoutes()}, &rivorav1.PublishResponse{Routes: first.GetRoutes()}) {
			t.Fatalf("%s answered %v, want the first routes %v as a duplicate", what, again, first.GetRoutes())
		}
		if n := f.msgs(t); n != 3 {
			t.Fatalf("%s: INGEST holds %d events, want the first 3", what, n)
		}
	}
	retried("retry after billing was deleted")

	var behind atomic.Uint64
	behind.Store(1)
	lagging := f.with(t, ingest.Config{Applied: behind.Load})
	_, err = lagging.Publish(context.Background(), connect.NewRequest(proto.Clone(req).(*rivorav1.PublishRequest)))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "billing") {
		t.Fatalf("retry on an agent behind the routes' config version: %v, want Unavailable naming billing", err)
	}

	f.reg.Replace(time.Now(), dests(4))
	applied.Store(4)
	retried("retry after billing was made again")
}

// subscription_id sends a test event to that one subscription whatever
// its types and filter say; it must be the customer's.
func TestTestEvent(t *testing.T) {
	f := newFixture(t)
	f.withSubscriptions(t, acmeSubscriptions...)
	req := fanOut("ping", `{"amount":1}`)
	req.SubscriptionId = "sub_big" // *.created with amount > 100: no match by itself
	req.IdempotencyKey = "test-1"
	resp, err := publish(f, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := routeSet(resp); !resp.GetFannedOut() || strings.Join(got, ",") != "sub_big>billing" {
		t.Fatalf("test event answered %v", resp)
	}
	if ev := f.storedByID(t)[resp.GetRoutes()[0].GetEventId()]; ev == nil || ev.GetSubscriptionId() != "sub_big" || ev.GetType() != "ping" {
		t.Fatalf("stored %v", ev)
	}
	// The key of a test event is not a fan-out's.
	fan := fanOut("ping", `{"amount":1}`)
	fan.IdempotencyKey = "test-1"
	if _, err := publish(f, fan); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("the test event's key for a fan-out: %v, want AlreadyExists", err)
	}
	for _, sub := range []string{"sub_other", "sub_absent"} {
		other := fanOut("ping", `{}`)
		other.SubscriptionId = sub
		_, err := publish(f, other)
		if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), fmt.Sprintf(`subscription %q of customer "acme" not found`, sub)) {
			t.Fatalf("test event to %s: %v, want NotFound as for an absent one", sub, err)
		}
	}
	bad := fanOut("ping", `{}`)
	bad.SubscriptionId = "sub.x"
	if _, err := publish(f, bad); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("test event to a malformed id: %v, want InvalidArgument", err)
	}
	if n := f.msgs(t); n != 1 {
		t.Fatalf("INGEST holds %d events, want the one test event", n)
	}
}

// A batch mixes direct and routed events: results[i] answers events[i],
// event_ids[i] is set for the direct ones; all or nothing.
func TestPublishBatchMixed(t *testing.T) {
	f := newFixture(t)
	f.withSubscriptions(t, acmeSubscriptions...)
	test := fanOut("ping", `{}`)
	test.SubscriptionId = "sub_invoices"
	events := []*rivorav1.PublishRequest{valid(), fanOut("order.created", `{"amount":1}`), fanOut("shipment.sent", `{}`), test}
	resp, err := f.gw.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{Events: events}))
	if err != nil {
		t.Fatal(err)
	}
	ids, results := resp.Msg.GetEventIds(), resp.Msg.GetResults()
	if len(ids) != 4 || len(results) != 4 {
		t.Fatalf("%d ids and %d results for 4 events", len(ids), len(results))
	}
	if ids[0] == "" || results[0].GetEventId() != ids[0] || results[0].GetFannedOut() {
		t.Fatalf("direct event: id %q, result %v", ids[0], results[0])
	}
	want := [][]string{nil, {"sub_exact>billing", "sub_glob>orders"}, nil, {"sub_invoices>orders"}}
	for i := 1; i < 4; i++ {
		if ids[i] != "" || !results[i].GetFannedOut() || strings.Join(routeSet(results[i]), ",") != strings.Join(want[i], ",") {
			t.Fatalf("events[%d]: id %q, result %v; want routes %v", i, ids[i], results[i], want[i])
		}
	}
	if n := f.msgs(t); n != 4 {
		t.Fatalf("INGEST holds %d events, want 1 + 2 + 0 + 1", n)
	}
	// One refused event refuses the batch, naming it, with its own code.
	stranger := fanOut("ping", `{}`)
	stranger.SubscriptionId = "sub_other"
	_, err = f.gw.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{valid(), fanOut("order.created", `{}`), stranger}}))
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "events[2]") || !strings.Contains(err.Error(), "nothing in this batch was stored") {
		t.Fatalf("batch with another customer's subscription: %v, want NotFound naming events[2]", err)
	}
	if n := f.msgs(t); n != 4 {
		t.Fatalf("INGEST holds %d events after a refused batch, want still 4", n)
	}
}

// The catalogue is checked on every publish, direct and routed: a schema
// names the failing path and rule; strict refuses unknown types.
func TestCatalogueAtIngest(t *testing.T) {
	f := newFixture(t)
	f.withSubscriptions(t, acmeSubscriptions...)
	err := f.cat.Replace([]*rivorav1.EventType{
		{Name: "order.created", Schema: `{"type":"object","properties":{"amount":{"type":"number","minimum":0}},"required":["amount"]}`},
		{Name: "order.updated"},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	direct := valid()
	direct.Payload = []byte(`{"amount":-1}`)
	for name, req := range map[string]*rivorav1.PublishRequest{"direct": direct, "fan-out": fanOut("order.created", `{"amount":-1}`)} {
		_, err := publish(f, req)
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "data/amount") || !strings.Contains(err.Error(), "minimum") {
			t.Fatalf("%s with amount -1: %v, want InvalidArgument naming data/amount and the rule", name, err)
		}
	}
	_, err = f.gw.PublishBatch(context.Background(), connect.NewRequest(&rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{
		fanOut("order.created", `{"amount":1}`), fanOut("order.created", `{}`),
	}}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "events[1]") || !strings.Contains(err.Error(), "required") {
		t.Fatalf("batch with data missing amount: %v, want InvalidArgument naming events[1] and the rule", err)
	}
	text := fanOut("order.created", "amount=1")
	text.ContentType = "text/plain"
	if _, err := publish(f, text); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a schema'd type as text/plain: %v, want InvalidArgument", err)
	}
	if _, err := publish(f, fanOut("order.created", `{"amount":1}`)); err != nil {
		t.Fatalf("valid data: %v", err)
	}
	if _, err := publish(f, fanOut("shipment.sent", `{}`)); err != nil {
		t.Fatalf("an unknown type, lenient: %v", err)
	}
	if err := f.cat.Replace([]*rivorav1.EventType{{Name: "order.updated"}}, true); err != nil {
		t.Fatal(err)
	}
	unknown := valid()
	unknown.Type = "shipment.sent"
	for name, req := range map[string]*rivorav1.PublishRequest{"direct": unknown, "fan-out": fanOut("shipment.sent", `{}`)} {
		if _, err := publish(f, req); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "--strict-event-types") {
			t.Fatalf("%s of an unknown type, strict: %v, want InvalidArgument", name, err)
		}
	}
	if _, err := publish(f, fanOut("order.updated", `{}`)); err != nil {
		t.Fatalf("a known type, strict: %v", err)
	}
}

// Resends and replays are not validated again (the type may have left
// the catalogue since), and they keep their subscription: the same lane.
func TestResendAndReplayKeepTheSubscription(t *testing.T) {
	f := newFixture(t)
	f.withSubscriptions(t, acmeSubscriptions...)
	resp, err := publish(f, fanOut("order.updated", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	original := f.storedByID(t)[resp.GetRoutes()[0].GetEventId()]
	if err := f.cat.Replace(nil, true); err != nil {
		t.Fatal(err)
	}
	resent, _, err := f.gw.Resend(context.Background(), original, "resend:1")
	if err != nil {
		t.Fatalf("Resend under a strict catalogue without its type: %v", err)
	}
	stored, dups, err := f.gw.Reingest(context.Background(), []*rivorav1.DeadLetter{{Event: original, DeadAt: timestamppb.Now()}})
	if err != nil || stored != 1 || dups != 0 {
		t.Fatalf("Reingest: %d stored, %d duplicates, %v", stored, dups, err)
	}
	all := f.stored(t)
	if len(all) != 3 {
		t.Fatalf("INGEST holds %d events, want the original, the resend and the replay", len(all))
	}
	for _, ev := range append(all[1:], resent) {
		if ev.GetSubscriptionId() != "sub_glob" || lanes.EventLane(ev) != lanes.EventLane(original) {
			t.Fatalf("re-ingested %v, want the original's lane %+v", ev, lanes.EventLane(original))
		}
	}
}

// The gateway's bounds: at most MaxFanout subscriptions per publish, and
// a request's deliveries in all no larger than a multiple of
// MaxBatchBytes.
func TestFanOutBounds(t *testing.T) {
	f := newFixture(t)
	many := make([]*rivorav1.Subscription, ingest.MaxFanout+1)
	for i := range many {
		many[i] = &rivorav1.Subscription{Id: fmt.Sprintf("sub_%04d", i), CustomerId: "acme", DestinationId: "orders", Types: []string{"*"}}
	}
	f.withSubscriptions(t, many...)
	_, err := publish(f, fanOut("order.created", `{}`))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), fmt.Sprint(ingest.MaxFanout)) {
		t.Fatalf("a fan-out to %d subscriptions: %v, want FailedPrecondition naming the limit", len(many), err)
	}
	f.withSubscriptions(t, many[:100]...)
	small := f.with(t, ingest.Config{MaxBatchBytes: 4096})
	req := fanOut("order.created", strings.Repeat("x", maxPayload))
	req.ContentType = "text/plain"
	_, err = small.Publish(context.Background(), connect.NewRequest(req))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "would store 100 deliveries") {
		t.Fatalf("100 deliveries of %d bytes with MaxBatchBytes 4096: %v, want ResourceExhausted", maxPayload, err)
	}
	// It says, in a detail clients read, that it is too large (not
	// back-pressure): the SDKs do not send it again.
	if info := errorInfo(err); info.GetReason() != ingest.RequestTooLargeReason || info.GetDomain() != errkind.Domain {
		t.Fatalf("the refusal's ErrorInfo is %v, want reason %s in %s", info, ingest.RequestTooLargeReason, errkind.Domain)
	}
	if n := f.msgs(t); n != 0 {
		t.Fatalf("INGEST holds %d events", n)
	}
	// A keyed fan-out to MaxFanout subscriptions with ids at their longest
	// fits its idempotency record.
	long := make([]*rivorav1.Subscription, ingest.MaxFanout)
	for i := range long {
		long[i] = &rivorav1.Subscription{Id: fmt.Sprintf("sub_%060d", i), CustomerId: "acme", DestinationId: "orders", Types: []string{"*"}}
	}
	f.withSubscriptions(t, long...)
	keyed := fanOut("order.created", `{}`)
	keyed.IdempotencyKey = "max-1"
	resp, err := publish(f, keyed)
	if err != nil || len(resp.GetRoutes()) != ingest.MaxFanout {
		t.Fatalf("keyed fan-out to %d subscriptions: %v", ingest.MaxFanout, err)
	}
	again, err := publish(f, keyed)
	if err != nil || !again.GetDuplicate() || len(again.GetRoutes()) != ingest.MaxFanout {
		t.Fatalf("its retry: %v", err)
	}
}

// An agent upgraded from a release whose IDEMPOTENCY bucket held only
// fingerprints (1 KiB values) grows it: a keyed fan-out's record fits.
func TestIdempotencyBucketGrowsOnUpgrade(t *testing.T) {
	srv, err := natsd.Start(natsd.Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	if _, err := srv.JetStream().CreateKeyValue(context.Background(), jetstream.KeyValueConfig{
		Bucket: ingest.IdempotencyBucket, TTL: ingest.DefaultDedupWindow, History: 1, MaxValueSize: 1024, Storage: jetstream.FileStorage,
	}); err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: srv, reg: destinations.NewRegistry(), subs: subscriptions.NewTable(), cat: subscriptions.NewCatalogue()}
	f.reg.Replace(time.Now(), []*rivorav1.Destination{{Id: "orders", Url: "http://127.0.0.1:1/hook", Secret: secret}})
	f.gw = f.with(t, ingest.Config{})
	subs := make([]*rivorav1.Subscription, 50)
	for i := range subs {
		subs[i] = &rivorav1.Subscription{Id: fmt.Sprintf("sub_%016x", i), CustomerId: "acme", DestinationId: "orders", Types: []string{"*"}}
	}
	f.withSubscriptions(t, subs...)
	req := fanOut("order.created", `{}`)
	req.IdempotencyKey = "after-upgrade"
	if resp, err := publish(f, req); err != nil || len(resp.GetRoutes()) != 50 {
		t.Fatalf("keyed fan-out to 50 subscriptions after the upgrade: %v", err)
	}
}

// Every stored event carries the config version the gateway had applied,
// direct or fanned out, so that an owner behind it waits for it.
func TestEventsCarryTheAppliedConfigVersion(t *testing.T) {
	f := newFixture(t)
	f.withSubscriptions(t, acmeSubscriptions...)
	f.gw = f.with(t, ingest.Config{Applied: func() uint64 { return 42 }})
	direct, err := publish(f, &rivorav1.PublishRequest{DestinationId: "orders", CustomerId: "acme", LaneKey: "u", Type: "order.created", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	routed, err := publish(f, fanOut("order.updated", `{}`))
	if err != nil || len(routed.GetRoutes()) == 0 {
		t.Fatalf("fan-out: %v routes, %v", len(routed.GetRoutes()), err)
	}
	stored := f.storedByID(t)
	for _, id := range []string{direct.GetEventId(), routed.GetRoutes()[0].GetEventId()} {
		if v := stored[id].GetConfigVersion(); v != 42 {
			t.Fatalf("event %s was stored with config version %d, want 42", id, v)
		}
	}
}

// costlyEvent is an order.created whose data holds 120k items: within
// the payload limit, past MaxFilterRunCost for a filter that maps them.
func costlyEvent() *rivorav1.PublishRequest {
	return fanOut("order.created", `{"s":"x","items":[`+strings.TrimSuffix(strings.Repeat("1,", 120_000), ",")+`]}`)
}

// A filter too costly for an event's data refuses the publish with
// invalid_argument naming that filter's subscription (not the cheap one
// before or after it), whatever time the filters are given: the answer
// is the event's, not the machine's load. Nothing is stored.
func TestFanOutCostlyFilterRefusedWhateverTheLoad(t *testing.T) {
	f := newFixture(t)
	f.withSubscriptions(t,
		&rivorav1.Subscription{Id: "sub_a_cheap", CustomerId: "acme", DestinationId: "orders", Types: []string{"order.*"}, Filter: `data.s == "x"`},
		&rivorav1.Subscription{Id: "sub_b_costly", CustomerId: "acme", DestinationId: "orders", Types: []string{"order.*"}, Filter: `data.items.map(i, data.s).size() > 5`},
		&rivorav1.Subscription{Id: "sub_c_cheap", CustomerId: "acme", DestinationId: "billing", Types: []string{"order.*"}, Filter: `data.s == "x"`},
	)
	f.gw = f.with(t, ingest.Config{MaxPayload: ingest.DefaultMaxPayload})
	saved := routing.EventFilterBudget
	t.Cleanup(func() { routing.EventFilterBudget = saved })
	// An hour: however slow the machine, the filters' cost, not their
	// time, decides.
	routing.EventFilterBudget = time.Hour
	_, err := publish(f, costlyEvent())
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "sub_b_costly's filter") || !strings.Contains(err.Error(), "cost limit") {
		t.Fatalf("publish past sub_b_costly's cost limit: %v; want invalid_argument naming sub_b_costly's cost limit", err)
	}
	if n := f.msgs(t); n != 0 {
		t.Fatalf("INGEST holds %d events, want none", n)
	}
	// The same event without the costly subscription is routed.
	f.withSubscriptions(t, acmeSubscriptions...)
	if _, err := publish(f, costlyEvent()); err != nil {
		t.Fatalf("the event without a costly filter: %v", err)
	}
}

// When the event's time for its filters runs out before they answer
// (the agent overloaded, not the event's fault: the cost limits keep an
// event's filters well within it), the publish is refused as
// unavailable, which publishers retry, not as invalid_argument.
func TestFanOutFilterTimeRunningOutIsRetryable(t *testing.T) {
	f := newFixture(t)
	f.withSubscriptions(t, &rivorav1.Subscription{Id: "sub_cheap", CustomerId: "acme", DestinationId: "orders", Types: []string{"order.*"}, Filter: `data.amount > 100`})
	saved := routing.EventFilterBudget
	t.Cleanup(func() { routing.EventFilterBudget = saved })
	routing.EventFilterBudget = time.Nanosecond // spent before the filter starts
	_, err := publish(f, fanOut("order.created", `{"amount":150}`))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "sub_cheap") || !strings.Contains(err.Error(), "retry") {
		t.Fatalf("publish whose filters' time ran out: %v; want unavailable, naming sub_cheap, saying to retry", err)
	}
	if n := f.msgs(t); n != 0 {
		t.Fatalf("INGEST holds %d events, want none", n)
	}
	routing.EventFilterBudget = saved
	if _, err := publish(f, fanOut("order.created", `{"amount":150}`)); err != nil {
		t.Fatalf("the retry: %v", err)
	}
}
