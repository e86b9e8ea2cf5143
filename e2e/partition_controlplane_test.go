package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rivora/rivora/testkit/poll"
)

// appliedVersions maps each agent to the config version it reports
// applied, as the control plane at cp lists it (nil: cp did not answer).
func appliedVersions(cp string) map[string]uint64 {
	out, _, err := runCtl(cp, "agents", "list", "-o", "json")
	if err != nil {
		return nil
	}
	var agents []struct {
		Name           string `json:"name"`
		AppliedVersion uint64 `json:"appliedVersion"`
	}
	if json.Unmarshal([]byte(out), &agents) != nil {
		return nil
	}
	m := map[string]uint64{}
	for _, a := range agents {
		m[a.Name] = a.AppliedVersion
	}
	return m
}

// TestPartitionLeadingControlPlaneCut (scenario 3): of two control planes,
// the leader is cut from Consul, and then from the agents as well. The
// agents keep delivering on the config they have; the other control plane
// takes the lead and steering goes on through it; after the heal the old
// leader follows, and a change made through the leader reaches every
// agent. Every change is recorded once in the audit log, under its own
// config version, versions only growing: nothing applied twice. The
// checker's verdict under traffic, with the recovery time, as in every
// scenario.
func TestPartitionLeadingControlPlaneCut(t *testing.T) {
	r := startFaultRun(t, faultRunOptions{ControlPlanes: 2})
	old := r.c.leader(t, nil)
	r.c.cp = old // the harness's calls (agents list, dlq, health) go to the leader
	oldNode, otherCP := "", ""
	for i, cp := range r.c.cps {
		if cp == old {
			oldNode = cpNode(i)
		} else {
			otherCP = cp.URL()
		}
	}
	r.c.waitOwned(t, 30*time.Second, nil)
	r.waitFlowing(t, 500)
	steer := func(cp string, weight int) error {
		_, errOut, err := runCtl(cp, "priority", "set", "fast0", "--customer", "c0", "--weight", fmt.Sprint(weight), "--wait")
		if err != nil {
			return fmt.Errorf("%v: %s", err, errOut)
		}
		return nil
	}
	if err := steer(old.URL(), 2); err != nil {
		t.Fatalf("steer through the leader: %v", err)
	}

	cutAt := time.Now()
	r.net.Cut(oldNode, "consul")
	t.Logf("cut the leading control plane %s (%s) from Consul", oldNode, old.URL())
	// The other control plane takes the lead once the old one's session
	// lapses; steering goes on through it.
	var ledAt time.Time
	if err := poll.Check(90*time.Second, 500*time.Millisecond, func() error {
		if err := steer(otherCP, 3); err != nil {
			return err
		}
		ledAt = time.Now()
		return nil
	}); err != nil {
		t.Fatalf("steering through the other control plane after the leader lost Consul: %v", err)
	}
	t.Logf("steering through the other control plane %s after the cut; every agent applied it", ledAt.Sub(cutAt).Round(100*time.Millisecond))
	if _, _, err := runCtl(old.URL(), "priority", "set", "fast0", "--customer", "c0", "--weight", "9"); err == nil {
		t.Errorf("the deposed control plane, cut from Consul, accepted a change")
	}

	// Then cut the old leader from the agents too.
	for _, a := range r.c.names {
		r.net.Cut(a, oldNode)
	}
	delivered := r.delivered()
	r.waitFlowing(t, delivered+500)
	if err := steer(otherCP, 4); err != nil {
		t.Fatalf("steer while the old leader is cut from everything: %v", err)
	}

	healAt := time.Now()
	r.net.Heal()
	t.Logf("healed %s after the first cut", healAt.Sub(cutAt).Round(100*time.Millisecond))
	leader := r.c.leader(t, nil)
	r.c.cp = leader
	if err := steer(leader.URL(), 5); err != nil {
		t.Fatalf("steer after the heal: %v", err)
	}
	steeredAt := time.Now()
	t.Logf("steering after the heal through %s: applied by every agent %s after the heal", leader.URL(), steeredAt.Sub(healAt).Round(100*time.Millisecond))
	r.c.waitOwned(t, 60*time.Second, nil)
	r.waitFlowing(t, r.delivered()+500)
	r.finish(t, "leading control plane cut from Consul, then from the agents", cutAt, healAt)

	// Nothing applied twice: each change once in the audit log, each under
	// a version of its own, versions growing; every agent applied the last.
	audit := r.c.rig(r.c.names[0])
	audit.adminURL = leader.URL()
	var weights []string
	var versions []uint64
	for _, e := range audit.auditJSON(t) {
		if e.GetAction() != "priority.set" || e.GetDestinationId() != "fast0" {
			continue
		}
		weights = append(weights, e.GetDetail())
		versions = append(versions, e.GetVersion())
	}
	t.Logf("audit of the steering: %v at versions %v", weights, versions)
	if len(versions) != 4 {
		t.Errorf("the audit log has %d priority changes of fast0, want the 4 made: %v", len(versions), weights)
	}
	for i := 1; i < len(versions); i++ {
		if versions[i] <= versions[i-1] {
			t.Errorf("audit versions %v do not grow: a change recorded twice or out of order", versions)
		}
	}
	if len(versions) > 0 {
		last := slices.Max(versions)
		poll.True(t, fmt.Sprintf("every agent applied version %d", last), 30*time.Second, func() bool {
			got := appliedVersions(leader.URL())
			for _, a := range r.c.names {
				if got[a] < last {
					return false
				}
			}
			return true
		})
	}
}
