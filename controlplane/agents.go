package controlplane

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/backoff"
	"github.com/rivora/rivora/internal/consullock"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// agentRegistry tracks the agents following this control plane (one Watch
// stream each), decides which agent owns which partition, and talks to
// agents through their PartitionService.
//
// With Consul, an agent is healthy while it watches and its Consul session
// lives; partitions go to healthy agents by rendezvous hashing. An agent
// whose Watch is gone for deadAfter has its session destroyed, which frees
// its locks after their lock-delay (instead of after the session TTL). An
// agent that lost its session is given partitions again only rejoinDelay
// after it announced a new one, so a flapping agent does not drag
// partitions back and forth — unless it ended that session itself after
// reporting leaving, having held it for at least rejoinDelay (a
// restart, as a deploy does: leftCleanly).
//
// An agent that reported leaving (ReportLeaving, at its SIGTERM) is not
// healthy from then on: its partitions go to the others at once (who wait
// on the locks it releases at the end of its drain), nothing is asked of
// it, and the end of its Watch does not have its session destroyed — it
// ends the session itself after its drain, and the TTL ends it if the
// agent dies meanwhile. The mark holds for the session it was reported
// with: a restarted agent, with a new session, is healthy again. The mark
// lives in the leader's memory only; a new leader never saw the leaving
// agent's Watch (it ended at the report), so it neither assigns it
// partitions nor destroys its session.
type agentRegistry struct {
	http *http.Client
	// cell sends the cell token on the control plane's own calls to
	// agents (PartitionService, operator notices).
	cell   connect.ClientOption
	consul *api.Client // nil: one agent owns every partition, in process
	log    *slog.Logger

	deadAfter   time.Duration
	rejoinDelay time.Duration
	// onChange is called (without the lock) when assignments may change.
	onChange func()
	// leading reports whether this control plane leads the cell: only the
	// leader declares an agent gone (a deposed one sees every Watch end).
	leading func() bool

	// delayed runs the delayed ends of gone agents' sessions; run closes
	// it.
	delayed group
	// progress is notified when an agent reports a newer applied version
	// or stops watching: awaitApplied waits on it.
	progress broadcaster

	mu     sync.Mutex
	agents map[string]*agentState
	// liveSessions is the last session list read from Consul (nil until
	// the first read).
	liveSessions map[string]bool
}

type agentState struct {
	name     string
	address  string
	streams  int // open Watch streams (a reconnect may overlap the old one)
	applied  uint64
	lastSeen time.Time
	joined   time.Time
	client   rivorav1connect.PartitionServiceClient
	// session is the agent's Consul session; sessionLost is when the
	// control plane saw it gone; eligibleAt is when the agent may own
	// partitions again after that.
	session     string
	sessionLost time.Time
	eligibleAt  time.Time
	// eligibleFrom is when the agent could own partitions with session
	// (seen by this control plane, past any rejoin delay), and leftAt
	// when it reported leaving with it; storeFailed, that it left because
	// its store failed.
	eligibleFrom, leftAt time.Time
	storeFailed          bool
	// leaving is set by ReportLeaving for the session the agent had then
	// (it drains; see agentRegistry).
	leaving   bool
	partition []uint32 // assigned
	owned     []uint32 // as the agent reported
	// cut are the partitions the agent reported it cannot write (cut off
	// from their streams' quorum): assigned to others while they are.
	cut []uint32
}

func newAgentRegistry(consul *api.Client, transport http.RoundTripper, cell auth.CellToken, log *slog.Logger) *agentRegistry {
	return &agentRegistry{
		http: &http.Client{Transport: transport, Timeout: 30 * time.Second}, cell: connect.WithInterceptors(auth.Bearer(cell.String())), consul: consul, log: log,
		deadAfter: time.Second, rejoinDelay: 30 * time.Second, onChange: func() {}, leading: func() bool { return true },
		agents: make(map[string]*agentState),
	}
}

