package controlplane

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/rivora/rivora/e2e/consultest"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/testkit/poll"
)

// assignRegistry is an agent registry "with Consul" whose client must never
// be called: its address is a closed port, so a stray call fails at once
// instead of reaching a Consul that happens to run on this machine. The
// session list is set by hand (liveSessions).
func assignRegistry(t *testing.T) *agentRegistry {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = "127.0.0.1:1"
	client, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := newAgentRegistry(client, nil, auth.CellToken{}, slog.New(slog.DiscardHandler))
	r.liveSessions = make(map[string]bool)
	return r
}

// join connects a healthy agent (one Watch stream, a live session) at now.
func join(r *agentRegistry, name string, now time.Time) {
	session := "session-" + name
	r.mu.Lock()
	if r.liveSessions != nil {
		r.liveSessions[session] = true
	}
	r.mu.Unlock()
	r.connect(name, "http://"+name+".invalid:7070", session, time.Time{}, now)
}

// leave ends an agent's only Watch stream. ctx is already cancelled, so the
// registry does not go on to destroy the agent's session in Consul.
func leave(r *agentRegistry, name string) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.disconnect(ctx, name, time.Now())
}

// assignment asks every named agent for its partitions and returns
// partition → owner. It fails the test if a partition is out of range or
// assigned to two agents.
func assignment(t *testing.T, r *agentRegistry, names []string, count int) map[int]string {
	t.Helper()
	owners := make(map[int]string)
	for _, name := range names {
		for _, p := range r.partitionsFor(name, count) {
			if int(p) >= count {
				t.Fatalf("agent %s assigned partition %d of %d", name, p, count)
			}
			if prev, ok := owners[int(p)]; ok {
				t.Fatalf("partition %d assigned to both %s and %s", p, prev, name)
			}
			owners[int(p)] = name
		}
	}
	return owners
}

// shares counts the partitions each owner has.
func shares(owners map[int]string) map[string]int {
	out := make(map[string]int)
	for _, name := range owners {
		out[name]++
	}
	return out
}

// Every partition goes to exactly one healthy agent, and never to an agent
// that is not watching, has no live session, lost it, or is inside its
// rejoin delay.
func TestAssignOnlyHealthyAgentsEachPartitionOnce(t *testing.T) {
	const count = 64
	r := assignRegistry(t)
	now := time.Now()
	for _, name := range []string{"healthy-1", "healthy-2", "healthy-3", "gone", "dead-session", "lost", "rejoining"} {
		join(r, name, now)
	}
	// gone: its Watch stream ended.
	leave(r, "gone")
	// dead-session: Consul no longer lists its session.
	r.mu.Lock()
	delete(r.liveSessions, "session-dead-session")
	// lost: the session watch saw it go (and has not been told of a new one).
	r.agents["lost"].sessionLost = now
	// rejoining: lost its session, then came back with a new one; it
	// must wait out the rejoin delay.
	r.agents["rejoining"].sessionLost = now.Add(-time.Second)
	r.liveSessions["session-rejoining-2"] = true
	r.mu.Unlock()
	r.connect("rejoining", "http://rejoining.invalid:7070", "session-rejoining-2", time.Time{}, now)
	// no-session: started without --consul.
	r.connect("no-session", "http://no-session.invalid:7070", "", time.Time{}, now)

	all := []string{"healthy-1", "healthy-2", "healthy-3", "gone", "dead-session", "lost", "rejoining", "no-session"}
	owners := assignment(t, r, all, count)
	if len(owners) != count {
		t.Fatalf("%d of %d partitions assigned", len(owners), count)
	}
	got := shares(owners)
	for name, n := range got {
		if !slices.Contains([]string{"healthy-1", "healthy-2", "healthy-3"}, name) {
			t.Errorf("unhealthy agent %s was assigned %d partitions", name, n)
		}
	}
	for _, name := range []string{"healthy-1", "healthy-2", "healthy-3"} {
		if got[name] == 0 {
			t.Errorf("healthy agent %s was assigned nothing (shares %v)", name, got)
		}
	}
	// The registry's own verdicts agree, with a reason for each.
	r.mu.Lock()
	for _, name := range all {
		ok, reason := r.healthyLocked(r.agents[name], time.Now())
		if want := got[name] > 0; ok != want || (!ok && reason == "") {
			t.Errorf("agent %s: healthy %v (%q), want %v", name, ok, reason, want)
		}
	}
	r.mu.Unlock()

	// Once its rejoin delay is over, the rejoined agent takes its share.
	r.mu.Lock()
	r.agents["rejoining"].eligibleAt = time.Now().Add(-time.Millisecond)
	r.mu.Unlock()
	owners = assignment(t, r, all, count)
	if len(owners) != count || shares(owners)["rejoining"] == 0 {
		t.Fatalf("after its rejoin delay: shares %v (%d assigned), want rejoining to own some", shares(owners), len(owners))
	}

	// No healthy agent: nobody owns anything (rather than an unhealthy one).
	// (rejoining watches twice: its reconnect overlapped the old stream.)
	for _, name := range []string{"healthy-1", "healthy-2", "healthy-3", "rejoining", "rejoining"} {
		leave(r, name)
	}
	if owners := assignment(t, r, all, count); len(owners) != 0 {
		t.Fatalf("with no healthy agent, partitions were assigned: %v", shares(owners))
	}
	if got := r.partitionsFor("never-connected", count); got != nil {
		t.Fatalf("an unknown agent was assigned %v", got)
	}
}

