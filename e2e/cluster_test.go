package e2e

// A cell of three agents on a real Consul: clustered JetStream (R3),
// Consul-granted partition ownership, and what happens when an agent is
// killed, frozen, or Consul restarts.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rivora/rivora/e2e/consultest"
	"github.com/rivora/rivora/e2e/creds"
	"github.com/rivora/rivora/e2e/jsdump"
	"github.com/rivora/rivora/lanes"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/faultnet"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

const (
	clusterTTL       = 10 * time.Second
	clusterLockDelay = 5 * time.Second
)

// clusterCell is Consul, a control plane, MinIO (the cell's dead-letter
// archive) and several agents whose embedded NATS servers form one
// JetStream cluster.
type clusterCell struct {
	t          testing.TB
	consul     *consultest.Server
	minio      *minioServer
	cp         *proc
	agents     map[string]*proc
	natsURLs   map[string]string // agent → its NATS client URL
	args       map[string][]string
	names      []string
	partitions int
	// cps are all the control planes (cp is the first; with several, any
	// of them may lead).
	cps []*proc
	// net, when set, carries the links inside the cell (clusterOptions.Net).
	net *faultnet.Net
	// disks are the agents given a small filesystem of their own
	// (clusterOptions.DiskLimit): name → its mount (disk_test.go).
	disks map[string]string
}

// startClusterCell starts Consul, a control plane and n agents, and waits
// until every partition is owned.
func startClusterCell(t testing.TB, n, partitions int, cpArgs ...string) *clusterCell {
	t.Helper()
	return startCluster(t, 1, n, partitions, cpArgs...)
}

// startCluster starts Consul, controlPlanes control planes, MinIO, n
// agents following all of them and archiving to it, and waits until every
// partition is owned.
func startCluster(t testing.TB, controlPlanes, n, partitions int, cpArgs ...string) *clusterCell {
	t.Helper()
	return startClusterWith(t, clusterOptions{ControlPlanes: controlPlanes, Agents: n, Partitions: partitions, CPArgs: cpArgs})
}

// clusterOptions shape startClusterWith.
type clusterOptions struct {
	ControlPlanes, Agents, Partitions int
	CPArgs                            []string
	// AgentArgs, when set, are more flags for agent name (a1, a2, …).
	AgentArgs func(name string) []string
	// Net, when set, carries every link inside the cell through its own
	// proxy, so a test can cut any one (faultcell_test.go has the wiring).
	Net *faultnet.Net
	// DiskLimit, when set, is the size in bytes of a filesystem of its
	// own for agent name's --data-dir (0: an ordinary directory), which
	// fillDisk can fill (disk_test.go).
	DiskLimit func(name string) int64
}

