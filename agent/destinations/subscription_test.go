package destinations_test

import (
	"net/http"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/subscriptions"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// An event a subscription routed goes to the subscription's URL, signed
// with its secret, with the destination's headers overlaid by the
// subscription's; what the subscription leaves unset is the
// destination's.
func TestEndpointOfASubscription(t *testing.T) {
	r := destinations.NewRegistry()
	r.Replace(time.Now(), []*rivorav1.Destination{{Id: "erp", Url: "https://erp.example/in", Secret: secret, Headers: []*rivorav1.Header{
		{Name: "Authorization", Value: "Bearer dest"}, {Name: "X-Source", Value: "rivora"},
	}}})
	own, err := subscriptions.FromProto(&rivorav1.Subscription{
		Id: "sub_1", CustomerId: "c1", DestinationId: "erp", DeliveryUrl: "https://erp.example/in/c1", Secret: newSecret,
		Headers: []*rivorav1.Header{{Name: "authorization", Value: "Bearer c1"}, {Name: "X-Tenant", Value: "c1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := r.Endpoint("erp", own)
	if err != nil {
		t.Fatal(err)
	}
	want := http.Header{"Authorization": {"Bearer c1"}, "X-Source": {"rivora"}, "X-Tenant": {"c1"}}
	if ep.URL != "https://erp.example/in/c1" || ep.Signer != own.Signer || !equalHeaders(ep.Headers, want) {
		t.Fatalf("endpoint = %s %p %v, want the subscription's URL, signer %p and headers %v", ep.URL, ep.Signer, ep.Headers, own.Signer, want)
	}
	dest, _ := r.Get("erp")
	if dest.Headers.Get("Authorization") != "Bearer dest" || dest.Headers.Get("X-Tenant") != "" {
		t.Fatalf("the destination's headers were modified: %v", dest.Headers)
	}

	bare, err := subscriptions.FromProto(&rivorav1.Subscription{Id: "sub_2", CustomerId: "c2", DestinationId: "erp"})
	if err != nil {
		t.Fatal(err)
	}
	ep, err = r.Endpoint("erp", bare)
	if err != nil {
		t.Fatal(err)
	}
	if ep.URL != dest.URL || ep.Signer != dest.Signer || !equalHeaders(ep.Headers, dest.Headers) {
		t.Fatalf("a subscription with no settings of its own: endpoint = %+v, want the destination's", ep)
	}
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for name, values := range b {
		if len(a[name]) != len(values) || a[name][0] != values[0] {
			return false
		}
	}
	return true
}

// The window does not run while the destination or the subscription is
// paused, and a time both were paused counts once.
func TestPausedBetweenWithASubscription(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(m int) *timestamppb.Timestamp { return timestamppb.New(t0.Add(time.Duration(m) * time.Minute)) }
	d, err := destinations.FromProto(&rivorav1.Destination{Id: "a", Secret: secret, Pauses: []*rivorav1.PauseInterval{
		{Start: at(10), End: at(20)},
		{Start: at(50)}, // still paused
	}})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := subscriptions.FromProto(&rivorav1.Subscription{Id: "sub_1", Pauses: []*rivorav1.PauseInterval{
		{Start: at(15), End: at(30)}, // overlaps the first by 5
		{Start: at(40), End: at(55)}, // overlaps the open one by 5
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		from, to int
		want     time.Duration
	}{
		{0, 5, 0},
		{0, 30, 20 * time.Minute},  // 10..30
		{0, 60, 40 * time.Minute},  // 10..30 and 40..60
		{17, 45, 18 * time.Minute}, // 17..30 and 40..45
		{42, 52, 10 * time.Minute}, // both at 50..52
		{30, 40, 0},
	} {
		from, to := t0.Add(time.Duration(tc.from)*time.Minute), t0.Add(time.Duration(tc.to)*time.Minute)
		if got := d.PausedBetweenWith(sub.Pauses, from, to); got != tc.want {
			t.Errorf("PausedBetweenWith(%d, %d) = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
	if got, want := d.PausedBetweenWith(nil, t0, t0.Add(time.Hour)), d.PausedBetween(t0, t0.Add(time.Hour)); got != want {
		t.Errorf("without a subscription: %v, want the destination's %v", got, want)
	}
}