// connect notes a Watch stream of agent name. session is its Consul
// session; replacedAt, when set, is when that session replaced one Consul
// ended, as the agent saw it.
func (r *agentRegistry) connect(name, address, session string, replacedAt, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.agents[name]
	if a == nil || a.address != address {
		joined := now
		if a != nil && a.streams > 0 {
			joined = a.joined
		}
		prev := a
		a = &agentState{name: name, address: address, joined: joined, client: rivorav1connect.NewPartitionServiceClient(r.http, address, r.cell)}
		if prev != nil {
			// Same agent at a new address: its old stream may still be
			// open (and is counted until it ends).
			a.streams, a.applied = prev.streams, prev.applied
			a.session, a.sessionLost, a.eligibleAt, a.leaving, a.eligibleFrom, a.leftAt, a.storeFailed = prev.session, prev.sessionLost, prev.eligibleAt, prev.leaving, prev.eligibleFrom, prev.leftAt, prev.storeFailed
		}
		r.agents[name] = a
	}
	if a.streams == 0 {
		a.joined = now
	}
	if session != a.session {
		switch {
		case session == "":
		case r.leftCleanly(a):
			// A deploy's restart, not a flapping agent: no delay.
			r.log.Info("agent back with a new session after a clean stop; it owns partitions again at once", "agent", name, "session", session)
		case !a.sessionLost.IsZero():
			// Back with a new session after losing the old one.
			a.eligibleAt = now.Add(r.rejoinDelay)
			r.log.Info("agent rejoined with a new session; it owns partitions again after the rejoin delay", "agent", name, "session", session, "eligible_at", a.eligibleAt)
		case !replacedAt.IsZero():
			// It lost a session this control plane did not see lost (it
			// has run or led only since, or had not yet read Consul's
			// list): the delay runs from the replacement, never longer
			// than from now (the agent's clock may run ahead).
			if replacedAt.After(now) {
				replacedAt = now
			}
			if at := replacedAt.Add(r.rejoinDelay); at.After(now) {
				a.eligibleAt = at
				r.log.Info("agent replaced a lost consul session recently; it owns partitions again after the rejoin delay", "agent", name, "session", session, "replaced_at", replacedAt, "eligible_at", a.eligibleAt)
			}
		}
		a.session, a.sessionLost, a.owned, a.cut = session, time.Time{}, nil, nil
		a.eligibleFrom = now
		if a.eligibleAt.After(now) {
			a.eligibleFrom = a.eligibleAt
		}
		a.leaving, a.storeFailed = false, false // a restart: leaving was the old session's
	}
	if r.consul == nil {
		// No sessions tell a restart apart, and a leaving agent opens no
		// new Watch: this one is a restarted agent's.
		a.leaving = false
	}
	a.streams++
	a.lastSeen = now
}

// leftCleanly is whether agent a's last session ended after it reported
// leaving (SIGTERM: it drained and ended the session itself), having
// been eligible for partitions with it for at least the rejoin delay
// before that report. Such an agent back with a new session is a restart
// (a deploy), which the rejoin delay need not hold back: the delay is
// for an agent whose sessions keep being lost. One that stops soon after
// it could own partitions (a crash loop), or because its store failed,
// waits the delay again.
func (r *agentRegistry) leftCleanly(a *agentState) bool {
	if !a.leaving || a.storeFailed || a.sessionLost.IsZero() || a.eligibleFrom.IsZero() || a.leftAt.IsZero() {
		return false
	}
	return a.leftAt.Sub(a.eligibleFrom) >= r.rejoinDelay
}

// disconnect notes a Watch stream's end. With Consul, an agent left with
// no stream for deadAfter is dead to the cell: its session is destroyed so
// its partitions move (after the lock-delay).
func (r *agentRegistry) disconnect(ctx context.Context, name string, now time.Time) {
	r.mu.Lock()
	a := r.agents[name]
	if a == nil {
		r.mu.Unlock()
		return
	}
	a.streams--
	a.lastSeen = now
	session := a.session
	// A leaving agent ends its session itself after its drain.
	gone := a.streams == 0 && r.consul != nil && session != "" && !a.leaving
	r.mu.Unlock()
	r.progress.notify()
	if !gone {
		return
	}
	r.delayed.Go(func() {
		wait := time.NewTimer(r.deadAfter)
		defer wait.Stop()
		select {
		case <-ctx.Done():
			return // this control plane is stopping; agents are not dead
		case <-wait.C:
		}
		if ctx.Err() != nil || !r.leading() {
			return // stopping or deposed; agents are not dead
		}
		r.mu.Lock()
		// A session Consul no longer lists was ended already (an agent
		// that stopped gracefully destroys its own): nothing to destroy.
		still := r.agents[name] == a && a.streams == 0 && a.session == session && a.sessionLost.IsZero() && !a.leaving
		r.mu.Unlock()
		if !still {
			return
		}
		r.log.Warn("agent gone: destroying its consul session so its partitions move", "agent", name, "session", session, "gone_for", r.deadAfter)
		if _, err := r.consul.Session().Destroy(session, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			r.log.Warn("destroy the session of a gone agent (its TTL frees it instead)", "agent", name, "session", session, "error", err)
		}
	})
}

