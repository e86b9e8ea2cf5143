package main

// failover kills -9 the busiest agent of a three-agent cell on a real
// Consul while it delivers, and measures how the cell recovers:
//
//	go run ./e2e/bench failover
//	go run ./e2e/bench failover -lanes 100 -events-per-lane 30 -keep
//
// All on 127.0.0.1: a Consul server (v1.14.11 from $(go env GOPATH)/bin,
// built from tools/consul when missing), `rivora controlplane --consul` and
// three `rivora agent`s whose embedded NATS servers form one JetStream
// cluster (session TTL 10s, lock-delay 5s). Once every partition is owned,
// the agent owning the most partitions is the victim; destinations are
// picked so that half of them hash to its partitions, and a partner server
// in this process records every delivery (webhook-id, rivora-customer,
// rivora-lane, user-agent naming the agent, arrival) and answers 200 after
// -partner-delay. Each lane publishes its events one after another through
// the survivors with the Go SDK (so a lane's order is its ack order): the
// first half spread over -before-kill; then (once the victim delivered
// something) it gets SIGKILL, and the second half is spread over
// -publish-after-kill, during the failover. Reported:
//
//   - first_delivery_after_kill_s: kill → the first 2xx delivery, by a
//     survivor, of an event of a partition the victim owned;
//   - owned_again_s: kill → every partition listed as owned by a healthy
//     survivor (AdminService.GetConfigStatus polled every 100ms);
//   - events_acked, events_lost (acked, never delivered 2xx within
//     -drain-timeout of the last ack), lanes_reordered (lanes where an
//     event reached the partner before an earlier-acked event of the lane
//     had been delivered 2xx), duplicates (2xx deliveries beyond the first
//     of an event), drain_s (kill → every acked event delivered).
//
// Progress goes to stderr; a table and, as the last line, one JSON object
// go to stdout. It exits non-zero when anything fails, an event is lost or
// a lane is reordered. Every process and the temp dir are removed at the
// end, also on error or Ctrl-C (-keep keeps the dir with the logs).

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/e2e/consultest"
	"github.com/rivora/rivora/e2e/creds"
	"github.com/rivora/rivora/e2e/jsdump"
	"github.com/rivora/rivora/e2e/process"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk"
)

type failoverFlags struct {
	bin              string
	partitions       int
	agents           int
	dests            int
	lanes            int
	eventsPerLane    int
	payload          int
	beforeKill       time.Duration
	publishAfterKill time.Duration
	partnerDelay     time.Duration
	rate             float64
	sessionTTL       time.Duration
	lockDelay        time.Duration
	drainTimeout     time.Duration
	timeout          time.Duration
	keep             bool
}

func runFailover(args []string) error {
	fs := flag.NewFlagSet("failover", flag.ExitOnError)
	var f failoverFlags
	fs.StringVar(&f.bin, "bin", "", "rivora binary to run (default: go build ./cmd/rivora into the temp dir)")
	fs.IntVar(&f.partitions, "partitions", 8, "controlplane --partitions")
	fs.IntVar(&f.agents, "agents", 3, "agents in the cell (one is killed)")
	fs.IntVar(&f.dests, "dests", 4, "destinations, alternately on the victim's and the survivors' partitions")
	fs.IntVar(&f.lanes, "lanes", 50, "lanes per destination")
	fs.IntVar(&f.eventsPerLane, "events-per-lane", 20, "events per lane, published one after another (half before the kill, half during the failover)")
	fs.IntVar(&f.payload, "payload", 128, "payload bytes per event")
	fs.DurationVar(&f.beforeKill, "before-kill", 5*time.Second, "the first half of each lane's events is spread over this long; then the victim is killed")
	fs.DurationVar(&f.publishAfterKill, "publish-after-kill", 12*time.Second, "the second half of each lane's events is spread over this long after the kill")
	fs.DurationVar(&f.partnerDelay, "partner-delay", 5*time.Millisecond, "the partner answers 200 after this long")
	fs.Float64Var(&f.rate, "rate", 2000, "each destination's rate_per_second (burst: half of it)")
	fs.DurationVar(&f.sessionTTL, "session-ttl", 10*time.Second, "agent --session-ttl")
	fs.DurationVar(&f.lockDelay, "lock-delay", 5*time.Second, "agent --lock-delay")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", 60*time.Second, "how long after the last ack every acked event must be delivered")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Minute, "fail when the whole bench takes longer")
	fs.BoolVar(&f.keep, "keep", false, "keep the temp dir (process logs, Consul and agent data)")
	fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case f.partitions < 1, f.agents < 2, f.dests < 1, f.lanes < 1:
		return errors.New("need -partitions >= 1, -agents >= 2, -dests >= 1, -lanes >= 1")
	case f.eventsPerLane < 2:
		return errors.New("-events-per-lane must be at least 2 (half before the kill, half after)")
	case f.beforeKill < 0 || f.publishAfterKill < 0:
		return errors.New("-before-kill and -publish-after-kill must not be negative")
	case f.payload < 16 || f.rate <= 0:
		return errors.New("-payload must be at least 16 and -rate positive")
	}
	fmt.Fprintf(os.Stderr, "bench failover: GOMAXPROCS=%d NumCPU=%d agents=%d partitions=%d dests=%d lanes=%d/dest events/lane=%d\n",
		runtime.GOMAXPROCS(0), runtime.NumCPU(), f.agents, f.partitions, f.dests, f.lanes, f.eventsPerLane)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	err := f.run(ctx)
	if err != nil && ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("overran -timeout %s: %w", f.timeout, err)
		}
		return fmt.Errorf("interrupted: %w", err)
	}
	return err
}