// Three agents share 256 partitions roughly evenly, whatever they are
// called.
func TestAssignBalance(t *testing.T) {
	const count = 256
	for _, names := range [][]string{
		{"agent-1", "agent-2", "agent-3"},
		{"a", "b", "c"},
		{"rivora-0", "rivora-1", "rivora-2"},
		{"ip-10-0-1-17", "ip-10-0-2-33", "ip-10-0-3-5"},
		{"nomad-alloc-8f3c2e1a", "nomad-alloc-8f3c2e1b", "nomad-alloc-8f3c2e1c"},
	} {
		t.Run(names[0], func(t *testing.T) {
			r := assignRegistry(t)
			for _, name := range names {
				join(r, name, time.Now())
			}
			owners := assignment(t, r, names, count)
			if len(owners) != count {
				t.Fatalf("%d of %d partitions assigned", len(owners), count)
			}
			for _, name := range names {
				n := shares(owners)[name]
				if n < count*20/100 || n > count*47/100 {
					t.Errorf("agent %s owns %d of %d partitions, want 20%%–47%% (shares %v)", name, n, count, shares(owners))
				}
			}
		})
	}
}

// Removing an agent moves only the partitions it owned; adding one moves
// partitions only to it.
func TestAssignMinimalMovement(t *testing.T) {
	const count = 256
	four := []string{"agent-1", "agent-2", "agent-3", "agent-4"}

	t.Run("remove", func(t *testing.T) {
		r := assignRegistry(t)
		for _, name := range four {
			join(r, name, time.Now())
		}
		before := assignment(t, r, four, count)
		if len(before) != count {
			t.Fatalf("%d of %d partitions assigned", len(before), count)
		}
		leave(r, "agent-3")
		after := assignment(t, r, four, count)
		if len(after) != count {
			t.Fatalf("after agent-3 left: %d of %d partitions assigned", len(after), count)
		}
		moved := 0
		for p := range count {
			switch {
			case after[p] == "agent-3":
				t.Errorf("partition %d still assigned to agent-3, which left", p)
			case before[p] == "agent-3":
				moved++
			case after[p] != before[p]:
				t.Errorf("partition %d moved from %s to %s, though its owner stayed", p, before[p], after[p])
			}
		}
		if moved == 0 {
			t.Fatal("agent-3 owned nothing before it left: the test shows nothing")
		}
	})

	t.Run("add", func(t *testing.T) {
		r := assignRegistry(t)
		for _, name := range four[:3] {
			join(r, name, time.Now())
		}
		before := assignment(t, r, four, count)
		join(r, "agent-4", time.Now())
		after := assignment(t, r, four, count)
		if len(before) != count || len(after) != count {
			t.Fatalf("assigned %d then %d of %d partitions", len(before), len(after), count)
		}
		gained := 0
		for p := range count {
			switch {
			case after[p] == "agent-4":
				gained++
			case after[p] != before[p]:
				t.Errorf("partition %d moved from %s to %s, not to the new agent", p, before[p], after[p])
			}
		}
		if gained == 0 {
			t.Fatal("the new agent gained nothing")
		}
		// Rendezvous agrees with a registry that had all four from the start.
		r4 := assignRegistry(t)
		for _, name := range four {
			join(r4, name, time.Now())
		}
		if fresh := assignment(t, r4, four, count); !maps.Equal(fresh, after) {
			t.Fatal("adding agent-4 later gives a different assignment than starting with it")
		}
	})
}