// startClusterWith is startCluster with every option.
func startClusterWith(t testing.TB, o clusterOptions) *clusterCell {
	t.Helper()
	controlPlanes, n, partitions, cpArgs := o.ControlPlanes, o.Agents, o.Partitions, o.CPArgs
	c := &clusterCell{t: t, consul: consultest.Start(t), agents: map[string]*proc{}, natsURLs: map[string]string{}, args: map[string][]string{}, partitions: partitions, net: o.Net,
		disks: map[string]string{}}
	var cpURLs, stateDirs []string
	for i := range controlPlanes {
		cpAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
		stateDir := t.TempDir()
		args := append([]string{"controlplane", "--listen", cpAddr, "--state-dir", stateDir,
			"--partitions", strconv.Itoa(partitions), "--consul", c.via(cpNode(i), "consul", c.consul.URL())}, cellArgs()...)
		args = append(args, allowLoopback()...)
		args = append(args, tlsArgs()...)
		cp := startProc(t, "controlplane "+strconv.Itoa(i+1), cpAddr, append(args, cpArgs...))
		c.cps = append(c.cps, cp)
		cpURLs = append(cpURLs, cp.URL())
		stateDirs = append(stateDirs, stateDir)
	}
	c.cp = c.cps[0]
	c.minio = startMinIO(t)
	type ports struct{ api, client, cluster int }
	ps := make([]ports, n)
	var routes []string
	for i := range ps {
		ps[i] = ports{freePort(t), freePort(t), freePort(t)}
		routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(ps[i].cluster))
	}
	for i, p := range ps {
		name := "a" + strconv.Itoa(i+1)
		addr := "127.0.0.1:" + strconv.Itoa(p.api)
		c.names = append(c.names, name)
		c.natsURLs[name] = "nats://127.0.0.1:" + strconv.Itoa(p.client)
		agentRoutes, cps := routes, cpURLs
		if c.net != nil {
			agentRoutes, cps = c.netRoutes(name, routes), c.netControlPlanes(name, cpURLs)
		}
		c.args[name] = []string{"agent", "--name", name, "--listen", addr,
			"--controlplane", strings.Join(cps, ","), "--consul", c.via(name, "consul", c.consul.URL()), "--data-dir", c.dataDir(t, name, o.DiskLimit),
			"--nats-listen", "127.0.0.1:" + strconv.Itoa(p.client), "--nats-cluster", "127.0.0.1:" + strconv.Itoa(p.cluster),
			"--nats-routes", strings.Join(agentRoutes, ","),
			"--session-ttl", clusterTTL.String(), "--lock-delay", clusterLockDelay.String()}
		c.args[name] = append(c.args[name], c.minio.DevArgs("rivora-cell")...)
		if c.net != nil {
			// After DevArgs: its --s3-endpoint is replaced (the last wins).
			c.args[name] = append(c.args[name], c.netAgentArgs(name, addr)...)
		}
		c.args[name] = append(c.args[name], cellArgs()...)
		c.args[name] = append(c.args[name], allowLoopback()...)
		c.args[name] = append(c.args[name], tlsArgs()...)
		if o.AgentArgs != nil {
			c.args[name] = append(c.args[name], o.AgentArgs(name)...)
		}
		c.agents[name] = launchProc(t, "agent "+name, addr, c.args[name])
	}
	token := readAdminToken(t, stateDirs...)
	creds.Register(token, cpURLs...)
	for _, name := range c.names {
		creds.Register(token, c.agents[name].URL())
	}
	for _, name := range c.names {
		c.agents[name].waitHealthy(90 * time.Second)
	}
	c.waitOwned(t, 60*time.Second, nil)
	return c
}

// restart starts a stopped agent again with its data.
func (c *clusterCell) restart(t testing.TB, name string) {
	t.Helper()
	old := c.agents[name]
	c.agents[name] = startProc(t, "agent "+name+" (restarted)", old.Addr, c.args[name])
}

func (c *clusterCell) rig(ingest string) *rig {
	return &rig{name: "cluster", adminURL: c.cp.URL(), ingestURL: c.agents[ingest].URL(), cpLog: c.cp.LogPath, died: func() error {
		return c.cp.diedErr()
	}}
}

// agentJSON is one entry of `rivoractl agents list -o json`.
type agentJSON struct {
	Name       string   `json:"name"`
	Address    string   `json:"address"`
	Healthy    bool     `json:"healthy"`
	Session    string   `json:"session"`
	Partitions []uint32 `json:"partitions"`
	Assigned   []uint32 `json:"assignedPartitions"`
}

func (c *clusterCell) agentsList(t testing.TB) []agentJSON {
	t.Helper()
	out := ctlAt(t, c.cp.URL(), "agents", "list", "-o", "json")
	var agents []agentJSON
	if err := json.Unmarshal([]byte(out), &agents); err != nil {
		t.Fatalf("agents list -o json: %v\n%s", err, out)
	}
	return agents
}

// owners maps each partition to the agent listed as owning it; a
// partition listed twice is a test failure.
func (c *clusterCell) owners(t testing.TB) map[uint32]string {
	t.Helper()
	out := map[uint32]string{}
	for _, a := range c.agentsList(t) {
		for _, p := range a.Partitions {
			if prev, dup := out[p]; dup {
				t.Errorf("partition %d listed as owned by both %s and %s", p, prev, a.Name)
			}
			out[p] = a.Name
		}
	}
	return out
}