// ---------------------------------------------------------------------------
// processes

// foProc is one rivora process of the cell, named as the bench knows it
// ("controlplane", "a1").
type foProc struct {
	*proc
	nats string // agents: the embedded NATS server's client address
}

func startFoProc(bin, name, addr, logPath string, args []string) (*foProc, error) {
	p, err := startProc(bin, name, addr, logPath, args, true)
	if err != nil {
		return nil, err
	}
	return &foProc{proc: p}, nil
}

// stop is proc.stop, also for a process that never started (nil).
func (p *foProc) stop(limit time.Duration) {
	if p != nil {
		p.proc.stop(limit)
	}
}

// foCell is Consul, a control plane and the agents.
type foCell struct {
	root   string
	consul *consultest.Server
	cp     *foProc
	agents []*foProc
	admin  rivorav1connect.AdminServiceClient
	// natsPassword opens the agents' embedded NATS (from the cell token).
	natsPassword string
}

func (c *foCell) agent(name string) *foProc {
	for _, a := range c.agents {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// stop stops the agents (in parallel), the control plane, then Consul.
func (c *foCell) stop() {
	var wg sync.WaitGroup
	for _, a := range c.agents {
		wg.Add(1)
		go func() { defer wg.Done(); a.stop(15 * time.Second) }()
	}
	wg.Wait()
	c.cp.stop(15 * time.Second)
	if c.consul != nil {
		c.consul.Stop()
	}
}

// died reports the first process that exited on its own.
func (c *foCell) died() error {
	for _, p := range append([]*foProc{c.cp}, c.agents...) {
		if p == nil {
			continue
		}
		if err := p.diedErr(); err != nil {
			return err
		}
	}
	return nil
}

var logLevelRE = regexp.MustCompile(`level=(WARN|ERROR)`)

// problems prints each process's WARN and ERROR lines (the last max of
// each) to stderr.
func (c *foCell) problems(limit int) {
	for _, p := range append([]*foProc{c.cp}, c.agents...) {
		if p == nil {
			continue
		}
		b, err := os.ReadFile(p.LogPath)
		if err != nil {
			continue
		}
		var lines []string
		for line := range strings.Lines(string(b)) {
			if logLevelRE.MatchString(line) || strings.Contains(line, "panic") {
				lines = append(lines, strings.TrimRight(line, "\n"))
			}
		}
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(os.Stderr, "---- %s: %d WARN/ERROR lines (%s), last %d ----\n", p.Name, len(lines), p.LogPath, min(limit, len(lines)))
		for _, l := range lines[max(0, len(lines)-limit):] {
			fmt.Fprintln(os.Stderr, l)
		}
	}
}

// dumpJetStream prints every stream's and consumer's replica state, as
// the agent's embedded NATS server sees it, to stderr (diagnosis of lost
// events).
func (c *foCell) dumpJetStream(ctx context.Context, agent string) {
	jsdump.Dump(ctx, os.Stderr, "nats://"+c.agent(agent).nats, nats.UserInfo(natsd.User, c.natsPassword))
}

// ownership is one GetConfigStatus sample.
type ownership struct {
	healthy map[string]bool
	owned   map[string][]uint32 // agent → partitions it holds the lock of
}

func (c *foCell) ownership(ctx context.Context) (ownership, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := c.admin.GetConfigStatus(cctx, connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
	if err != nil {
		return ownership{}, err
	}
	o := ownership{healthy: map[string]bool{}, owned: map[string][]uint32{}}
	for _, a := range resp.Msg.GetAgents() {
		o.healthy[a.GetName()] = a.GetHealthy()
		o.owned[a.GetName()] = slices.Sorted(slices.Values(a.GetPartitions()))
	}
	return o, nil
}

// owners maps each partition to the healthy agents other than exclude
// listing it.
func (o ownership) owners(exclude string) map[uint32][]string {
	out := map[uint32][]string{}
	for name, ps := range o.owned {
		if name == exclude || !o.healthy[name] {
			continue
		}
		for _, p := range ps {
			out[p] = append(out[p], name)
		}
	}
	return out
}

// complete: every partition is owned by exactly one healthy agent other
// than exclude.
func (o ownership) complete(partitions int, exclude string) bool {
	owners := o.owners(exclude)
	for p := range partitions {
		if len(owners[uint32(p)]) != 1 {
			return false
		}
	}
	return true
}

func (o ownership) String() string {
	names := slices.Sorted(maps.Keys(o.owned))
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteString("; ")
		}
		h := ""
		if !o.healthy[n] {
			h = " (unhealthy)"
		}
		fmt.Fprintf(&b, "%s%s: %v", n, h, o.owned[n])
	}
	return b.String()
}

func (o ownership) busiest() string {
	best := ""
	for name, ps := range o.owned {
		if !o.healthy[name] {
			continue
		}
		if best == "" || len(ps) > len(o.owned[best]) || (len(ps) == len(o.owned[best]) && name < best) {
			best = name
		}
	}
	return best
}

// ---------------------------------------------------------------------------
// the partner

// ---------------------------------------------------------------------------
// the load

// foLoad is what was published: per lane, event ids in ack order.
type foLoad struct {
	mu      sync.Mutex
	byLane  map[string][]string // destination/customer/lane → ids
	ackedAt map[string]time.Time
	destOf  map[string]string
	acked   atomic.Int64
	errs    atomic.Int64
	lastAck atomic.Int64 // unix nanos
	errMu   sync.Mutex
	errList []string
}

func (l *foLoad) add(dest, lane, id string) {
	now := time.Now()
	l.mu.Lock()
	l.byLane[lane] = append(l.byLane[lane], id)
	l.ackedAt[id] = now
	l.destOf[id] = dest
	l.mu.Unlock()
	l.acked.Add(1)
	l.lastAck.Store(now.UnixNano())
}

func (l *foLoad) fail(err error) {
	l.errs.Add(1)
	l.errMu.Lock()
	if len(l.errList) < 5 {
		l.errList = append(l.errList, err.Error())
	}
	l.errMu.Unlock()
}

// ---------------------------------------------------------------------------
// the run

func (f *failoverFlags) run(ctx context.Context) (err error) {
	root, err := os.MkdirTemp("", "rivora-failover-")
	if err != nil {
		return err
	}
	c := &foCell{root: root}
	defer func() {
		if err != nil && c.cp != nil {
			c.problems(20)
		}
		progress("stopping the cell")
		c.stop()
		if f.keep {
			progress("kept %s", root)
			return
		}
		if err != nil {
			progress("removing %s (rerun with -keep to keep the logs)", root)
		}
		os.RemoveAll(root)
	}()

	if f.bin, err = buildRivora(ctx, f.bin, root); err != nil {
		return err
	}

	// 1. Consul.
	consulDir := filepath.Join(root, "consul")
	if err := os.MkdirAll(consulDir, 0o755); err != nil {
		return err
	}
	progress("starting consul %s (data in %s)", consultest.Version, consulDir)
	t0 := time.Now()
	launched := make(chan error, 1)
	go func() {
		s, err := consultest.Launch(consulDir, func(format string, args ...any) { progress("consul: "+format, args...) })
		c.consul = s // read only after launched
		launched <- err
	}()
	tick := time.NewTicker(30 * time.Second)
	for waiting := true; waiting; {
		select {
		case err := <-launched:
			if err != nil {
				return fmt.Errorf("consul: %w", err)
			}
			waiting = false
		case <-tick.C:
			progress("still waiting for consul (%s; building it takes 10–20 minutes the first time)", time.Since(t0).Round(time.Second))
		case <-ctx.Done():
			// Consul's start is not cancellable: wait for it, then stop it.
			progress("interrupted while consul starts; waiting for it to stop it")
			if err := <-launched; err == nil {
				c.consul.Stop()
			}
			c.consul = nil
			return ctx.Err()
		}
	}
	tick.Stop()
	progress("consul ready on %s in %s", c.consul.HTTPAddr, time.Since(t0).Round(time.Millisecond))

	// 2. Control plane and agents.
	var portErr error
	port := func() string {
		p, err := freePort()
		portErr = cmp.Or(portErr, err)
		return "127.0.0.1:" + strconv.Itoa(p)
	}
	cpAddr := port()
	if portErr != nil {
		return portErr
	}
	cpState := filepath.Join(root, "controlplane")
	cellToken, err := creds.WriteCellToken(root)
	if err != nil {
		return err
	}
	cell, err := auth.LoadCellToken(cellToken)
	if err != nil {
		return err
	}
	c.natsPassword = cell.Derive("nats")
	c.cp, err = startFoProc(f.bin, "controlplane", cpAddr, filepath.Join(root, "controlplane.log"), []string{"controlplane",
		"--listen", cpAddr, "--consul", c.consul.URL(), "--partitions", strconv.Itoa(f.partitions), "--state-dir", cpState,
		"--cell-token-file", cellToken, "--allow-destination-cidr", "127.0.0.0/8"})
	if err != nil {
		return err
	}
	if _, err := c.cp.waitHealthy(ctx, 60*time.Second, 100*time.Millisecond); err != nil {
		return err
	}
	hc := &http.Client{Transport: withBearer(nil), Timeout: 15 * time.Second}
	c.admin = rivorav1connect.NewAdminServiceClient(hc, c.cp.url())
	if err := f.waitLeader(ctx, c); err != nil {
		return err
	}

	type agentPorts struct{ api, client, cluster string }
	ports := make([]agentPorts, f.agents)
	var routes []string
	for i := range ports {
		ports[i] = agentPorts{port(), port(), port()}
		routes = append(routes, "nats://"+ports[i].cluster)
	}
	if portErr != nil {
		return portErr
	}
	startedAgents := time.Now()
	for i, p := range ports {
		name := "a" + strconv.Itoa(i+1)
		a, err := startFoProc(f.bin, name, p.api, filepath.Join(root, name+".log"), []string{"agent",
			"--name", name, "--listen", p.api, "--controlplane", c.cp.url(), "--consul", c.consul.URL(),
			"--data-dir", filepath.Join(root, name),
			"--nats-listen", p.client, "--nats-cluster", p.cluster, "--nats-routes", strings.Join(routes, ","),
			"--session-ttl", f.sessionTTL.String(), "--lock-delay", f.lockDelay.String(),
			// No event of this bench dies: each agent's archive may stay
			// local (a real cell shares one S3/MinIO archive).
			"--allow-local-archive", "--cell-token-file", cellToken, "--allow-destination-cidr", "127.0.0.0/8"})
		if err != nil {
			return err
		}
		registerAdminToken(cpState, "http://"+p.api)
		a.nats = p.client
		c.agents = append(c.agents, a)
	}
	for _, a := range c.agents {
		if _, err := a.waitHealthy(ctx, 90*time.Second, 100*time.Millisecond); err != nil {
			return err
		}
		progress("%s healthy on %s (%s after start)", a.Name, a.Addr, time.Since(startedAgents).Round(time.Millisecond))
	}
	own, err := f.waitOwned(ctx, c, "", 60*time.Second)
	if err != nil {
		return err
	}
	progress("all %d partitions owned %s after the agents started: %s", f.partitions, time.Since(startedAgents).Round(time.Millisecond), own)

	// Victim and destinations.
	victim := own.busiest()
	var survivors []string
	for _, a := range c.agents {
		if a.Name != victim {
			survivors = append(survivors, a.Name)
		}
	}
	victimParts := map[int]bool{}
	for _, p := range own.owned[victim] {
		victimParts[int(p)] = true
	}
	dests := f.pickDestinations(victimParts)
	part, err := startPartner(partnerOptions{delay: f.partnerDelay, keepLog: true})
	if err != nil {
		return err
	}
	defer part.close()
	limits := &rivorav1.Limits{RatePerSecond: f.rate, Burst: int32(max(f.rate/2, 1)), MaxAttempts: 10000,
		MaxInFlight: int32(max(64, f.lanes+8))}
	for _, d := range dests {
		if err := createDestination(ctx, c.admin, d, part.destURL(d), limits); err != nil {
			return err
		}
	}
	var destDesc []string
	for _, d := range dests {
		p := lanes.Partition(d, f.partitions)
		who := "survivor"
		if victimParts[p] {
			who = victim
		}
		destDesc = append(destDesc, fmt.Sprintf("%s→p%d (%s)", d, p, who))
	}
	progress("victim %s (owns %v); destinations %s", victim, own.owned[victim], strings.Join(destDesc, ", "))

	// 3. Load through the survivors.
	clients := make([]*sdk.Client, len(survivors))
	for i, name := range survivors {
		clients[i] = sdk.New(c.agent(name).url(), sdk.WithHTTPClient(&http.Client{Transport: withBearer(nil)}), sdk.WithRetry(30, 200*time.Millisecond), sdk.WithAttemptTimeout(10*time.Second))
	}
	load := &foLoad{byLane: map[string][]string{}, ackedAt: map[string]time.Time{}, destOf: map[string]string{}}
	totalLanes := len(dests) * f.lanes
	half := f.eventsPerLane / 2
	planned := int64(totalLanes * f.eventsPerLane)
	killed := make(chan struct{})
	var killAt time.Time // written before close(killed)
	before := f.beforeKill / time.Duration(half)
	after := f.publishAfterKill / time.Duration(f.eventsPerLane-half)
	body := payload(f.payload, 11)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var pubWG sync.WaitGroup
	pubStart := time.Now()
	for di, d := range dests {
		for k := range f.lanes {
			li := di*f.lanes + k
			pubWG.Add(1)
			go func() {
				defer pubWG.Done()
				laneKey := fmt.Sprintf("user-%03d", k)
				lane := d + "/cust/" + laneKey
				client := clients[li%len(clients)]
				// Lanes take turns: lane li publishes at li/totalLanes
				// of each interval.
				frac := func(d time.Duration) time.Duration { return d * time.Duration(li) / time.Duration(totalLanes) }
				for e := range f.eventsPerLane {
					if e == half {
						select {
						case <-killed:
						case <-loadCtx.Done():
							return
						}
					}
					due := pubStart.Add(frac(before) + before*time.Duration(e))
					if e >= half {
						due = killAt.Add(frac(after) + after*time.Duration(e-half))
					}
					if w := time.Until(due); w > 0 {
						select {
						case <-time.After(w):
						case <-loadCtx.Done():
							return
						}
					}
					id, err := client.Publish(loadCtx, sdk.Event{Destination: d, Customer: "cust", Lane: laneKey,
						Type: "bench.failover", Payload: body, IdempotencyKey: fmt.Sprintf("%s-%s-%03d", d, laneKey, e)})
					if err != nil {
						if loadCtx.Err() != nil {
							return
						}
						load.fail(fmt.Errorf("publish %s #%d: %w", lane, e, err))
						continue
					}
					load.add(d, lane, id)
				}
			}()
		}
	}
	pubDone := make(chan struct{})
	go func() { pubWG.Wait(); close(pubDone) }()
	progress("publishing %d events over %d lanes through %v: %d per lane over %s, then the kill, then %d more per lane over %s",
		planned, totalLanes, survivors, half, f.beforeKill, f.eventsPerLane-half, f.publishAfterKill)

	// 4. Kill after -before-kill, once the victim delivered something.
	sawVictim := false
	victimDelivered := func() bool {
		part.mu.Lock()
		defer part.mu.Unlock()
		for _, d := range part.log {
			sawVictim = sawVictim || (d.status == http.StatusOK && d.agent == victim)
		}
		return sawVictim
	}
	hasVictimDest := false
	for _, d := range dests {
		hasVictimDest = hasVictimDest || victimParts[lanes.Partition(d, f.partitions)]
	}
	lastLog := time.Now()
	killDeadline := pubStart.Add(f.beforeKill + 60*time.Second)
	for time.Since(pubStart) < f.beforeKill || (hasVictimDest && !victimDelivered()) {
		if err := c.died(); err != nil {
			return err
		}
		if time.Now().After(killDeadline) {
			return fmt.Errorf("%s did not deliver anything %s into publishing (%d acked, %d delivered, %d publish errors: %v)",
				victim, time.Since(pubStart).Round(time.Second), load.acked.Load(), part.uniq.Load(), load.errs.Load(), load.errList)
		}
		if time.Since(lastLog) >= 2*time.Second {
			lastLog = time.Now()
			progress("acked %d, delivered %d", load.acked.Load(), part.uniq.Load())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	// The victim's partitions right before the kill.
	if o, err := c.ownership(ctx); err == nil {
		victimParts = map[int]bool{}
		for _, p := range o.owned[victim] {
			victimParts[int(p)] = true
		}
		if b := o.busiest(); b != victim {
			progress("warning: %s now owns the most partitions (%s); killing %s as planned", b, o, victim)
		}
	}
	vp := slices.Sorted(maps.Keys(victimParts))
	ackedAtKill, deliveredAtKill := load.acked.Load(), part.uniq.Load()
	killAt = time.Now()
	if err := c.agent(victim).kill9(); err != nil {
		return fmt.Errorf("kill -9 %s: %w", victim, err)
	}
	close(killed)
	progress("killed %s (kill -9, owned partitions %v) after %s of publishing: %d acked, %d delivered",
		victim, vp, killAt.Sub(pubStart).Round(time.Millisecond), ackedAtKill, deliveredAtKill)

	// 5. Ownership back, publishing done, everything delivered.
	var ownedAgain time.Duration
	var ownedAfter ownership
	var doubleOwned int
	lastLog = time.Now()
	for ownedAgain == 0 {
		if err := c.died(); err != nil {
			return err
		}
		o, err := c.ownership(ctx)
		if err == nil {
			for _, names := range o.owners(victim) {
				if len(names) > 1 {
					doubleOwned++
					progress("warning: a partition is listed as owned by %v: %s", names, o)
					break
				}
			}
			if o.complete(f.partitions, victim) {
				ownedAgain, ownedAfter = time.Since(killAt), o
				break
			}
		}
		if time.Since(killAt) > f.lockDelay+2*f.sessionTTL+30*time.Second {
			c.dumpJetStream(ctx, survivors[0])
			return fmt.Errorf("partitions not owned by the survivors %s after the kill (last: %v, error %v)",
				time.Since(killAt).Round(time.Second), o, err)
		}
		if time.Since(lastLog) >= 2*time.Second {
			lastLog = time.Now()
			progress("t+%4.1fs after kill: %s; acked %d, delivered %d", time.Since(killAt).Seconds(), o, load.acked.Load(), part.uniq.Load())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	progress("all partitions owned by survivors %.2f s after the kill: %s", ownedAgain.Seconds(), ownedAfter)

	for waiting := true; waiting; {
		select {
		case <-pubDone:
			waiting = false
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
			if err := c.died(); err != nil {
				return err
			}
			progress("t+%4.1fs after kill: acked %d/%d (%d publish errors), delivered %d", time.Since(killAt).Seconds(),
				load.acked.Load(), planned, load.errs.Load(), part.uniq.Load())
		}
	}
	lastAck := time.Unix(0, load.lastAck.Load())
	progress("publishing done: %d acked, %d publish errors, last ack %.1f s after the kill", load.acked.Load(), load.errs.Load(), lastAck.Sub(killAt).Seconds())

	load.mu.Lock()
	allIDs := make([]string, 0, len(load.ackedAt))
	for id := range load.ackedAt {
		allIDs = append(allIDs, id)
	}
	load.mu.Unlock()
	undelivered := func() []string {
		part.mu.Lock()
		defer part.mu.Unlock()
		var out []string
		for _, id := range allIDs {
			if _, ok := part.firstOK[id]; !ok {
				out = append(out, id)
			}
		}
		return out
	}
	drainDeadline := lastAck.Add(f.drainTimeout)
	var missing []string
	lastLog = time.Now()
	for {
		missing = undelivered()
		if len(missing) == 0 || time.Now().After(drainDeadline) {
			break
		}
		if err := c.died(); err != nil {
			return err
		}
		if time.Since(lastLog) >= 2*time.Second {
			lastLog = time.Now()
			progress("t+%4.1fs after kill: %d of %d acked events not delivered yet", time.Since(killAt).Seconds(), len(missing), len(allIDs))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Late duplicates (a redelivery of something already delivered) show
	// up shortly after; give them a moment.
	time.Sleep(time.Second)
	if len(missing) > 0 {
		c.dumpJetStream(ctx, survivors[0])
	}

	// 6. Figures.
	log := part.snapshot()
	part.mu.Lock()
	var drainedAt time.Time
	for _, id := range allIDs {
		if t, ok := part.firstOK[id]; ok && t.After(drainedAt) {
			drainedAt = t
		}
	}
	duplicates := 0
	for _, n := range part.okN {
		duplicates += n - 1
	}
	// Where the duplicates came from: destination and the agent of each
	// extra 2xx.
	dupBy := map[string]int{}
	seenOK := map[string]bool{}
	for _, d := range part.log {
		if d.status != http.StatusOK {
			continue
		}
		if seenOK[d.id] {
			dupBy[fmt.Sprintf("%s by %s", d.dest, d.agent)]++
		}
		seenOK[d.id] = true
	}
	badUA := slices.Clone(part.badUA)
	part.mu.Unlock()

	firstAfter := -1.0
	firstPart := map[int]time.Duration{} // victim partition → first survivor 2xx after the kill
	victimAfterKill := 0
	byAgent := map[string][2]int{} // agent → 2xx before, after the kill
	badUAn := 0
	for _, d := range log {
		if d.agent == "" {
			badUAn++
		}
		if d.status == http.StatusOK {
			n := byAgent[d.agent]
			if d.at.Before(killAt) {
				n[0]++
			} else {
				n[1]++
			}
			byAgent[d.agent] = n
		}
		if !d.at.After(killAt) {
			continue
		}
		if d.agent == victim {
			victimAfterKill++
			continue
		}
		p := lanes.Partition(d.dest, f.partitions)
		if d.status != http.StatusOK || !victimParts[p] || d.agent == "" {
			continue
		}
		if _, ok := firstPart[p]; !ok {
			firstPart[p] = d.at.Sub(killAt)
		}
		if firstAfter < 0 {
			firstAfter = d.at.Sub(killAt).Seconds()
		}
	}
	load.mu.Lock()
	byLane := load.byLane
	load.mu.Unlock()
	reordered, violations, violationSamples := laneOrder(log, byLane)
	drain := -1.0
	if len(missing) == 0 && !drainedAt.IsZero() {
		drain = max(drainedAt.Sub(killAt), 0).Seconds()
	}

	// Lost events, by destination and partition, for the report.
	lostBy := map[string]int{}
	for _, id := range missing {
		load.mu.Lock()
		d := load.destOf[id]
		load.mu.Unlock()
		lostBy[fmt.Sprintf("%s (p%d)", d, lanes.Partition(d, f.partitions))]++
	}
	attempted := map[string]int{}
	for _, d := range log {
		attempted[d.id]++
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "failover: %d agents, %d partitions, Consul session TTL %s, lock-delay %s; %d destinations × %d lanes × %d events, partner answers 200 after %s\n",
		f.agents, f.partitions, f.sessionTTL, f.lockDelay, len(dests), f.lanes, f.eventsPerLane, f.partnerDelay)
	fmt.Fprintln(tw, "measure\tvalue\tnote")
	fmt.Fprintf(tw, "victim\t%s\tkill -9 after %d acked / %d delivered; it owned partitions %v\n", victim, ackedAtKill, deliveredAtKill, vp)
	fmt.Fprintf(tw, "destinations\t%s\t\n", strings.Join(destDesc, ", "))
	fmt.Fprintf(tw, "first_delivery_after_kill_s\t%.2f s\tkill → first 2xx by a survivor of an event on a partition the victim owned\n", firstAfter)
	for _, p := range vp {
		var on []string
		for _, d := range dests {
			if lanes.Partition(d, f.partitions) == p {
				on = append(on, d)
			}
		}
		switch t, ok := firstPart[p]; {
		case ok:
			fmt.Fprintf(tw, "  partition %d\t%.2f s\tfirst survivor delivery after the kill (%s)\n", p, t.Seconds(), strings.Join(on, ", "))
		case len(on) == 0:
			fmt.Fprintf(tw, "  partition %d\t-\tno destination on it\n", p)
		default:
			fmt.Fprintf(tw, "  partition %d\t-\tNO survivor delivery after the kill (%s)\n", p, strings.Join(on, ", "))
		}
	}
	fmt.Fprintf(tw, "owned_again_s\t%.2f s\tkill → all %d partitions owned by healthy survivors (polled every 100ms): %s\n", ownedAgain.Seconds(), f.partitions, ownedAfter)
	fmt.Fprintf(tw, "events_acked\t%d\tof %d published (%d publish errors after SDK retries)\n", len(allIDs), planned, load.errs.Load())
	fmt.Fprintf(tw, "events_lost\t%d\tacked, not delivered 2xx within %s of the last ack\n", len(missing), f.drainTimeout)
	fmt.Fprintf(tw, "lanes_reordered\t%d\tof %d lanes (%d out-of-order requests)\n", reordered, len(byLane), violations)
	var dupDesc []string
	for _, k := range slices.Sorted(maps.Keys(dupBy)) {
		dupDesc = append(dupDesc, fmt.Sprintf("%s: %d", k, dupBy[k]))
	}
	fmt.Fprintf(tw, "duplicates\t%d\t2xx deliveries beyond the first of an event (%d requests in all) %s\n", duplicates, len(log), strings.Join(dupDesc, ", "))
	fmt.Fprintf(tw, "drain_s\t%.2f s\tkill → every acked event delivered (%.2f s after the last ack)\n", drain, max(drainedAt.Sub(lastAck), 0).Seconds())
	fmt.Fprintf(tw, "victim requests after kill\t%d\tmust be 0\n", victimAfterKill)
	fmt.Fprintf(tw, "unparsable user-agent\t%d\twant rivora/<version> (<agent>)\n", badUAn)
	for _, name := range slices.Sorted(maps.Keys(byAgent)) {
		n := byAgent[name]
		fmt.Fprintf(tw, "  2xx by %q\t%d before, %d after the kill\t\n", name, n[0], n[1])
	}
	fmt.Fprintf(tw, "double ownership seen\t%d\tsamples listing one partition under two healthy survivors\n", doubleOwned)
	tw.Flush()
	for _, e := range load.errList {
		fmt.Fprintf(os.Stderr, "publish error: %s\n", e)
	}
	for _, s := range violationSamples {
		fmt.Fprintf(os.Stderr, "reorder: %s\n", s)
	}
	for _, ua := range badUA {
		fmt.Fprintf(os.Stderr, "unparsable user-agent: %q\n", ua)
	}
	if len(missing) > 0 {
		for k, n := range lostBy {
			fmt.Fprintf(os.Stderr, "lost: %d events of %s\n", n, k)
		}
		for _, id := range missing[:min(10, len(missing))] {
			load.mu.Lock()
			at := load.ackedAt[id]
			load.mu.Unlock()
			fmt.Fprintf(os.Stderr, "lost: %s acked %+.2f s from the kill, %d requests for it\n", id, at.Sub(killAt).Seconds(), attempted[id])
		}
	}
	if err := printJSON(map[string]float64{
		"first_delivery_after_kill_s": round(firstAfter, 3),
		"owned_again_s":               round(ownedAgain.Seconds(), 3),
		"events_acked":                float64(len(allIDs)),
		"events_lost":                 float64(len(missing)),
		"lanes_reordered":             float64(reordered),
		"duplicates":                  float64(duplicates),
		"drain_s":                     round(drain, 3),
		"publish_errors":              float64(load.errs.Load()),
		"victim_partitions":           float64(len(vp)),
	}, []string{"first_delivery_after_kill_s", "owned_again_s", "events_acked", "events_lost", "lanes_reordered",
		"duplicates", "drain_s", "publish_errors", "victim_partitions"}); err != nil {
		return err
	}
	var fails []string
	if len(missing) > 0 {
		fails = append(fails, fmt.Sprintf("%d acked events lost", len(missing)))
	}
	if reordered > 0 {
		fails = append(fails, fmt.Sprintf("%d lanes reordered", reordered))
	}
	if victimAfterKill > 0 {
		fails = append(fails, fmt.Sprintf("%d requests from the killed agent after the kill", victimAfterKill))
	}
	if firstAfter < 0 && hasVictimDest {
		fails = append(fails, "no survivor delivered an event of the victim's partitions")
	}
	if len(fails) > 0 {
		return errors.New(strings.Join(fails, "; "))
	}
	return nil
}

// waitLeader waits until the control plane answers the admin API (it
// leads once it holds its Consul lock).
func (f *failoverFlags) waitLeader(ctx context.Context, c *foCell) error {
	err := poll(ctx, 60*time.Second, 100*time.Millisecond, "control plane admin API answering", func() error {
		if _, err := c.ownership(ctx); err != nil {
			if died := c.cp.diedErr(); died != nil {
				return process.GiveUp(died)
			}
			return err
		}
		return nil
	})
	if err != nil && c.cp.diedErr() == nil {
		return fmt.Errorf("%w; log tail:\n%s", err, c.cp.Tail(8<<10))
	}
	return err
}

// waitOwned waits until every partition is owned by exactly one healthy
// agent other than exclude.
func (f *failoverFlags) waitOwned(ctx context.Context, c *foCell, exclude string, limit time.Duration) (ownership, error) {
	var o ownership
	lastLog := time.Now()
	err := poll(ctx, limit, 100*time.Millisecond, "partitions all owned by healthy agents", func() error {
		if err := c.died(); err != nil {
			return process.GiveUp(err)
		}
		var err error
		if o, err = c.ownership(ctx); err == nil && o.complete(f.partitions, exclude) {
			return nil
		}
		if time.Since(lastLog) >= 3*time.Second {
			lastLog = time.Now()
			progress("waiting for ownership: %v (error %v)", o, err)
		}
		return fmt.Errorf("%v, error %v", o, err)
	})
	return o, err
}

// pickDestinations returns f.dests ids, alternately on the victim's
// partitions and on the others', on distinct partitions as far as there
// are.
func (f *failoverFlags) pickDestinations(victimParts map[int]bool) []string {
	var ids []string
	used := map[int]bool{}
	for i := 0; len(ids) < f.dests; i++ {
		wantVictim := len(ids)%2 == 0
		id := fmt.Sprintf("fo%02d", i)
		p := lanes.Partition(id, f.partitions)
		relaxed := i > 1000*f.dests // give up on the preferences
		if !relaxed {
			if victimParts[p] != wantVictim && len(victimParts) > 0 && len(victimParts) < f.partitions {
				continue
			}
			if used[p] && len(used) < f.partitions {
				// Reuse a partition only once every wanted one is taken.
				free := false
				for q := range f.partitions {
					if !used[q] && victimParts[q] == wantVictim {
						free = true
					}
				}
				if free {
					continue
				}
			}
		}
		used[p] = true
		ids = append(ids, id)
	}
	return ids
}

// laneOrder counts lanes where an event reached the partner while an
// earlier-acked event of the lane had not been delivered 2xx yet, and all
// such requests. Requests for ids never acked are ignored.
func laneOrder(log []delivery, byLane map[string][]string) (lanesBad, violations int, samples []string) {
	index := map[string]int{}
	laneOf := map[string]string{}
	for lane, ids := range byLane {
		for i, id := range ids {
			index[id], laneOf[id] = i, lane
		}
	}
	frontier := map[string]int{}
	delivered := map[string]bool{}
	bad := map[string]bool{}
	for _, d := range log {
		i, ok := index[d.id]
		if !ok {
			continue
		}
		lane := laneOf[d.id]
		if lane != d.lane {
			violations++
			bad[lane] = true
			if len(samples) < 10 {
				samples = append(samples, fmt.Sprintf("event %s of lane %s arrived with the headers of lane %s", d.id, lane, d.lane))
			}
		}
		f := frontier[lane]
		if i > f {
			violations++
			bad[lane] = true
			if len(samples) < 10 {
				samples = append(samples, fmt.Sprintf("lane %s: event #%d (%s) reached the partner at %s from %q while #%d (%s) was not delivered",
					lane, i, d.id, d.at.Format("15:04:05.000"), d.agent, f, byLane[lane][f]))
			}
		}
		if d.status == http.StatusOK {
			delivered[d.id] = true
			ids := byLane[lane]
			for f < len(ids) && delivered[ids[f]] {
				f++
			}
			frontier[lane] = f
		}
	}
	return len(bad), violations, samples
}