// The same agents give the same assignment every time: it does not depend
// on map iteration order, the order agents connected, or when they did.
func TestAssignStable(t *testing.T) {
	const count = 128
	names := []string{"agent-1", "agent-2", "agent-3", "agent-4", "agent-5"}
	r := assignRegistry(t)
	for _, name := range names {
		join(r, name, time.Now())
	}
	want := assignment(t, r, names, count)
	for i := range 50 {
		if got := assignment(t, r, names, count); !maps.Equal(got, want) {
			t.Fatalf("call %d gave a different assignment", i)
		}
	}
	reversed := assignRegistry(t)
	base := time.Now()
	for i, name := range slices.Backward(names) {
		join(reversed, name, base.Add(time.Duration(i)*time.Hour))
	}
	if got := assignment(t, reversed, names, count); !maps.Equal(got, want) {
		t.Fatal("agents connecting in another order, at other times, changed the assignment")
	}
	// The owner of a partition is a pure function of the healthy agents.
	for p := range count {
		agents := make([]*agentState, 0, len(names))
		for _, name := range slices.Backward(names) {
			agents = append(agents, &agentState{name: name})
		}
		if got := rendezvousOwner(p, agents).name; got != want[p] {
			t.Fatalf("rendezvousOwner(%d) = %s, the registry says %s", p, got, want[p])
		}
	}
	if rendezvousOwner(0, nil) != nil {
		t.Fatal("rendezvousOwner with no agents picked one")
	}
}

// Without Consul a cell has one owner: the agent connected the longest.
func TestAssignWithoutConsulLongestConnectedOwnsAll(t *testing.T) {
	const count = 16
	r := newAgentRegistry(nil, nil, auth.CellToken{}, slog.New(slog.DiscardHandler))
	names := []string{"first", "second", "third"}
	base := time.Now().Add(-time.Hour)
	r.connect("second", "http://second.invalid:7070", "", time.Time{}, base.Add(time.Minute))
	r.connect("first", "http://first.invalid:7070", "", time.Time{}, base)
	r.connect("third", "http://third.invalid:7070", "", time.Time{}, base.Add(2*time.Minute))
	all := func(owner string) {
		t.Helper()
		owners := assignment(t, r, names, count)
		if got := shares(owners); len(owners) != count || got[owner] != count {
			t.Fatalf("shares %v, want %s to own all %d partitions", got, owner, count)
		}
	}
	all("first")
	for range 20 {
		all("first") // not an accident of map order
	}

	// A second stream of the owner (a reconnect overlapping the old one)
	// keeps its seniority.
	r.connect("first", "http://first.invalid:7070", "", time.Time{}, time.Now())
	all("first")
	leave(r, "first")
	all("first") // one stream still open
	leave(r, "first")
	all("second")
	// Back, it is the newest: the owner does not change.
	r.connect("first", "http://first.invalid:7070", "", time.Time{}, time.Now())
	all("second")

	// Joined at the same instant: the name decides, not map order.
	tie := newAgentRegistry(nil, nil, auth.CellToken{}, slog.New(slog.DiscardHandler))
	for _, name := range []string{"zeta", "alpha", "mu"} {
		tie.connect(name, "http://"+name+".invalid:7070", "", time.Time{}, base)
	}
	for range 20 {
		owners := assignment(t, tie, []string{"zeta", "alpha", "mu"}, count)
		if got := shares(owners); got["alpha"] != count {
			t.Fatalf("tie on join time: shares %v, want alpha to own everything", got)
		}
	}
}

