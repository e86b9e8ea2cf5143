package agent_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
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
	ag := &running{t: t, Dev: rig.StartDev(t, dir, rig.Options{Name: agentName, Workers: 8, Agent: func(c *agent.Config) {
		agent.SetMangleSubscription(c, func(s *rivorav1.Subscription) {
			if s.GetCustomerId() == "acme" && broken.Load() {
				s.Secret = "not-a-secret-this-agent-parses"
			}
		})
	}})}
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
	ag.waitEvent(held[0], "held as its subscription's config is unusable", func(e *rivorav1.GetEventResponse) bool {
		return strings.HasPrefix(e.GetWaiting(), "held: subscription config unusable on this agent: ") && strings.Contains(e.GetWaiting(), `subscription "`+broke+`"`)
	})
	lanesAPI := rivorav1connect.NewLaneServiceClient(ag.HTTPClient(), ag.URL, ag.As(ag.AdminToken))
	lanes, err := lanesAPI.ListLanes(ctx, connect.NewRequest(&rivorav1.ListLanesRequest{DestinationId: "d", SubscriptionId: broke}))
	if err != nil {
		t.Fatal(err)
	}
	if len(lanes.Msg.GetLanes()) == 0 {
		t.Fatal("no lane listed for the unusable subscription, whose held event has one")
	}
	for _, l := range lanes.Msg.GetLanes() {
		if !strings.HasPrefix(l.GetPaused(), "subscription config unusable on this agent: ") {
			t.Fatalf("lane %s of the unusable subscription says it is held for %q", l.GetLaneKey(), l.GetPaused())
		}
	}
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
	poll.True(t, "its 3 events pending", 10*time.Second, func() bool {
		n, err := ag.Agent.Pending(ctx, "d")
		return err == nil && n == 3
	})
	for _, r := range p.Requests() {
		if slices.Contains(held, r.ID) {
			t.Fatalf("an event of the unusable subscription was sent: %+v", r)
		}
	}
	if paths, _ := deadLetters(t, dir, "d"); len(paths) != 0 {
		t.Fatalf("the unusable subscription's events were dead-lettered: %v", paths)
	}
	for _, id := range held {
		if e := ag.waitEvent(id, "pending", func(*rivorav1.GetEventResponse) bool { return true }); e.GetState() != rivorav1.EventState_EVENT_STATE_PENDING || len(e.GetAttempts()) != 0 {
			t.Fatalf("held event %s: state %v, %d attempts; want pending, none", id, e.GetState(), len(e.GetAttempts()))
		}
	}

	// A config of it that loads sends them.
	broken.Store(false)
	update, err := subsAPI.UpdateSubscription(ctx, connect.NewRequest(&rivorav1.UpdateSubscriptionRequest{Id: broke, Description: proto.String("mended")}))
	if err != nil {
		t.Fatal(err)
	}
	ag.WaitApplied(update.Msg.GetVersion())
	p.WaitDelivered(t, held, 15*time.Second)
	poll.True(t, "nothing pending once delivered", 10*time.Second, func() bool {
		n, err := ag.Agent.Pending(ctx, "d")
		return err == nil && n == 0
	})
}