// waitOwned waits until every partition is owned by a healthy agent, none
// by an agent in exclude; it returns the owners.
func (c *clusterCell) waitOwned(t testing.TB, timeout time.Duration, exclude []string) map[uint32]string {
	t.Helper()
	var owners map[uint32]string
	poll.True(t, fmt.Sprintf("all %d partitions owned by healthy agents other than %v", c.partitions, exclude), timeout, func() bool {
		healthy := map[string]bool{}
		for _, a := range c.agentsList(t) {
			healthy[a.Name] = a.Healthy
		}
		owners = c.owners(t)
		if len(owners) != c.partitions {
			return false
		}
		for _, name := range owners {
			if !healthy[name] || slices.Contains(exclude, name) {
				return false
			}
		}
		return true
	})
	return owners
}

// busiest is the agent owning the most partitions.
func busiest(owners map[uint32]string) string {
	count := map[string]int{}
	for _, name := range owners {
		count[name]++
	}
	best := ""
	for name, n := range count {
		if best == "" || n > count[best] || (n == count[best] && name < best) {
			best = name
		}
	}
	return best
}

func (c *clusterCell) others(victim string) []string {
	var out []string
	for _, name := range c.names {
		if name != victim {
			out = append(out, name)
		}
	}
	return out
}

// clusterLoad publishes lanes of events to several destinations through
// chosen agents, each lane in order, round by round.
type clusterLoad struct {
	dests    []string
	partners map[string]*partner.Partner
	lanes    int
	pub      map[string]*published // destination → what was acked
}

func newClusterLoad(t testing.TB, r *rig, dests []string, lanes int) *clusterLoad {
	t.Helper()
	l := &clusterLoad{dests: dests, partners: map[string]*partner.Partner{}, lanes: lanes, pub: map[string]*published{}}
	for _, d := range dests {
		p := newPartner(t)
		p.SetDelay(5 * time.Millisecond)
		r.createDestination(t, d, p, nil)
		l.partners[d] = p
		l.pub[d] = newPublished()
	}
	return l
}

// publishRound publishes event #round of every lane of every destination,
// lanes spread over the given agents; SDK retries cover a failover.
func (l *clusterLoad) publishRound(ctx context.Context, c *clusterCell, via []string, round int) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(l.dests)*l.lanes)
	clients := make([]*sdk.Client, len(via))
	for i, name := range via {
		clients[i] = sdk.New(c.agents[name].URL(), sdk.WithHTTPClient(authedHTTP), sdk.WithRetry(30, 200*time.Millisecond), sdk.WithAttemptTimeout(10*time.Second))
	}
	for di, d := range l.dests {
		for k := range l.lanes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lane := fmt.Sprintf("user-%02d", k)
				payload := payloadFor(d, lane, round, 96)
				client := clients[(di*l.lanes+k)%len(clients)]
				id, err := client.Publish(ctx, sdk.Event{Destination: d, Customer: "cust", Lane: lane, Type: "cell.test", Payload: payload,
					IdempotencyKey: fmt.Sprintf("%s-%s-%d", d, lane, round)})
				if err != nil {
					errs <- fmt.Errorf("publish %s/%s #%d: %w", d, lane, round, err)
					return
				}
				l.pub[d].add("cust/"+lane, id, payload)
			}()
		}
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (l *clusterLoad) setDelay(d time.Duration) {
	for _, p := range l.partners {
		p.SetDelay(d)
	}
}

func (l *clusterLoad) total() int {
	n := 0
	for _, pb := range l.pub {
		n += len(pb.all())
	}
	return n
}

func (l *clusterLoad) delivered() int {
	n := 0
	for _, p := range l.partners {
		n += p.Delivered()
	}
	return n
}

// check waits until every acked event is delivered and checks lane order;
// it returns the duplicates. When events are missing it prints the
// cluster's streams and consumers as a live agent sees them.
func (l *clusterLoad) check(t testing.TB, c *clusterCell, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, d := range l.dests {
		if err := l.partners[d].AwaitDelivered(l.pub[d].all(), time.Until(deadline)); err != nil {
			var dump strings.Builder
			for _, name := range c.names {
				jsdump.Dump(context.Background(), &dump, c.natsURLs[name], cellNATS(t)...)
			}
			t.Fatalf("%s: %v\n%s", d, err, dump.String())
		}
	}
	dups := 0
	for _, d := range l.dests {
		rep := checkLaneOrder(t, l.partners[d], l.pub[d].ByLane, l.pub[d].Payloads, nil)
		dups += rep.Duplicates
	}
	return dups
}