// watchSessions follows a real Consul's session list: when an agent's
// session is destroyed, the agent loses its partitions to the others (and
// only its own move); when it comes back with a new session it owns
// nothing until its rejoin delay ends.
func TestAssignFollowsConsulSessions(t *testing.T) {
	const count = 64
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
	r := newAgentRegistry(client, nil, auth.CellToken{}, slog.New(slog.DiscardHandler))
	// lostSignalled is closed by the first onChange that follows
	// agent-2's session loss.
	lostSignalled := make(chan struct{})
	var once sync.Once
	r.onChange = func() {
		r.mu.Lock()
		lost := r.agents["agent-2"] != nil && !r.agents["agent-2"].sessionLost.IsZero()
		r.mu.Unlock()
		if lost {
			once.Do(func() { close(lostSignalled) })
		}
	}
	names := []string{"agent-1", "agent-2", "agent-3"}
	sessions := make(map[string]string)
	for _, name := range names {
		sessions[name] = newSession()
		r.connect(name, "http://"+name+".invalid:7070", sessions[name], time.Time{}, time.Now())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.watchSessions(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	poll.True(t, "the first session list", 10*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.liveSessions != nil && len(r.liveSessions) >= len(names)
	})
	before := assignment(t, r, names, count)
	if len(before) != count {
		t.Fatalf("%d of %d partitions assigned with every session alive", len(before), count)
	}

	if _, err := client.Session().Destroy(sessions["agent-2"], nil); err != nil {
		t.Fatal(err)
	}
	poll.True(t, "agent-2's session seen gone", 10*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return !r.agents["agent-2"].sessionLost.IsZero()
	})
	select {
	case <-lostSignalled:
	case <-time.After(10 * time.Second):
		t.Fatal("the session watch saw a session end without calling onChange")
	}
	// Listed as it is now (agents list), before anything asks for its
	// share again: no session, nothing assigned.
	for _, a := range r.status() {
		if a.GetName() == "agent-2" && (a.GetSession() != "" || len(a.GetAssignedPartitions()) != 0 || a.GetHealthy()) {
			t.Fatalf("agent-2 listed with session %q, assigned %v, healthy %t after its session ended; want none, none, false", a.GetSession(), a.GetAssignedPartitions(), a.GetHealthy())
		}
	}
	after := assignment(t, r, names, count)
	if len(after) != count {
		t.Fatalf("%d of %d partitions assigned after agent-2's session ended", len(after), count)
	}
	for p := range count {
		switch {
		case after[p] == "agent-2":
			t.Fatalf("partition %d still assigned to agent-2, whose session is gone", p)
		case before[p] != "agent-2" && after[p] != before[p]:
			t.Fatalf("partition %d moved from %s to %s", p, before[p], after[p])
		}
	}

	// Back with a new session: not before the rejoin delay.
	fresh := newSession()
	r.connect("agent-2", "http://agent-2.invalid:7070", fresh, time.Time{}, time.Now())
	poll.True(t, "agent-2's new session listed", 10*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.liveSessions[fresh]
	})
	if got := r.partitionsFor("agent-2", count); len(got) != 0 {
		t.Fatalf("agent-2 owns %v right after rejoining", got)
	}
	r.mu.Lock()
	r.agents["agent-2"].eligibleAt = time.Now().Add(-time.Millisecond)
	r.mu.Unlock()
	if again := assignment(t, r, names, count); !maps.Equal(again, before) {
		t.Fatalf("after its rejoin delay agent-2 got a different share: %v, before %v", shares(again), shares(before))
	}
}

