package owner

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/subscriptions"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// An event's window does not run while its destination or its
// subscription is paused; a time both were paused counts once; an event
// published to the destination directly is moved on by the destination's
// pauses alone.
func TestWindowExcludesSubscriptionPauses(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(m int) *timestamppb.Timestamp { return timestamppb.New(t0.Add(time.Duration(m) * time.Minute)) }
	dest, err := destinations.FromProto(&rivorav1.Destination{Id: "orders", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", Pauses: []*rivorav1.PauseInterval{
		{Start: at(10), End: at(20)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	table := subscriptions.NewTable()
	table.Replace(time.Now(), []*rivorav1.Subscription{{Id: "sub_1", CustomerId: "acme", DestinationId: "orders", Paused: true, Pauses: []*rivorav1.PauseInterval{
		{Start: at(15), End: at(30)}, {Start: at(50)},
	}}})
	o := &Partition{deps: Deps{Subscriptions: table}}
	now := t0.Add(time.Hour)
	routed := &rivorav1.Event{SubscriptionId: "sub_1", AcceptedAt: at(0)}
	// Paused 10..30 (either) and 50..60 (the subscription, still paused).
	if got, want := windowStart(routed, o.pausedBetween(dest, routed), now), t0.Add(30*time.Minute); !got.Equal(want) {
		t.Errorf("routed event's window starts at +%v, want +%v", got.Sub(t0), want.Sub(t0))
	}
	direct := &rivorav1.Event{AcceptedAt: at(0)}
	if got, want := windowStart(direct, o.pausedBetween(dest, direct), now), t0.Add(10*time.Minute); !got.Equal(want) {
		t.Errorf("direct event's window starts at +%v, want +%v", got.Sub(t0), want.Sub(t0))
	}
	deleted := &rivorav1.Event{SubscriptionId: "sub_gone", AcceptedAt: at(0)}
	if got, want := windowStart(deleted, o.pausedBetween(dest, deleted), now), t0.Add(10*time.Minute); !got.Equal(want) {
		t.Errorf("a deleted subscription's event's window starts at +%v, want +%v", got.Sub(t0), want.Sub(t0))
	}
}
