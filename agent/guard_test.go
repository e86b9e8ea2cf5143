package agent_test

import (
	"fmt"
	"testing"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/internal/ssrf"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/rig"
)

// TestGuardRefusalIsTheEventsFault: a destination the control plane let
// through (it allows loopback here) but whose address the agent's guard
// denies gets no request: each attempt is recorded with the guard's
// reason, charged to the event, which dies after its attempts, and the
// destination stays healthy: a refusal says nothing of its health, and
// must not hold the other customers' events.
func TestGuardRefusalIsTheEventsFault(t *testing.T) {
	t.Parallel()
	p := newPartner(t, nil)
	ag := &running{t: t, Dev: rig.StartDev(t, t.TempDir(), rig.Options{Name: agentName, Workers: 8, Agent: func(c *agent.Config) {
		c.Guard = ssrf.New(nil) // default denials: loopback refused
	}})}
	ag.create(destination("internal", p.URL(), 2))
	var ids []string
	for i := range 4 {
		ids = append(ids, ag.publish("internal", fmt.Sprintf("c%d", i), "l"))
	}
	want := "refused by SSRF guard: 127.0.0.1 is in 127.0.0.0/8 (loopback); an operator may allow it with --allow-destination-cidr"
	for _, id := range ids {
		dead := ag.waitEvent(id, "dead", func(r *rivorav1.GetEventResponse) bool {
			return r.GetState() == rivorav1.EventState_EVENT_STATE_DEAD
		})
		if dead.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS || len(dead.GetAttempts()) != 2 {
			t.Fatalf("event %s: %v, want dead after its 2 attempts (max_attempts), charged to it", id, dead)
		}
		for _, a := range dead.GetAttempts() {
			if a.GetError() != want || a.GetStatusCode() != 0 {
				t.Fatalf("attempt %v: want status 0 and error %q", a, want)
			}
		}
	}
	if n := len(p.Requests()); n != 0 {
		t.Fatalf("the partner got %d requests through the guard", n)
	}
	h := ag.health("internal")
	if h.GetState() != "healthy" || h.GetLastTransition().GetTo() != "" && h.GetLastTransition().GetTo() != "healthy" {
		t.Fatalf("health after 8 refused attempts = %v, want healthy (a refusal is not the destination's fault)", h)
	}
}