// A partition an agent reports cut (it cannot write its streams) goes to
// another healthy agent, and only it moves; it comes back once the report
// is withdrawn; a partition every agent reports cut stays where
// rendezvous hashing puts it. A new session forgets the report.
func TestAssignMovesPartitionsAnAgentCannotWrite(t *testing.T) {
	const count = 32
	r := assignRegistry(t)
	now := time.Now()
	names := []string{"a1", "a2", "a3"}
	for _, name := range names {
		join(r, name, now)
	}
	before := assignment(t, r, names, count)
	var mine []uint32
	for p, owner := range before {
		if owner == "a1" {
			mine = append(mine, uint32(p))
		}
	}
	slices.Sort(mine)
	if len(mine) < 2 {
		t.Fatalf("a1 owns %v, want at least 2 partitions", mine)
	}
	cut := mine[:2]
	if changed, err := r.owned("a1", "session-a1", nil, cut, now); err != nil || !changed {
		t.Fatalf("report cut %v: changed %v, %v; want changed", cut, changed, err)
	}
	if changed, _ := r.owned("a1", "session-a1", nil, []uint32{cut[1], cut[0]}, now); changed {
		t.Fatal("the same cut partitions reported again (in another order) count as a change")
	}
	after := assignment(t, r, names, count)
	for p := range count {
		switch {
		case slices.Contains(cut, uint32(p)):
			if after[p] == "a1" || after[p] == "" {
				t.Errorf("partition %d reported cut by a1 is assigned to %q, want another agent", p, after[p])
			}
		case after[p] != before[p]:
			t.Errorf("partition %d moved from %s to %s though nobody reported it cut", p, before[p], after[p])
		}
	}
	r.mu.Lock()
	status := r.agents["a1"].cut
	r.mu.Unlock()
	if !slices.Equal(status, cut) {
		t.Errorf("a1's cut partitions recorded as %v, want %v", status, cut)
	}

	// Every agent reports the first one cut: it stays with a1, its
	// rendezvous owner (nobody is better placed).
	for _, name := range []string{"a2", "a3"} {
		if _, err := r.owned(name, "session-"+name, nil, cut[:1], now); err != nil {
			t.Fatal(err)
		}
	}
	if got := assignment(t, r, names, count)[int(cut[0])]; got != "a1" {
		t.Errorf("partition %d reported cut by every agent is assigned to %s, want a1", cut[0], got)
	}

	// a1 can write them again: they come back.
	if changed, err := r.owned("a1", "session-a1", nil, nil, now); err != nil || !changed {
		t.Fatalf("withdraw the cut report: changed %v, %v", changed, err)
	}
	for _, name := range []string{"a2", "a3"} {
		if _, err := r.owned(name, "session-"+name, nil, nil, now); err != nil {
			t.Fatal(err)
		}
	}
	if back := assignment(t, r, names, count); !maps.Equal(back, before) {
		t.Errorf("after the cut report was withdrawn the assignment is %v, want the first one %v", back, before)
	}

	// A report of another session is refused; a new session starts clean.
	if _, err := r.owned("a1", "session-old", nil, cut, now); err == nil {
		t.Error("a cut report for another session was accepted")
	}
	if _, err := r.owned("a1", "session-a1", nil, cut, now); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.liveSessions["session-a1-2"] = true
	r.mu.Unlock()
	r.connect("a1", "http://a1.invalid:7070", "session-a1-2", time.Time{}, now)
	r.mu.Lock()
	left := r.agents["a1"].cut
	r.mu.Unlock()
	if left != nil {
		t.Errorf("a new session kept the old one's cut report %v", left)
	}
}

// TestARejoinDelayOutlivesTheControlPlane: an agent tells when its session
// replaced a lost one, so a control plane that never saw the loss (it
// restarted, or leads since) still holds the agent to the rejoin delay,
// counted from the replacement; an agent's clock running ahead cannot
// stretch it past the delay from now.
func TestARejoinDelayOutlivesTheControlPlane(t *testing.T) {
	r := assignRegistry(t)
	r.rejoinDelay = 30 * time.Second
	now := time.Now()
	cases := []struct {
		name       string
		replacedAt time.Time
		eligibleAt time.Time // zero: eligible now
	}{
		{"first-session", time.Time{}, time.Time{}},
		{"replaced-5s-ago", now.Add(-5 * time.Second), now.Add(25 * time.Second)},
		{"replaced-long-ago", now.Add(-time.Minute), time.Time{}},
		{"clock-ahead", now.Add(time.Hour), now.Add(30 * time.Second)},
	}
	for _, c := range cases {
		session := "session-" + c.name
		r.mu.Lock()
		r.liveSessions[session] = true
		r.mu.Unlock()
		r.connect(c.name, "http://"+c.name+".invalid:7070", session, c.replacedAt, now)
		r.mu.Lock()
		a := r.agents[c.name]
		healthy, reason := r.healthyLocked(a, now)
		got := a.eligibleAt
		r.mu.Unlock()
		if !got.Equal(c.eligibleAt) || healthy != c.eligibleAt.IsZero() {
			t.Errorf("%s: eligible at %v, healthy %v (%q); want eligible at %v", c.name, got, healthy, reason, c.eligibleAt)
		}
	}
	// The same session announced again (a Watch reconnecting) does not
	// start the delay over.
	r.mu.Lock()
	r.agents["replaced-5s-ago"].eligibleAt = time.Time{}
	r.mu.Unlock()
	r.connect("replaced-5s-ago", "http://replaced-5s-ago.invalid:7070", "session-replaced-5s-ago", now.Add(-5*time.Second), now)
	r.mu.Lock()
	again := r.agents["replaced-5s-ago"].eligibleAt
	r.mu.Unlock()
	if !again.IsZero() {
		t.Errorf("a reconnect with the same session set the rejoin delay again (eligible at %v)", again)
	}
}

