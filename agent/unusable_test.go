package agent_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent/retry"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/poll"
)

// A destination whose config this agent cannot build (a secret it does
// not parse, through the test seam: the control plane of the agent's own
// version refuses one) holds only its own events: the config messages
// that carry it and every later one still apply (a destination made
// after it, another's pause and resume), its events are accepted and
// kept, neither sent nor dead-lettered, and once a config of it builds
// they are delivered. Before, such a destination failed every config
// message: the agent reconnected for ever and applied nothing newer.
func TestUnusableDestinationHoldsOnlyItsOwnEvents(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	broken.Store(true)
	dir := t.TempDir()
	ag := startWithUnusableDestination(t, dir, 8, "a", &broken)
	p := newPartner(t, nil)
	ag.create(destination("a", p.DestURL("a"), 8), destination("b", p.DestURL("b"), 8))
	var held []string
	for i := range 3 {
		held = append(held, ag.publish("a", "acme", "a-u"+string(rune('0'+i%2))))
	}
	ag.waitHeldUnusable(held[0], "destination", `destination "a"`)
	ag.checkLanesHeldUnusable(&rivorav1.ListLanesRequest{DestinationId: "a"}, "destination")
	// A later config still applies: a destination made after a broke,
	// and b's pause and resume.
	ag.create(destination("c", p.DestURL("c"), 8))
	pause, err := ag.Admin.PauseDestination(context.Background(), connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: "b", Reason: "partner maintenance"}))
	if err != nil {
		t.Fatal(err)
	}
	ag.WaitApplied(pause.Msg.GetVersion())
	paused := ag.publish("b", "acme", "b-u0")
	ag.waitEvent(paused, "held by b's pause", func(e *rivorav1.GetEventResponse) bool {
		return strings.HasPrefix(e.GetWaiting(), "held: destination paused")
	})
	resume, err := ag.Admin.ResumeDestination(context.Background(), connect.NewRequest(&rivorav1.ResumeDestinationRequest{DestinationId: "b"}))
	if err != nil {
		t.Fatal(err)
	}
	ag.WaitApplied(resume.Msg.GetVersion())
	others := []string{paused, ag.publish("b", "acme", "b-u1"), ag.publish("c", "acme", "c-u0")}
	p.WaitDelivered(t, others, 15*time.Second)

	// a's events were kept all along: pending, never sent, not dead.
	ag.checkKeptAllAlong(dir, "a", "destination", p, held)

	// A config of a that builds sends them.
	broken.Store(false)
	update, err := ag.Admin.UpdateDestination(context.Background(), connect.NewRequest(&rivorav1.UpdateDestinationRequest{Id: "a", MaxAttempts: proto.Int32(9)}))
	if err != nil {
		t.Fatal(err)
	}
	ag.WaitApplied(update.Msg.GetVersion())
	ag.waitDeliveredNonePending(p, "a", held)
}

// The time an agent held an unusable destination outlives its restart:
// the stretch that began before it is recalled, closed where the agent
// was last seen running (at the latest at the restart), and a new one
// opens at the first config (the destination still unusable), so the
// events held all along keep their window. Before, the restarted agent
// knew only the new stretch, and an event held most of its window
// before the restart died (reason window) soon after it.
func TestAnUnusableDestinationsHeldTimeOutlivesARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := func() *running { return startWithUnusableDestination(t, dir, 8, "a", nil) }
	ag := start()
	p := newPartner(t, nil)
	ag.create(destination("a", p.DestURL("a"), 8))
	held := ag.publish("a", "acme", "u0")
	ag.waitHeldUnusable(held, "destination", "")
	before := ag.Agent.UnusableStretches("a")
	if len(before) != 1 || !before[0].End.IsZero() {
		t.Fatalf("stretches before the restart %v, want one going on", before)
	}
	ag.stop()

	ag = start()
	restarted := time.Now()
	var after retry.Pauses
	poll.True(t, "the restarted agent holds a as unusable", 10*time.Second, func() bool {
		after = ag.Agent.UnusableStretches("a")
		return len(after) > 0
	})
	if len(after) != 2 || !after[0].Start.Equal(before[0].Start) || after[0].End.IsZero() || after[0].End.After(restarted) ||
		after[1].Start.Before(after[0].End) || !after[1].End.IsZero() {
		t.Fatalf("stretches after the restart %v; want the one from before it (%v) ended by the restart (%v), and one open since", after, before, restarted)
	}
	if e := ag.waitEvent(held, "pending", func(*rivorav1.GetEventResponse) bool { return true }); e.GetState() != rivorav1.EventState_EVENT_STATE_PENDING {
		t.Fatalf("the held event after the restart: %v, want pending", e.GetState())
	}
}

