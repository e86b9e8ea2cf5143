package agent_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
)

// unparsableSecret is a secret this agent does not parse: put on a
// config through the test seam (agent.SetMangleDestination,
// SetMangleSubscription), it makes one the agent cannot build. The
// control plane of the agent's own version refuses one, so only the
// seam makes it.
const unparsableSecret = "not-a-secret-this-agent-parses"

// startWithUnusableDestination starts a dev in dir whose agent (with
// workers) cannot build destination dest's config while broken is set,
// or ever if broken is nil.
func startWithUnusableDestination(t *testing.T, dir string, workers int, dest string, broken *atomic.Bool) *running {
	t.Helper()
	return &running{t: t, Dev: rig.StartDev(t, dir, rig.Options{Name: agentName, Workers: workers, Agent: func(c *agent.Config) {
		agent.SetMangleDestination(c, func(d *rivorav1.Destination) {
			if d.GetId() == dest && (broken == nil || broken.Load()) {
				d.Secret = unparsableSecret
			}
		})
	}})}
}

// startWithUnusableSubscriptions starts a dev in dir whose agent (with
// workers) cannot load the secret of customer's subscriptions while
// broken is set.
func startWithUnusableSubscriptions(t *testing.T, dir string, workers int, customer string, broken *atomic.Bool) *running {
	t.Helper()
	return &running{t: t, Dev: rig.StartDev(t, dir, rig.Options{Name: agentName, Workers: workers, Agent: func(c *agent.Config) {
		agent.SetMangleSubscription(c, func(s *rivorav1.Subscription) {
			if s.GetCustomerId() == customer && broken.Load() {
				s.Secret = unparsableSecret
			}
		})
	}})}
}

// waitHeldUnusable waits until event id is held as the config of its
// kind ("destination", "subscription") is unusable on this agent, the
// reason naming names (such as `destination "a"`; "": anything).
func (r *running) waitHeldUnusable(id, kind, names string) {
	r.t.Helper()
	r.waitEvent(id, "held as its "+kind+"'s config is unusable", func(e *rivorav1.GetEventResponse) bool {
		return strings.HasPrefix(e.GetWaiting(), "held: "+kind+" config unusable on this agent: ") && strings.Contains(e.GetWaiting(), names)
	})
}

// checkLanesHeldUnusable checks that the lanes req lists, at least one,
// all say they are held as a kind's config is unusable on this agent.
func (r *running) checkLanesHeldUnusable(req *rivorav1.ListLanesRequest, kind string) {
	r.t.Helper()
	lanesAPI := rivorav1connect.NewLaneServiceClient(r.HTTPClient(), r.URL, r.As(r.AdminToken))
	lanes, err := lanesAPI.ListLanes(context.Background(), connect.NewRequest(req))
	if err != nil {
		r.t.Fatal(err)
	}
	if len(lanes.Msg.GetLanes()) == 0 {
		r.t.Fatalf("no lane listed for the unusable %s, whose held event has one", kind)
	}
	for _, l := range lanes.Msg.GetLanes() {
		if !strings.HasPrefix(l.GetPaused(), kind+" config unusable on this agent: ") {
			r.t.Fatalf("lane %s of the unusable %s says it is held for %q", l.GetLaneKey(), kind, l.GetPaused())
		}
	}
}

// checkKeptAllAlong checks that held, the events of an unusable kind
// for destination dest (whose data is in dir), were kept all along:
// they are all dest has pending, none was sent to p nor dead-lettered,
// and each is pending with no attempt.
func (r *running) checkKeptAllAlong(dir, dest, kind string, p *partner.Partner, held []string) {
	r.t.Helper()
	poll.True(r.t, fmt.Sprintf("the unusable %s's %d events pending", kind, len(held)), 10*time.Second, func() bool {
		n, err := r.Agent.Pending(context.Background(), dest)
		return err == nil && n == int64(len(held))
	})
	for _, req := range p.Requests() {
		if slices.Contains(held, req.ID) {
			r.t.Fatalf("an event of the unusable %s was sent: %+v", kind, req)
		}
	}
	if paths, _ := deadLetters(r.t, dir, dest); len(paths) != 0 {
		r.t.Fatalf("the unusable %s's events were dead-lettered: %v", kind, paths)
	}
	for _, id := range held {
		if e := r.waitEvent(id, "pending", func(*rivorav1.GetEventResponse) bool { return true }); e.GetState() != rivorav1.EventState_EVENT_STATE_PENDING || len(e.GetAttempts()) != 0 {
			r.t.Fatalf("held event %s: state %v, %d attempts; want pending, none", id, e.GetState(), len(e.GetAttempts()))
		}
	}
}

// waitDeliveredNonePending waits until p has answered every event of
// held, and dest has nothing pending.
func (r *running) waitDeliveredNonePending(p *partner.Partner, dest string, held []string) {
	r.t.Helper()
	p.WaitDelivered(r.t, held, 15*time.Second)
	poll.True(r.t, "nothing pending for "+dest+" once delivered", 10*time.Second, func() bool {
		n, err := r.Agent.Pending(context.Background(), dest)
		return err == nil && n == 0
	})
}