// TestACleanRestartSkipsTheRejoinDelay: an agent back with a new session
// after it reported leaving and ended the old one (a deploy's restart) is
// eligible at once when it had held that session for at least the rejoin
// delay; one that left soon after it started, left because its store
// failed, or lost its session without leaving, waits the delay.
func TestACleanRestartSkipsTheRejoinDelay(t *testing.T) {
	r := assignRegistry(t)
	r.rejoinDelay = 30 * time.Second
	start := time.Now()
	cases := []struct {
		name        string
		held        time.Duration // the old session's life
		leaving     bool
		storeFailed bool
		delayed     bool
	}{
		{"left-after-a-minute", time.Minute, true, false, false},
		{"left-after-10s", 10 * time.Second, true, false, true},
		{"lost-after-a-minute", time.Minute, false, false, true},
		{"store-failed-after-a-minute", time.Minute, true, true, true},
	}
	for _, c := range cases {
		r.mu.Lock()
		r.liveSessions["old-"+c.name] = true
		r.mu.Unlock()
		r.connect(c.name, "http://"+c.name+".invalid:7070", "old-"+c.name, time.Time{}, start)
		if c.leaving {
			if err := r.leave(c.name, "old-"+c.name, c.storeFailed, start.Add(c.held)); err != nil {
				t.Fatal(err)
			}
		}
		back := start.Add(c.held + time.Second)
		r.mu.Lock()
		r.agents[c.name].sessionLost = start.Add(c.held) // as watchSessions sees it end
		r.liveSessions["new-"+c.name] = true
		r.mu.Unlock()
		r.connect(c.name, "http://"+c.name+".invalid:7070", "new-"+c.name, time.Time{}, back)
		r.mu.Lock()
		a := r.agents[c.name]
		eligibleAt, leaving := a.eligibleAt, a.leaving
		r.mu.Unlock()
		if delayed := eligibleAt.After(back); delayed != c.delayed {
			t.Errorf("%s: eligible at %v (back at %v), want delayed %v", c.name, eligibleAt, back, c.delayed)
		}
		if leaving {
			t.Errorf("%s: still marked leaving with a new session", c.name)
		}
	}

	// A flapping agent: its session lost, it is back (held to the delay),
	// then stops 1 s after it could own partitions. Its session lived
	// longer than the delay, but it owned partitions only for 1 s: back
	// again, it waits the delay.
	const name = "flapping"
	r.mu.Lock()
	r.liveSessions["s1"], r.liveSessions["s2"], r.liveSessions["s3"] = true, true, true
	r.mu.Unlock()
	r.connect(name, "http://flapping.invalid:7070", "s1", time.Time{}, start)
	r.mu.Lock()
	r.agents[name].sessionLost = start.Add(time.Second)
	r.mu.Unlock()
	back := start.Add(2 * time.Second)
	r.connect(name, "http://flapping.invalid:7070", "s2", time.Time{}, back)
	if err := r.leave(name, "s2", false, back.Add(r.rejoinDelay+time.Second)); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.agents[name].sessionLost = back.Add(r.rejoinDelay + 2*time.Second)
	r.mu.Unlock()
	again := back.Add(r.rejoinDelay + 3*time.Second)
	r.connect(name, "http://flapping.invalid:7070", "s3", time.Time{}, again)
	r.mu.Lock()
	eligibleAt := r.agents[name].eligibleAt
	r.mu.Unlock()
	if !eligibleAt.After(again) {
		t.Errorf("a flapping agent that owned partitions for 1 s before leaving is eligible at %v, back at %v: want the rejoin delay", eligibleAt, again)
	}
}