// leave marks agent name leaving (see agentRegistry) while it has
// session; storeFailed, because its store failed.
func (r *agentRegistry) leave(name, session string, storeFailed bool, now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.agents[name]
	if a == nil {
		return fmt.Errorf("agent %q is not known to this control plane", name)
	}
	if session == "" || r.consul == nil {
		// Without a session there is nothing to keep: an ended Watch is
		// the agent's leaving already.
		return fmt.Errorf("agent %q: a leaving report needs the agent's consul session, and a control plane with consul", name)
	}
	if session != a.session {
		return fmt.Errorf("agent %q has consul session %q here, not %q", name, a.session, session)
	}
	if !a.leaving {
		if storeFailed {
			r.log.Warn("agent leaving because its store failed: its partitions go to the others; back, it waits the rejoin delay", "agent", name, "session", session)
		} else {
			r.log.Info("agent leaving: its partitions go to the others; it ends its consul session after its drain", "agent", name, "session", session)
		}
	}
	a.leaving, a.leftAt, a.storeFailed = true, now, storeFailed
	a.lastSeen = now
	return nil
}

func (r *agentRegistry) applied(name string, version uint64, now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.agents[name]
	if a == nil {
		return fmt.Errorf("agent %q is not watching this control plane", name)
	}
	a.applied = max(a.applied, version)
	a.lastSeen = now
	r.progress.notify()
	return nil
}

// healthy reports whether an agent may own partitions now, and why not.
func (r *agentRegistry) healthyLocked(a *agentState, now time.Time) (bool, string) {
	switch {
	case a.leaving:
		return false, "leaving: draining after a stop (SIGTERM)"
	case a.streams == 0:
		return false, "not watching the control plane"
	case r.consul == nil:
		return true, ""
	case a.session == "":
		return false, "no consul session (agent started without --consul?)"
	case !a.sessionLost.IsZero():
		return false, "consul session lost at " + a.sessionLost.Format(time.RFC3339)
	case r.liveSessions != nil && !r.liveSessions[a.session]:
		return false, "consul session not alive"
	case now.Before(a.eligibleAt):
		return false, "rejoined recently: given partitions again at " + a.eligibleAt.Format(time.RFC3339) + " (--rejoin-delay; it accepts publishes meanwhile)"
	}
	return true, ""
}

// partitionsFor lists the partitions assigned to an agent.
//
// With Consul: rendezvous hashing over healthy agents. Every agent's share
// is computed from the same inputs, so adding or removing one agent moves
// only the partitions it gains or loses.
//
// A partition an agent reported cut (it cannot write its streams) goes to
// the best of the other healthy agents; if every one reported it cut, the
// reports are ignored for it (nobody is better placed).
//
// Without Consul a cell has one owner: the longest-connected agent owns
// every partition.
func (r *agentRegistry) partitionsFor(name string, count int) []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	me := r.agents[name]
	if me == nil {
		return nil
	}
	now := time.Now()
	var healthy []*agentState
	for _, a := range r.agents {
		if ok, _ := r.healthyLocked(a, now); ok {
			healthy = append(healthy, a)
		}
	}
	var out []uint32
	if r.consul == nil {
		var owner *agentState
		for _, a := range healthy {
			if owner == nil || a.joined.Before(owner.joined) || (a.joined.Equal(owner.joined) && a.name < owner.name) {
				owner = a
			}
		}
		if owner == me {
			for p := range count {
				out = append(out, uint32(p))
			}
		}
	} else {
		for p := range count {
			if rendezvousOwner(p, notCut(healthy, uint32(p))) == me {
				out = append(out, uint32(p))
			}
		}
	}
	me.partition = out
	return out
}

