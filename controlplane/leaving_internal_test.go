package controlplane

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/rivora/rivora/e2e/consultest"
	"github.com/rivora/rivora/internal/auth"
)

// An agent that reported leaving (its SIGTERM) is at once unhealthy: it is
// assigned nothing, asked nothing and owns nothing for ownerOf; the end
// of its Watch does not destroy its Consul session (it ends it itself
// after its drain), while a gone agent's is destroyed; and a restart, with
// a new session, clears the mark.
func TestLeavingAgentIsNotHealthyAndKeepsItsSession(t *testing.T) {
	const count = 32
	srv := consultest.Start(t)
	client, err := newConsulClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	newSession := func() string {
		t.Helper()
		id, _, err := client.Session().CreateNoChecks(&api.SessionEntry{TTL: "30s", Behavior: api.SessionBehaviorRelease}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	alive := func(session string) bool {
		t.Helper()
		e, _, err := client.Session().Info(session, nil)
		if err != nil {
			t.Fatal(err)
		}
		return e != nil
	}
	r := newAgentRegistry(client, nil, auth.CellToken{}, slog.New(slog.DiscardHandler))
	r.deadAfter = 10 * time.Millisecond
	names := []string{"agent-1", "agent-2", "agent-3"}
	sessions := make(map[string]string)
	for _, name := range names {
		sessions[name] = newSession()
		r.connect(name, "http://"+name+".invalid:7070", sessions[name], time.Time{}, time.Now())
	}
	before := assignment(t, r, names, count)
	if n := shares(before)["agent-2"]; n == 0 {
		t.Fatalf("agent-2 assigned nothing before leaving: %v", shares(before))
	}
	var held uint32
	for p, owner := range before {
		if owner == "agent-2" {
			held = uint32(p)
		}
	}
	if _, err := r.owned("agent-2", sessions["agent-2"], []uint32{held}, nil, time.Now()); err != nil {
		t.Fatal(err)
	}

	if err := r.leave("agent-2", "another-session", false, time.Now()); err == nil {
		t.Fatal("leaving with a session the agent does not have was accepted")
	}
	if err := r.leave("agent-9", "", false, time.Now()); err == nil {
		t.Fatal("an unknown agent's leaving was accepted")
	}
	if err := r.leave("agent-2", "", false, time.Now()); err == nil {
		t.Fatal("leaving without a session was accepted")
	}
	if err := r.leave("agent-2", sessions["agent-2"], false, time.Now()); err != nil {
		t.Fatal(err)
	}
	// Still watching, but unhealthy: assigned, asked and found nothing.
	after := assignment(t, r, names, count)
	if len(after) != count || shares(after)["agent-2"] != 0 {
		t.Fatalf("after agent-2 left: shares %v of %d partitions; want all to the others", shares(after), count)
	}
	for p := range count {
		if before[p] != "agent-2" && after[p] != before[p] {
			t.Fatalf("partition %d moved from %s to %s", p, before[p], after[p])
		}
	}
	var asked []string
	for _, a := range r.connected() {
		asked = append(asked, a.name)
	}
	if slices.Contains(asked, "agent-2") {
		t.Fatalf("connected() %v includes the leaving agent-2", asked)
	}
	if owner, ok := r.ownerOf(held); ok && owner.name == "agent-2" {
		t.Fatalf("ownerOf(%d) names the leaving agent-2", held)
	}
	for _, a := range r.status() {
		if a.GetName() == "agent-2" && a.GetHealthy() {
			t.Fatal("agent-2 listed healthy while leaving")
		}
	}
	// Its partition's events are in its drain until another agent holds
	// it: a fan-out (a count of pending events) is incomplete meanwhile.
	if got := r.leavingHeld(); !slices.Equal(got, []uint32{held}) {
		t.Fatalf("leavingHeld %v, want [%d]: the leaving agent-2 still holds it", got, held)
	}
	count1 := func(*agentState) (int64, error) { return 1, nil }
	if _, err := r.sum(count1); err == nil || !strings.Contains(err.Error(), "between owners") {
		t.Fatalf("a count while agent-2's partition %d waits for its next owner: %v; want unavailable, between owners", held, err)
	}
	if _, err := r.owned("agent-1", sessions["agent-1"], []uint32{held}, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := r.leavingHeld(); len(got) != 0 {
		t.Fatalf("leavingHeld %v after agent-1 took partition %d, want none", got, held)
	}
	if n, err := r.sum(count1); err != nil || n != 2 {
		t.Fatalf("a count with every partition held by a healthy agent: %d, %v; want 2 (agent-1, agent-3), nil", n, err)
	}

	// Its Watch ends, and so does agent-3's (gone, not leaving): only the
	// gone agent's session is destroyed.
	ctx := context.Background()
	r.disconnect(ctx, "agent-2", time.Now())
	r.disconnect(ctx, "agent-3", time.Now())
	r.delayed.close() // waits for the delayed session ends
	if !alive(sessions["agent-2"]) {
		t.Fatal("the leaving agent-2's session was destroyed when its Watch ended")
	}
	if alive(sessions["agent-3"]) {
		t.Fatal("the gone agent-3's session was not destroyed (the test cannot tell leaving from gone)")
	}

	// Restarted, with a new session: healthy and assigned again.
	r.connect("agent-2", "http://agent-2.invalid:7070", newSession(), time.Time{}, time.Now())
	r.mu.Lock()
	ok, reason := r.healthyLocked(r.agents["agent-2"], time.Now())
	r.mu.Unlock()
	if !ok {
		t.Fatalf("agent-2 restarted with a new session is unhealthy: %s", reason)
	}
	if got := r.partitionsFor("agent-2", count); len(got) == 0 {
		t.Fatal("agent-2 restarted with a new session is assigned nothing")
	}
}