// TestClusterFailoverKill9: the agent owning the most partitions dies with
// kill -9 mid-delivery. Its partitions are owned again within lock-delay +
// 10 s, publishing through the survivors goes on, every acked event is
// delivered and no lane is reordered.
func TestClusterFailoverKill9(t *testing.T) {
	c := startClusterCell(t, 3, 8)
	owners := c.waitOwned(t, 30*time.Second, nil)
	victim := busiest(owners)
	survivors := c.others(victim)
	t.Logf("owners before: %v; victim %s", owners, victim)

	r := c.rig(survivors[0])
	load := newClusterLoad(t, r, []string{"d1", "d2", "d3", "d4"}, 25) // 100 lanes
	const rounds = 15                                                  // 1,500 events
	ctx := ctxTimeout(t, 3*time.Minute)
	published := make(chan error, 1)
	var publishErr atomic.Value
	killed := make(chan struct{})
	go func() {
		for round := range rounds {
			if round == rounds/2 {
				<-killed // the second half is published during the failover
			}
			if err := load.publishRound(ctx, c, survivors, round); err != nil {
				publishErr.Store(err)
				published <- err
				return
			}
		}
		published <- nil
	}()
	poll.True(t, "a third of the first half delivered", 60*time.Second, func() bool {
		if err := publishErr.Load(); err != nil {
			t.Fatalf("publishing before the kill: %v", err)
		}
		return load.delivered() >= 250
	})
	killAt := time.Now()
	c.agents[victim].kill()
	close(killed)
	t.Logf("killed %s (kill -9) with %d events delivered", victim, load.delivered())

	after := c.waitOwned(t, clusterLockDelay+20*time.Second, []string{victim})
	took := time.Since(killAt)
	t.Logf("partitions owned again %s after kill -9: %v", took.Round(100*time.Millisecond), after)
	if limit := clusterLockDelay + 10*time.Second; took > limit {
		t.Errorf("partitions owned again after %s, want within lock-delay + 10s = %s", took.Round(100*time.Millisecond), limit)
	}
	if err := <-published; err != nil {
		t.Fatalf("publishing through the survivors during the failover: %v", err)
	}
	if n := load.total(); n != 4*25*rounds {
		t.Fatalf("acked %d events, want %d", n, 4*25*rounds)
	}
	dups := load.check(t, c, 2*time.Minute)
	t.Logf("all %d acked events delivered in lane order; %d duplicates", load.total(), dups)
	// The survivors' deliveries name them.
	for _, p := range load.partners {
		for _, d := range p.Requests() {
			if !strings.HasPrefix(d.UserAgent, "rivora/") {
				t.Fatalf("delivery with user-agent %q, want rivora/<version> (<agent>)", d.UserAgent)
			}
		}
	}
}