// The operator's health view says a destination is unusable on its
// owner: the agent's health carries why beside its budget's state, the
// control plane's state says unusable (a pause outranks it, and it stays
// said beside the pause), no drain time is promised, nor by a limits dry
// run; a config that builds clears it. Before, health read "healthy"
// while its pending events grew and nothing was sent.
func TestUnusableDestinationShowsInHealth(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	broken.Store(true)
	ag := startWithUnusableDestination(t, t.TempDir(), 0, "a", &broken)
	p := newPartner(t, nil)
	ag.create(destination("a", p.DestURL("a"), 8))
	held := ag.publish("a", "acme", "a-u0")
	ag.waitHeldUnusable(held, "destination", "")

	own := ag.health("a")
	if !strings.Contains(own.GetUnusable(), `destination "a"`) || own.GetState() != "healthy" {
		t.Fatalf("agent's health of the unusable destination: state %q, unusable %q; want its budget's state (healthy) and why it cannot build it", own.GetState(), own.GetUnusable())
	}
	health := func() *rivorav1.DestinationHealth {
		t.Helper()
		resp, err := ag.Admin.GetDestinationHealth(context.Background(), connect.NewRequest(&rivorav1.GetDestinationHealthRequest{DestinationId: "a"}))
		if err != nil || len(resp.Msg.GetDestinations()) != 1 {
			t.Fatalf("GetDestinationHealth(a): %v, %v", resp, err)
		}
		return resp.Msg.GetDestinations()[0]
	}
	if h := health(); h.GetState() != "unusable" || h.GetBudgetState() != "healthy" || h.GetUnusable() != own.GetUnusable() || h.GetDrainTime() != nil {
		t.Fatalf("control plane's health: state %q, budget %q, unusable %q, drain %v; want unusable, healthy, %q, no drain time", h.GetState(), h.GetBudgetState(), h.GetUnusable(), h.GetDrainTime(), own.GetUnusable())
	}
	dry, err := ag.Admin.SetLimitsOverride(context.Background(), connect.NewRequest(&rivorav1.SetLimitsOverrideRequest{DestinationId: "a", RatePerSecond: proto.Float64(50), DryRun: true}))
	if err != nil {
		t.Fatal(err)
	}
	if dry.Msg.GetProjectedDrainTime() != nil || !strings.Contains(dry.Msg.GetNoDrainReason(), "unusable") {
		t.Fatalf("limits dry run: drain %v, no-drain reason %q; want none, as the config is unusable", dry.Msg.GetProjectedDrainTime(), dry.Msg.GetNoDrainReason())
	}
	// A subscription's answer says its destination's state the same way.
	sub, err := rivorav1connect.NewSubscriptionServiceClient(ag.HTTPClient(), ag.URL, ag.As(ag.AdminToken)).CreateSubscription(context.Background(),
		connect.NewRequest(&rivorav1.CreateSubscriptionRequest{CustomerId: "acme", DestinationId: "a", Types: []string{"*"}}))
	if err != nil {
		t.Fatal(err)
	}
	if got := sub.Msg.GetSubscription().GetDestinationState(); got != "unusable" {
		t.Fatalf("a subscription to the unusable destination says its state is %q, want unusable", got)
	}

	pause, err := ag.Admin.PauseDestination(context.Background(), connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: "a", Reason: "key rollout"}))
	if err != nil {
		t.Fatal(err)
	}
	ag.WaitApplied(pause.Msg.GetVersion())
	if h := health(); h.GetState() != "paused" || h.GetUnusable() == "" {
		t.Fatalf("paused and unusable: state %q, unusable %q; want paused, the reason kept", h.GetState(), h.GetUnusable())
	}

	// A config of a that builds (the resume is one) clears it.
	broken.Store(false)
	resume, err := ag.Admin.ResumeDestination(context.Background(), connect.NewRequest(&rivorav1.ResumeDestinationRequest{DestinationId: "a"}))
	if err != nil {
		t.Fatal(err)
	}
	ag.WaitApplied(resume.Msg.GetVersion())
	if h := health(); h.GetState() == "unusable" || h.GetState() == "paused" || h.GetUnusable() != "" {
		t.Fatalf("once its config builds: state %q, unusable %q; want the budget's state, no reason", h.GetState(), h.GetUnusable())
	}
	p.WaitDelivered(t, []string{held}, 15*time.Second)
}