// notCut returns the agents that did not report p cut, or all of them if
// every one did.
func notCut(agents []*agentState, p uint32) []*agentState {
	var out []*agentState
	for _, a := range agents {
		if !slices.Contains(a.cut, p) {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return agents
	}
	return out
}

// rendezvousOwner picks the agent with the highest score for p.
func rendezvousOwner(p int, agents []*agentState) *agentState {
	var best *agentState
	var bestScore uint64
	for _, a := range agents {
		if s := rendezvousScore(p, a.name); best == nil || s > bestScore || (s == bestScore && a.name < best.name) {
			best, bestScore = a, s
		}
	}
	return best
}

func rendezvousScore(p int, agent string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(agent))
	// splitmix64 of the name's hash and the partition: well mixed even
	// for names and partitions that differ in one character or bit.
	x := h.Sum64() ^ (uint64(p)+1)*0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// run follows Consul's session list and ends rejoin delays until ctx
// ends, then waits for the delayed session ends disconnect started.
func (r *agentRegistry) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { r.watchSessions(ctx) })
	r.tick(ctx)
	wg.Wait()
	r.delayed.close()
}

// watchSessions follows Consul's session list with blocking queries: an
// agent whose session is gone (expired: frozen or cut off; or destroyed)
// is unhealthy and its partitions are reassigned. Errors (Consul down)
// keep the last known list.
func (r *agentRegistry) watchSessions(ctx context.Context) {
	if r.consul == nil {
		return
	}
	var index uint64
	retry := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	for ctx.Err() == nil {
		sessions, meta, err := r.consul.Session().List((&api.QueryOptions{WaitIndex: index, WaitTime: 30 * time.Second}).WithContext(ctx))
		if err != nil {
			if ctx.Err() == nil {
				d := retry.Next()
				r.log.Warn("read consul sessions; keeping the last known", "error", err, "retry_in", d)
				backoff.Sleep(ctx, d)
			}
			continue
		}
		retry.Reset()
		index = consullock.NextIndex(index, meta.LastIndex)
		live := make(map[string]bool, len(sessions))
		for _, s := range sessions {
			live[s.ID] = true
		}
		now := time.Now()
		r.mu.Lock()
		r.liveSessions = live
		for _, a := range r.agents {
			if a.session != "" && !live[a.session] && a.sessionLost.IsZero() {
				a.sessionLost = now
				a.owned = nil
				if a.leaving {
					r.log.Info("leaving agent's consul session ended", "agent", a.name, "session", a.session)
					continue
				}
				r.log.Warn("agent's consul session is gone; reassigning its partitions", "agent", a.name, "session", a.session)
			}
		}
		r.mu.Unlock()
		r.onChange()
	}
}

// tick re-evaluates assignments when a rejoin delay ends.
func (r *agentRegistry) tick(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		r.mu.Lock()
		due := false
		for _, a := range r.agents {
			if !a.eligibleAt.IsZero() && !now.Before(a.eligibleAt) {
				a.eligibleAt = time.Time{}
				due = true
			}
		}
		r.mu.Unlock()
		if due {
			r.onChange()
		}
	}
}