// TestClusterFrozenAgent: an agent frozen with SIGSTOP past its session
// TTL loses its partitions to the others; after SIGCONT it delivers
// nothing for partitions it no longer owns.
func TestClusterFrozenAgent(t *testing.T) {
	// The thawed agent gets no partitions back during the test.
	c := startClusterCell(t, 3, 8, "--rejoin-delay", "10m")
	owners := c.waitOwned(t, 30*time.Second, nil)
	victim := busiest(owners)
	survivors := c.others(victim)
	r := c.rig(survivors[0])
	// Two destinations in the victim's partitions, one elsewhere.
	victimParts := partitionsOf(owners, victim)
	var dests []string
	for i := 0; len(dests) < 3; i++ {
		id := fmt.Sprintf("frozen-%d", i)
		mine := slices.Contains(victimParts, uint32(lanes.Partition(id, c.partitions)))
		if (len(dests) < 2 && mine) || (len(dests) == 2 && !mine) {
			dests = append(dests, id)
		}
	}
	load := newClusterLoad(t, r, dests, 20)
	ctx := ctxTimeout(t, 3*time.Minute)

	round := 0
	publish := func() {
		t.Helper()
		if err := load.publishRound(ctx, c, survivors, round); err != nil {
			t.Fatal(err)
		}
		round++
	}
	for range 3 {
		publish()
	}
	poll.True(t, "the first rounds delivered", 60*time.Second, func() bool { return load.delivered() >= load.total() })
	before := 0
	for _, p := range load.partners {
		for _, d := range p.Requests() {
			if strings.Contains(d.UserAgent, "("+victim+")") {
				before++
			}
		}
	}
	if before == 0 {
		t.Fatalf("%s delivered nothing before it was frozen; the test would prove nothing", victim)
	}

	oldSession := ""
	for _, a := range c.agentsList(t) {
		if a.Name == victim {
			oldSession = a.Session
		}
	}
	frozen := c.agents[victim]
	frozen.signal(syscall.SIGSTOP)
	frozenAt := time.Now()
	t.Logf("froze %s (owning partitions %v, %d deliveries so far)", victim, victimParts, before)
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			frozen.signal(syscall.SIGCONT)
		}
	})
	// While it is frozen the cell keeps accepting through the others.
	publish()
	after := c.waitOwned(t, 2*clusterTTL+clusterLockDelay+20*time.Second, []string{victim})
	t.Logf("partitions moved %s after SIGSTOP: %v", time.Since(frozenAt).Round(100*time.Millisecond), after)

	frozen.signal(syscall.SIGCONT)
	thawed = true
	thawAt := time.Now()
	for range 3 {
		publish()
	}
	load.check(t, c, 30*time.Second)
	// Give the thawed agent time to act on anything it still had queued.
	poll.True(t, victim+" announces a new session", 30*time.Second, func() bool {
		for _, a := range c.agentsList(t) {
			if a.Name == victim && a.Session != "" && a.Session != oldSession {
				return true
			}
		}
		return false
	})
	stale := 0
	for _, p := range load.partners {
		for _, d := range p.Requests() {
			if d.At.After(thawAt) && strings.Contains(d.UserAgent, "("+victim+")") {
				stale++
			}
		}
	}
	if stale > 0 {
		t.Fatalf("%s made %d deliveries after SIGCONT for partitions it no longer owns", victim, stale)
	}
	t.Logf("after SIGCONT %s made 0 deliveries; %d events delivered in lane order", victim, load.total())
}

