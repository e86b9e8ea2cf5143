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
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/e2e/consultest"
	"github.com/rivora/rivora/e2e/jsdump"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
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

// waitLeader waits until the control plane answers the admin API (it
// leads once it holds its Consul lock).
func (f *failoverFlags) waitLeader(ctx context.Context, c *foCell) error {
	err := until(ctx, 60*time.Second, 100*time.Millisecond, "control plane admin API answering", func() error {
		if _, err := c.ownership(ctx); err != nil {
			if died := c.cp.diedErr(); died != nil {
				return poll.GiveUp(died)
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
	err := until(ctx, limit, 100*time.Millisecond, "partitions all owned by healthy agents", func() error {
		if err := c.died(); err != nil {
			return poll.GiveUp(err)
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
func laneOrder(log []partner.Request, byLane map[string][]string) (lanesBad, violations int, samples []string) {
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
		i, ok := index[d.ID]
		if !ok {
			continue
		}
		lane := laneOf[d.ID]
		if lane != d.Lane {
			violations++
			bad[lane] = true
			if len(samples) < 10 {
				samples = append(samples, fmt.Sprintf("event %s of lane %s arrived with the headers of lane %s", d.ID, lane, d.Lane))
			}
		}
		f := frontier[lane]
		if i > f {
			violations++
			bad[lane] = true
			if len(samples) < 10 {
				samples = append(samples, fmt.Sprintf("lane %s: event #%d (%s) reached the partner at %s from %q while #%d (%s) was not delivered",
					lane, i, d.ID, d.At.Format("15:04:05.000"), d.Agent, f, byLane[lane][f]))
			}
		}
		if d.Status == http.StatusOK {
			delivered[d.ID] = true
			ids := byLane[lane]
			for f < len(ids) && delivered[ids[f]] {
				f++
			}
			frontier[lane] = f
		}
	}
	return len(bad), violations, samples
}
