package agent_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// A subscription whose secret this agent cannot load (through the test
// seam: the control plane of the agent's own version refuses one) holds
// only its own events: the config messages that carry it and every
// later one still apply (a destination made after it, another
// subscription's pause and resume), its events are accepted and kept,
// neither sent (unsigned, or signed with the destination's secret) nor
// dead-lettered, and once a config of it loads they are delivered.
// Before, such a subscription failed every config message: the agent
// reconnected for ever and applied nothing newer.
func TestUnusableSubscriptionHoldsOnlyItsOwnEvents(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	broken.Store(true)
	dir := t.TempDir()
	ag := startWithUnusableSubscriptions(t, dir, 8, "acme", &broken)
	p := newPartner(t, nil)
	ag.create(destination("d", p.DestURL("d"), 8))
	ctx := context.Background()
	subsAPI := rivorav1connect.NewSubscriptionServiceClient(ag.HTTPClient(), ag.URL, ag.As(ag.AdminToken))
	subscribe := func(customer string) string {
		created, err := subsAPI.CreateSubscription(ctx, connect.NewRequest(&rivorav1.CreateSubscriptionRequest{CustomerId: customer, DestinationId: "d", Types: []string{"*"}}))
		if err != nil {
			t.Fatal(err)
		}
		ag.WaitApplied(created.Msg.GetVersion())
		return created.Msg.GetSubscription().GetId()
	}
	broke, other := subscribe("acme"), subscribe("beta")
	routed := func(customer, lane string) string {
		resp, err := ag.Ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{CustomerId: customer, LaneKey: lane, Type: "order.created", Payload: []byte(`{}`)}))
		if err != nil || len(resp.Msg.GetRoutes()) != 1 {
			t.Fatalf("publish for %s: %v, %v; want one route", customer, resp, err)
		}
		return resp.Msg.GetRoutes()[0].GetEventId()
	}
	held := []string{routed("acme", "a-u0"), routed("acme", "a-u1"), routed("acme", "a-u0")}
	ag.waitHeldUnusable(held[0], "subscription", `subscription "`+broke+`"`)
	ag.checkLanesHeldUnusable(&rivorav1.ListLanesRequest{DestinationId: "d", SubscriptionId: broke}, "subscription")
	// A later config still applies: a destination made after it broke,
	// and the other subscription's pause and resume.
	ag.create(destination("e", p.DestURL("e"), 8))
	pause, err := subsAPI.PauseSubscription(ctx, connect.NewRequest(&rivorav1.PauseSubscriptionRequest{Id: other, Reason: "partner maintenance"}))
	if err != nil {
		t.Fatal(err)
	}
	ag.WaitApplied(pause.Msg.GetVersion())
	paused := routed("beta", "b-u0")
	ag.waitEvent(paused, "held by the other subscription's pause", func(e *rivorav1.GetEventResponse) bool {
		return strings.HasPrefix(e.GetWaiting(), "held: subscription "+other+" paused")
	})
	resume, err := subsAPI.ResumeSubscription(ctx, connect.NewRequest(&rivorav1.ResumeSubscriptionRequest{Id: other}))
	if err != nil {
		t.Fatal(err)
	}
	ag.WaitApplied(resume.Msg.GetVersion())
	others := []string{paused, routed("beta", "b-u1"), ag.publish("e", "acme", "e-u0")}
	p.WaitDelivered(t, others, 15*time.Second)

	// The broken subscription's events were kept all along: pending,
	// never sent, not dead.
	ag.checkKeptAllAlong(dir, "d", "subscription", p, held)

	// A config of it that loads sends them.
	broken.Store(false)
	update, err := subsAPI.UpdateSubscription(ctx, connect.NewRequest(&rivorav1.UpdateSubscriptionRequest{Id: broke, Description: proto.String("mended")}))
	if err != nil {
		t.Fatal(err)
	}
	ag.WaitApplied(update.Msg.GetVersion())
	ag.waitDeliveredNonePending(p, "d", held)
}