func (r *agentRegistry) status() []*rivorav1.AgentStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	out := make([]*rivorav1.AgentStatus, 0, len(r.agents))
	for _, a := range r.agents {
		healthy, reason := r.healthyLocked(a, now)
		// What an agent was assigned while healthy, and the session it
		// had, are not its now: an unhealthy agent is assigned nothing
		// (partitionsFor counts healthy agents only), a lost session
		// is gone.
		assigned, session := a.partition, a.session
		if !healthy {
			assigned = nil
		}
		if !a.sessionLost.IsZero() || (r.liveSessions != nil && !r.liveSessions[a.session]) {
			session = ""
		}
		out = append(out, &rivorav1.AgentStatus{
			Name: a.name, Address: a.address, Connected: a.streams > 0, AppliedVersion: a.applied,
			LastSeen: timestamppb.New(a.lastSeen), Partitions: a.owned, AssignedPartitions: assigned, CutPartitions: a.cut,
			Healthy: healthy, HealthReason: reason, Session: session,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// connected returns every healthy agent (a frozen or cut-off agent is not
// asked: it would not answer).
func (r *agentRegistry) connected() []*agentState {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	var out []*agentState
	for _, a := range r.agents {
		if ok, _ := r.healthyLocked(a, now); ok {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// leavingHeld lists the partitions an agent that reported leaving still
// holds (its session alive) while no healthy agent reports holding them.
func (r *agentRegistry) leavingHeld() []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	var held []uint32
	for _, a := range r.agents {
		if !a.leaving || !a.sessionLost.IsZero() {
			continue
		}
		for _, p := range a.owned {
			if !r.heldByHealthyLocked(p, now) {
				held = append(held, p)
			}
		}
	}
	slices.Sort(held)
	return held
}

// heldByHealthyLocked reports whether a healthy agent reports holding
// partition p. r.mu is held.
func (r *agentRegistry) heldByHealthyLocked(p uint32, now time.Time) bool {
	for _, a := range r.agents {
		if ok, _ := r.healthyLocked(a, now); ok && slices.Contains(a.owned, p) {
			return true
		}
	}
	return false
}

// ownerOf returns the healthy agent that reports holding partition p's
// lock (ReportOwned). During a handoff two may report it for a moment:
// the one it is assigned to wins, then the first by name.
func (r *agentRegistry) ownerOf(p uint32) (*agentState, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	var owner *agentState
	for _, a := range r.agents {
		if ok, _ := r.healthyLocked(a, now); !ok || !slices.Contains(a.owned, p) {
			continue
		}
		if owner == nil || betterOwner(a, owner, p) {
			owner = a
		}
	}
	return owner, owner != nil
}

// betterOwner: a is assigned p and b is not, or neither or both are and
// a's name comes first.
func betterOwner(a, b *agentState, p uint32) bool {
	if ai, bi := slices.Contains(a.partition, p), slices.Contains(b.partition, p); ai != bi {
		return ai
	}
	return a.name < b.name
}

var errNoAgents = tag(ErrUnavailable, errors.New("no agent is connected to this control plane; start one with `rivora agent --controlplane URL`"))

// askAll asks every connected agent at once and returns the answers in
// the agents' (name) order; the error, an ErrUnavailable, names each agent
// that failed, in the same order (agentsFailed: a customer token, which
// may ask for its destinations' pending counts and health, is not told
// which).
func askAll[T any](r *agentRegistry, ask func(*agentState) (T, error)) ([]T, error) {
	agents := r.connected()
	if len(agents) == 0 {
		return nil, errNoAgents
	}
	answers := make([]T, len(agents))
	errs := make([]error, len(agents), len(agents)+1)
	// A leaving agent is not asked, but until another agent holds each of
	// its partitions their events are in its drain, and a count without
	// them would read short (a destination deleted with events pending).
	if held := r.leavingHeld(); len(held) > 0 {
		errs = append(errs, fmt.Errorf("partitions %v are between owners (their agent is stopping and hands them off within its drain, 15 s at most): retry", held))
	}
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Go(func() {
			answers[i], errs[i] = ask(a)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("agent %s: %w", a.name, errs[i])
			}
		})
	}
	wg.Wait()
	if slices.ContainsFunc(errs[:len(agents)], func(err error) bool { return err != nil }) {
		return answers, agentsFailed(errors.Join(errs...))
	}
	return answers, tag(ErrUnavailable, errors.Join(errs...))
}

// sum asks every connected agent for a count and adds the answers up; on
// an error the total is that of the agents that answered.
func (r *agentRegistry) sum(ask func(*agentState) (int64, error)) (int64, error) {
	counts, err := askAll(r, ask)
	var total int64
	for _, n := range counts {
		total += n
	}
	return total, err
}

// pending sums a destination's pending events over the connected agents:
// all of them, or only one subscription's when subscriptionID is set.
func (r *agentRegistry) pending(ctx context.Context, destinationID, subscriptionID string) (int64, error) {
	return r.sum(func(a *agentState) (int64, error) {
		resp, err := a.client.CountPending(ctx, connect.NewRequest(&rivorav1.CountPendingRequest{DestinationId: destinationID, SubscriptionId: subscriptionID}))
		if err != nil {
			return 0, err
		}
		return resp.Msg.GetPending(), nil
	})
}

// overrideCounts is what pendingAndHeads counts of a destination's
// pending events for a limits override.
type overrideCounts struct {
	pending int64
	// heads used at least the max_attempts asked about; pastWindow, the
	// events past the window asked about.
	heads, pastWindow int64
}

// pendingAndHeads is pending for a whole destination, with how many of
// its lane heads used at least least attempts (none asked for when least
// is 0): what a max_attempts lowered to least ends; and how many of its
// events are past a window this long (none asked for when window is 0):
// what a window shortened to it ends.
func (r *agentRegistry) pendingAndHeads(ctx context.Context, destinationID string, least int32, window time.Duration) (overrideCounts, error) {
	req := &rivorav1.CountPendingRequest{DestinationId: destinationID, HeadsWithAttempts: least}
	if window > 0 {
		req.PastWindow = durationpb.New(window)
	}
	counts, err := askAll(r, func(a *agentState) (*rivorav1.CountPendingResponse, error) {
		resp, err := a.client.CountPending(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	})
	var out overrideCounts
	for _, c := range counts {
		out.pending += c.GetPending()
		out.heads += c.GetHeadsWithAttempts()
		out.pastWindow += c.GetPastWindow()
	}
	return out, err
}

// archivePending dead-letters a destination's pending events on every
// connected agent: all of them, or only one subscription's when
// subscriptionID is set. On an error the counts are those of the agents
// that answered.
func (r *agentRegistry) archivePending(ctx context.Context, destinationID, subscriptionID string) (archivedCounts, error) {
	answers, err := askAll(r, func(a *agentState) (*rivorav1.ArchivePendingResponse, error) {
		resp, err := a.client.ArchivePending(ctx, connect.NewRequest(&rivorav1.ArchivePendingRequest{DestinationId: destinationID, SubscriptionId: subscriptionID}))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	})
	var c archivedCounts
	for _, a := range answers {
		c.archived += a.GetArchived()
		c.inFlight += a.GetInFlight()
		c.later += a.GetArchivedLater()
	}
	return c, err
}

// archivedCounts is what archivePending did: archived, the pending events
// made dead letters (reason deleted); inFlight, the events whose attempt
// was in flight, left to it (delivered, or a dead letter if it fails);
// later, the events queued behind those, which become dead letters once
// those attempts end.
type archivedCounts struct {
	archived, inFlight, later int64
}

// detail is what the audit says of c.
func (c archivedCounts) detail() string {
	s := fmt.Sprintf("%d pending events archived", c.archived)
	switch {
	case c.inFlight == 1:
		s += "; 1 event in flight left to its attempt (a dead letter too if it fails)"
		if c.later > 0 {
			s += fmt.Sprintf(", %s queued behind it archived once it ends", pendingEvents(c.later))
		}
	case c.inFlight > 1:
		s += fmt.Sprintf("; %d events in flight left to their attempts (dead letters too if they fail)", c.inFlight)
		if c.later > 0 {
			s += fmt.Sprintf(", %s queued behind them archived once they end", pendingEvents(c.later))
		}
	}
	return s
}

// health gathers the connected agents' view of a destination (every one
// if destinationID is ""), agent by agent in name order.
func (r *agentRegistry) health(ctx context.Context, destinationID string, withRates bool) ([]*rivorav1.DestinationHealth, error) {
	answers, err := askAll(r, func(a *agentState) ([]*rivorav1.DestinationHealth, error) {
		resp, err := a.client.GetHealth(ctx, connect.NewRequest(&rivorav1.GetHealthRequest{DestinationId: destinationID, RateHistory: withRates}))
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetDestinations(), nil
	})
	if err != nil {
		return nil, err
	}
	return slices.Concat(answers...), nil
}

// ownersHealth is health as the owners see it: of each destination, the
// view of the agent that owns its partition (partitions in the cell). The
// other agents hold none of its lanes and see it idle: healthy, nothing
// pending. While a partition is between owners, or its new owner is
// still rebuilding it, and several agents are connected, it is
// Unavailable, as a call routed to an owner is; a lone agent's view is
// its own.
func (r *agentRegistry) ownersHealth(ctx context.Context, destinationID string, withRates bool, partitions int) ([]*rivorav1.DestinationHealth, error) {
	v, err := r.healthViews(ctx, destinationID, withRates, partitions)
	if err != nil {
		return v.owners, err
	}
	if len(v.unowned) > 0 {
		p := slices.Min(slices.Collect(maps.Keys(v.unowned)))
		// It names a destination of the partition, maybe another
		// customer's: marked, as the agents' own failures are.
		return nil, agentsFailed(fmt.Errorf("partition %d has no owner right now; retry (destination %q is in it; see `rivoractl agents list`)", p, v.unowned[p]))
	}
	if len(v.opening) > 0 {
		p := slices.Min(slices.Collect(maps.Keys(v.opening)))
		return nil, agentsFailed(fmt.Errorf("partition %d is opening: its new owner is rebuilding its lanes, and what it would say of its destinations (%q among them) is not known yet; retry shortly", p, v.opening[p]))
	}
	return v.owners, nil
}

// healthViews are every connected agent's views of destinations' health,
// sorted out by partition ownership.
type healthViews struct {
	all    []*rivorav1.DestinationHealth // every agent's
	owners []*rivorav1.DestinationHealth // each destination's owner's
	// unowned and opening: partitions without an owner, or whose new owner
	// is still rebuilding them, each with one of its destinations; what
	// their destinations are like is not known.
	unowned, opening map[uint32]string
}

// undecided reports whether partition p's destinations have no owner's
// word (healthViews.unowned, opening).
func (v healthViews) undecided(p uint32) bool {
	_, unowned := v.unowned[p]
	_, opening := v.opening[p]
	return unowned || opening
}

// healthViews asks every connected agent for destinations' health in one
// round (ownersHealth).
func (r *agentRegistry) healthViews(ctx context.Context, destinationID string, withRates bool, partitions int) (healthViews, error) {
	type views struct {
		agent *agentState
		of    []*rivorav1.DestinationHealth
	}
	answers, err := askAll(r, func(a *agentState) (views, error) {
		resp, err := a.client.GetHealth(ctx, connect.NewRequest(&rivorav1.GetHealthRequest{DestinationId: destinationID, RateHistory: withRates}))
		if err != nil {
			return views{}, err
		}
		return views{a, resp.Msg.GetDestinations()}, nil
	})
	v := healthViews{unowned: map[uint32]string{}, opening: map[uint32]string{}}
	for _, answer := range answers {
		v.all = append(v.all, answer.of...)
		for _, h := range answer.of {
			p := uint32(lanes.Partition(h.GetDestinationId(), partitions))
			owner, owned := r.ownerOf(p)
			switch {
			case h.GetState() == stateOpening && (owner == answer.agent || len(answers) == 1):
				v.opening[p] = h.GetDestinationId()
			case owned && owner == answer.agent, !owned && len(answers) == 1:
				v.owners = append(v.owners, h)
			case !owned:
				v.unowned[p] = h.GetDestinationId()
			}
		}
	}
	return v, err
}

// stateOpening is the health state an agent gives a destination whose
// partition it holds but has not rebuilt yet (agent/api.StateOpening):
// nothing of its backlog or budget is known.
const stateOpening = "opening"

// awaitApplied waits until every connected agent applied version, or up to
// grace.
func (r *agentRegistry) awaitApplied(version uint64, grace time.Duration) {
	timeout := time.NewTimer(grace)
	defer timeout.Stop()
	for {
		progressed := r.progress.wait()
		if !r.behind(version) {
			return
		}
		select {
		case <-progressed:
		case <-timeout.C:
			return
		}
	}
}

// behind reports whether a watching agent has not applied version yet.
func (r *agentRegistry) behind(version uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.agents {
		if a.streams > 0 && a.applied < version {
			return true
		}
	}
	return false
}

// owned records the partitions an agent holds the locks of, and those it
// reported cut; cutChanged tells the caller to assign again.
func (r *agentRegistry) owned(name, session string, partitions, cut []uint32, now time.Time) (cutChanged bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.agents[name]
	if a == nil {
		return false, fmt.Errorf("agent %q is not watching this control plane", name)
	}
	if session != a.session {
		return false, fmt.Errorf("agent %q reported for session %q, but watches with session %q", name, session, a.session)
	}
	a.owned = slices.Clone(partitions)
	slices.Sort(a.owned)
	cut = slices.Clone(cut)
	slices.Sort(cut)
	if !slices.Equal(cut, a.cut) {
		r.log.Warn("agent reports partitions it cannot write (cut off from their streams' quorum); assigning them elsewhere while it does", "agent", name, "cut", cut)
		a.cut, cutChanged = cut, true
	}
	a.lastSeen = now
	return cutChanged, nil
}
