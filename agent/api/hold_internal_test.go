package api

import (
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/subscriptions"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

const holdTestSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// A destination an operator paused whose config this agent cannot build
// says both why it is held (events get and lanes list), not only the
// agent's reason, which would hide the pause; once its config builds,
// the operator's pause alone is left.
func TestHoldShowsThePauseAndUnusable(t *testing.T) {
	s := &server{registry: destinations.NewRegistry(), subs: subscriptions.NewTable()}
	lanes := &laneService{server: s}
	s.registry.Replace(time.Now(), []*rivorav1.Destination{{Id: "orders", Url: "http://x", Secret: "nope", Paused: true}})

	hold, unusable := s.destinationHold("orders")
	text := holdText("orders", hold, unusable)
	if !strings.HasPrefix(text, "destination paused; destination config unusable on this agent: ") || !strings.Contains(text, `destination "orders"`) {
		t.Fatalf("paused and unusable: events get says %q; want the pause, then why it is unusable", text)
	}
	if got := lanes.lanePause("orders", ""); !strings.HasPrefix(got, "destination paused; destination config unusable on this agent: ") {
		t.Fatalf("paused and unusable: lanes list says %q; want the pause, then why it is unusable", got)
	}

	s.registry.Update(time.Now(), []*rivorav1.Destination{{Id: "orders", Url: "http://x", Secret: holdTestSecret, Paused: true}}, nil)
	hold, unusable = s.destinationHold("orders")
	if got := holdText("orders", hold, unusable); got != "destination paused" {
		t.Fatalf("paused, config mended: events get says %q; want destination paused", got)
	}
	if got := lanes.lanePause("orders", ""); got != "destination paused" {
		t.Fatalf("paused, config mended: lanes list says %q; want destination paused", got)
	}

	// Unusable only: the agent's reason alone.
	s.registry.Update(time.Now(), []*rivorav1.Destination{{Id: "orders", Url: "http://x", Secret: "nope"}}, nil)
	if got := lanes.lanePause("orders", ""); !strings.HasPrefix(got, "destination config unusable on this agent: ") {
		t.Fatalf("unusable, not paused: lanes list says %q", got)
	}

	// A subscription its customer paused whose secret did not load.
	s.subs.Replace(time.Now(), []*rivorav1.Subscription{{Id: "sub_1", CustomerId: "acme", DestinationId: "orders", Types: []string{"*"}, Secret: "nope", Paused: true}})
	sub, _ := s.subs.Get("sub_1")
	want := "subscription sub_1 paused; subscription config unusable on this agent: "
	if got := subscriptionHoldText(sub); !strings.HasPrefix(got, want) {
		t.Fatalf("subscription paused and unusable: events get says %q; want prefix %q", got, want)
	}
	if got := lanes.lanePause("", "sub_1"); !strings.HasPrefix(got, want) {
		t.Fatalf("subscription paused and unusable: lanes list says %q; want prefix %q", got, want)
	}
	s.subs.Update(time.Now(), []*rivorav1.Subscription{{Id: "sub_1", CustomerId: "acme", DestinationId: "orders", Types: []string{"*"}, Secret: holdTestSecret, Paused: true}}, nil)
	if sub, _ := s.subs.Get("sub_1"); !sub.Held() || subscriptionHoldText(sub) != "" {
		t.Fatalf("subscription paused, mended = %+v; want held by its customer's pause only", sub)
	}
	if got := lanes.lanePause("", "sub_1"); got != "subscription paused" {
		t.Fatalf("subscription paused, mended: lanes list says %q; want subscription paused", got)
	}
}