func partitionsOf(owners map[uint32]string, name string) []uint32 {
	var out []uint32
	for p, n := range owners {
		if n == name {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// TestClusterConsulRestart: Consul restarts mid-run; nothing is lost,
// ownership is re-established and deliveries resume.
func TestClusterConsulRestart(t *testing.T) {
	c := startClusterCell(t, 3, 8)
	c.waitOwned(t, 30*time.Second, nil)
	r := c.rig("a1")
	load := newClusterLoad(t, r, []string{"c1", "c2"}, 20)
	ctx := ctxTimeout(t, 3*time.Minute)
	for round := range 3 {
		if err := load.publishRound(ctx, c, c.names, round); err != nil {
			t.Fatal(err)
		}
	}
	c.consul.Stop()
	// Accepting does not need Consul.
	for round := 3; round < 6; round++ {
		if err := load.publishRound(ctx, c, c.names, round); err != nil {
			t.Fatal(err)
		}
	}
	c.consul.Start()
	restartedAt := time.Now()
	for round := 6; round < 9; round++ {
		if err := load.publishRound(ctx, c, c.names, round); err != nil {
			t.Fatal(err)
		}
	}
	owners := c.waitOwned(t, 60*time.Second, nil)
	t.Logf("ownership re-established %s after Consul came back: %v", time.Since(restartedAt).Round(100*time.Millisecond), owners)
	dups := load.check(t, c, 2*time.Minute)
	t.Logf("all %d events delivered in lane order across the Consul restart; %d duplicates", load.total(), dups)
}

// TestClusterGracefulHandoff: an agent stopped with SIGTERM hands its
// partitions off (released locks: no lock-delay); back again, it gets
// partitions back from the others by graceful handoff. Deliveries go on
// throughout: nothing lost, no lane reordered.
func TestClusterGracefulHandoff(t *testing.T) {
	c := startClusterCell(t, 3, 8, "--rejoin-delay", "1s")
	owners := c.waitOwned(t, 30*time.Second, nil)
	victim := busiest(owners)
	survivors := c.others(victim)
	r := c.rig(survivors[0])
	load := newClusterLoad(t, r, []string{"h1", "h2", "h3", "h4"}, 15)
	load.setDelay(20 * time.Millisecond) // attempts are in flight at every handoff
	ctx := ctxTimeout(t, 3*time.Minute)
	round := 0
	publish := func(n int) {
		t.Helper()
		for range n {
			if err := load.publishRound(ctx, c, survivors, round); err != nil {
				t.Fatal(err)
			}
			round++
		}
	}
	publish(4)

	stopAt := time.Now()
	c.agents[victim].stop(30 * time.Second)
	after := c.waitOwned(t, 30*time.Second, []string{victim})
	t.Logf("%s stopped (SIGTERM) and its partitions owned by others %s later: %v", victim, time.Since(stopAt).Round(100*time.Millisecond), after)
	publish(4)

	c.restart(t, victim)
	poll.True(t, victim+" owns partitions again", 60*time.Second, func() bool {
		for _, a := range c.agentsList(t) {
			if a.Name == victim && a.Healthy && len(a.Partitions) > 0 {
				return true
			}
		}
		return false
	})
	final := c.waitOwned(t, 30*time.Second, nil)
	t.Logf("%s back: %v", victim, final)
	publish(4)
	dups := load.check(t, c, 90*time.Second)
	t.Logf("all %d events delivered in lane order across two handoffs; %d duplicates", load.total(), dups)
}

// TestClusterTwoControlPlanes: two control planes on one Consul, one
// leads; agents follow whichever leads. Stopping the leader hands the lead
// to the other with the state intact, and the agents follow it.
func TestClusterTwoControlPlanes(t *testing.T) {
	c := startCluster(t, 2, 3, 8)
	leader := c.leader(t, nil)
	c.cp = leader
	r := c.rig("a1")
	load := newClusterLoad(t, r, []string{"ha1"}, 10)
	ctx := ctxTimeout(t, 2*time.Minute)
	if err := load.publishRound(ctx, c, c.names, 0); err != nil {
		t.Fatal(err)
	}
	// The follower refuses, naming the leader.
	var follower *proc
	for _, cp := range c.cps {
		if cp != leader {
			follower = cp
		}
	}
	_, errOut, err := runCtl(follower.URL(), "destinations", "list")
	if err == nil || !strings.Contains(errOut, leader.URL()) {
		t.Fatalf("follower answered %v / %q; want an error naming the leader %s", err, errOut, leader.URL())
	}

	leader.stop(30 * time.Second)
	next := c.leader(t, leader)
	c.cp = next
	t.Logf("leader %s stopped; %s leads", leader.URL(), next.URL())
	// The agents follow the new leader, which has the same state.
	c.waitOwned(t, 60*time.Second, nil)
	if out := ctlAt(t, next.URL(), "destinations", "get", "ha1"); !strings.Contains(out, "ha1") {
		t.Fatalf("destination ha1 missing on the new leader:\n%s", out)
	}
	r = c.rig("a2")
	more := newClusterLoad(t, r, []string{"ha2"}, 10) // created through the new leader
	for round := range 2 {
		if err := load.publishRound(ctx, c, c.names, round+1); err != nil {
			t.Fatal(err)
		}
		if err := more.publishRound(ctx, c, c.names, round); err != nil {
			t.Fatal(err)
		}
	}
	load.check(t, c, 60*time.Second)
	more.check(t, c, 60*time.Second)
}

// leader waits until one control plane (not gone) answers admin calls.
func (c *clusterCell) leader(t testing.TB, gone *proc) *proc {
	t.Helper()
	var found *proc
	poll.True(t, "a leading control plane", 30*time.Second, func() bool {
		for _, cp := range c.cps {
			if cp == gone {
				continue
			}
			if _, _, err := runCtl(cp.URL(), "destinations", "list"); err == nil {
				found = cp
				return true
			}
		}
		return false
	})
	return found
}
