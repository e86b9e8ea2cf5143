package main

// The failover run, phase by phase: Consul, the cell, the victim and its
// destinations, the load, the kill, ownership back, the drain, the
// figures. foRun carries what one phase hands the next.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/rivora/rivora/e2e/consultest"
	"github.com/rivora/rivora/e2e/creds"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// foRun is one failover run.
type foRun struct {
	*failoverFlags
	c    *foCell
	part *partner.Partner

	// the victim and the destinations (pickVictim)
	victim        string
	survivors     []string
	victimParts   map[int]bool // partitions the victim owns (right before the kill)
	dests         []string
	destDesc      []string
	hasVictimDest bool

	// the load (publish)
	load     *foLoad
	planned  int64
	pubStart time.Time
	killed   chan struct{} // closed at the kill
	killAt   time.Time     // written before close(killed)
	pubDone  chan struct{} // closed once every lane published
	body     []byte        // every event's payload

	// the kill and after
	vp                           []int // victimParts, sorted
	ackedAtKill, deliveredAtKill int64
	ownedAgain                   time.Duration
	ownedAfter                   ownership
	doubleOwned                  int
	lastAck                      time.Time
	allIDs                       []string // acked
	missing                      []string // acked, not delivered at the end of the drain
}

func (f *failoverFlags) run(ctx context.Context) (err error) {
	root, err := os.MkdirTemp("", "rivora-failover-")
	if err != nil {
		return err
	}
	r := &foRun{failoverFlags: f, c: &foCell{root: root}}
	defer func() {
		if err != nil && r.c.cp != nil {
			r.c.problems(20)
		}
		progress("stopping the cell")
		r.c.stop()
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
	if err := r.startConsul(ctx); err != nil {
		return err
	}
	own, err := r.startCell(ctx)
	if err != nil {
		return err
	}
	r.pickVictim(own)
	if r.part, err = partner.Start(partner.Options{Delay: f.partnerDelay, HangUpLoses: true}); err != nil {
		return err
	}
	defer r.part.Close()
	if err := r.createDestinations(ctx, own); err != nil {
		return err
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	r.publish(loadCtx)
	steps := []func(context.Context) error{r.kill, r.waitOwnedAgain, r.waitPublished, r.drain}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return r.report(r.figures())
}

// startConsul starts the cell's Consul server (building it the first
// time, which takes long: progress every 30 s).
func (r *foRun) startConsul(ctx context.Context) error {
	c := r.c
	consulDir := filepath.Join(c.root, "consul")
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
	defer tick.Stop()
	for {
		select {
		case err := <-launched:
			if err != nil {
				return fmt.Errorf("consul: %w", err)
			}
			progress("consul ready on %s in %s", c.consul.HTTPAddr, time.Since(t0).Round(time.Millisecond))
			return nil
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
}

// startCell starts the control plane and the agents and waits until every
// partition is owned.
func (r *foRun) startCell(ctx context.Context) (ownership, error) {
	f, c := r.failoverFlags, r.c
	var portErr error
	port := func() string {
		p, err := freePort()
		portErr = cmp.Or(portErr, err)
		return "127.0.0.1:" + strconv.Itoa(p)
	}
	cpAddr := port()
	if portErr != nil {
		return ownership{}, portErr
	}
	cellToken, err := r.startControlPlane(ctx, cpAddr)
	if err != nil {
		return ownership{}, err
	}
	type agentPorts struct{ api, client, cluster string }
	ports := make([]agentPorts, f.agents)
	var routes []string
	for i := range ports {
		ports[i] = agentPorts{port(), port(), port()}
		routes = append(routes, "nats://"+ports[i].cluster)
	}
	if portErr != nil {
		return ownership{}, portErr
	}
	startedAgents := time.Now()
	for i, p := range ports {
		name := "a" + strconv.Itoa(i+1)
		a, err := startFoProc(f.bin, name, p.api, filepath.Join(c.root, name+".log"), []string{"agent",
			"--name", name, "--listen", p.api, "--controlplane", c.cp.url(), "--consul", c.consul.URL(),
			"--data-dir", filepath.Join(c.root, name),
			"--nats-listen", p.client, "--nats-cluster", p.cluster, "--nats-routes", strings.Join(routes, ","),
			"--session-ttl", f.sessionTTL.String(), "--lock-delay", f.lockDelay.String(),
			// No event of this bench dies: each agent's archive may stay
			// local (a real cell shares one S3/MinIO archive).
			"--allow-local-archive", "--cell-token-file", cellToken, "--allow-destination-cidr", "127.0.0.0/8"})
		if err != nil {
			return ownership{}, err
		}
		registerAdminToken(filepath.Join(c.root, "controlplane"), "http://"+p.api)
		a.nats = p.client
		c.agents = append(c.agents, a)
	}
	for _, a := range c.agents {
		if _, err := a.waitHealthy(ctx, 90*time.Second, 100*time.Millisecond); err != nil {
			return ownership{}, err
		}
		progress("%s healthy on %s (%s after start)", a.Name, a.Addr, time.Since(startedAgents).Round(time.Millisecond))
	}
	own, err := f.waitOwned(ctx, c, "", 60*time.Second)
	if err != nil {
		return ownership{}, err
	}
	progress("all %d partitions owned %s after the agents started: %s", f.partitions, time.Since(startedAgents).Round(time.Millisecond), own)
	return own, nil
}

// startControlPlane starts the control plane on addr and waits until it
// leads; it returns the cell token file the agents are started with.
func (r *foRun) startControlPlane(ctx context.Context, addr string) (string, error) {
	f, c := r.failoverFlags, r.c
	cellToken, err := creds.WriteCellToken(c.root)
	if err != nil {
		return "", err
	}
	cell, err := auth.LoadCellToken(cellToken)
	if err != nil {
		return "", err
	}
	c.natsPassword = cell.Derive("nats")
	c.cp, err = startFoProc(f.bin, "controlplane", addr, filepath.Join(c.root, "controlplane.log"), []string{"controlplane",
		"--listen", addr, "--consul", c.consul.URL(), "--partitions", strconv.Itoa(f.partitions), "--state-dir", filepath.Join(c.root, "controlplane"),
		"--cell-token-file", cellToken, "--allow-destination-cidr", "127.0.0.0/8"})
	if err != nil {
		return "", err
	}
	if _, err := c.cp.waitHealthy(ctx, 60*time.Second, 100*time.Millisecond); err != nil {
		return "", err
	}
	hc := &http.Client{Transport: withBearer(nil), Timeout: 15 * time.Second}
	c.admin = rivorav1connect.NewAdminServiceClient(hc, c.cp.url())
	return cellToken, f.waitLeader(ctx, c)
}

// pickVictim makes the agent owning the most partitions the victim, and
// picks destinations half of which hash to its partitions.
func (r *foRun) pickVictim(own ownership) {
	r.victim = own.busiest()
	for _, a := range r.c.agents {
		if a.Name != r.victim {
			r.survivors = append(r.survivors, a.Name)
		}
	}
	r.victimParts = map[int]bool{}
	for _, p := range own.owned[r.victim] {
		r.victimParts[int(p)] = true
	}
	r.dests = r.pickDestinations(r.victimParts)
	for _, d := range r.dests {
		p := lanes.Partition(d, r.partitions)
		who := "survivor"
		if r.victimParts[p] {
			who = r.victim
			r.hasVictimDest = true
		}
		r.destDesc = append(r.destDesc, fmt.Sprintf("%s→p%d (%s)", d, p, who))
	}
}

// createDestinations registers every destination at the partner.
func (r *foRun) createDestinations(ctx context.Context, own ownership) error {
	limits := &rivorav1.Limits{RatePerSecond: r.rate, Burst: int32(max(r.rate/2, 1)), MaxAttempts: 10000,
		MaxInFlight: int32(max(64, r.lanes+8))}
	for _, d := range r.dests {
		if err := createDestination(ctx, r.c.admin, d, r.part.DestURL(d), limits); err != nil {
			return err
		}
	}
	progress("victim %s (owns %v); destinations %s", r.victim, own.owned[r.victim], strings.Join(r.destDesc, ", "))
	return nil
}

// publish starts the load through the survivors: each lane publishes its
// events one after another, the first half spread over -before-kill, the
// rest (after the kill) over -publish-after-kill. pubDone closes when
// every lane is done or ctx ends.
func (r *foRun) publish(ctx context.Context) {
	clients := make([]*sdk.Client, len(r.survivors))
	for i, name := range r.survivors {
		clients[i] = sdk.New(r.c.agent(name).url(), sdk.WithHTTPClient(&http.Client{Transport: withBearer(nil)}), sdk.WithRetry(30, 200*time.Millisecond), sdk.WithAttemptTimeout(10*time.Second))
	}
	r.load = &foLoad{byLane: map[string][]string{}, ackedAt: map[string]time.Time{}, destOf: map[string]string{}}
	totalLanes := len(r.dests) * r.lanes
	half := r.eventsPerLane / 2
	r.planned = int64(totalLanes * r.eventsPerLane)
	r.killed = make(chan struct{})
	r.pubDone = make(chan struct{})
	r.body = payload(r.payload, 11)
	var wg sync.WaitGroup
	r.pubStart = time.Now()
	for di, d := range r.dests {
		for k := range r.lanes {
			li := di*r.lanes + k
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.publishLane(ctx, clients[li%len(clients)], d, k, li, totalLanes)
			}()
		}
	}
	go func() { wg.Wait(); close(r.pubDone) }()
	progress("publishing %d events over %d lanes through %v: %d per lane over %s, then the kill, then %d more per lane over %s",
		r.planned, totalLanes, r.survivors, half, r.beforeKill, r.eventsPerLane-half, r.publishAfterKill)
}

// publishLane publishes lane k of destination d (lane li of totalLanes:
// lanes take turns, lane li publishes at li/totalLanes of each interval).
func (r *foRun) publishLane(ctx context.Context, client *sdk.Client, d string, k, li, totalLanes int) {
	half := r.eventsPerLane / 2
	before := r.beforeKill / time.Duration(half)
	after := r.publishAfterKill / time.Duration(r.eventsPerLane-half)
	laneKey := fmt.Sprintf("user-%03d", k)
	lane := d + "/cust/" + laneKey
	frac := func(d time.Duration) time.Duration { return d * time.Duration(li) / time.Duration(totalLanes) }
	for e := range r.eventsPerLane {
		if e == half {
			select {
			case <-r.killed:
			case <-ctx.Done():
				return
			}
		}
		due := r.pubStart.Add(frac(before) + before*time.Duration(e))
		if e >= half {
			due = r.killAt.Add(frac(after) + after*time.Duration(e-half))
		}
		if w := time.Until(due); w > 0 {
			select {
			case <-time.After(w):
			case <-ctx.Done():
				return
			}
		}
		id, err := client.Publish(ctx, sdk.Event{Destination: d, Customer: "cust", Lane: laneKey,
			Type: "bench.failover", Payload: r.body, IdempotencyKey: fmt.Sprintf("%s-%s-%03d", d, laneKey, e)})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.load.fail(fmt.Errorf("publish %s #%d: %w", lane, e, err))
			continue
		}
		r.load.add(d, lane, id)
	}
}

// untilTime is until with an absolute deadline (one already past still
// checks once).
func untilTime(ctx context.Context, deadline time.Time, interval time.Duration, what string, check func() error) error {
	return until(ctx, max(time.Until(deadline), time.Nanosecond), interval, what, check)
}

// kill waits -before-kill, and until the victim delivered something, then
// kills it with SIGKILL.
func (r *foRun) kill(ctx context.Context) error {
	load, part := r.load, r.part
	sawVictim := false
	victimDelivered := func() bool {
		for _, d := range part.Requests() {
			sawVictim = sawVictim || (d.Status == http.StatusOK && d.Agent == r.victim)
		}
		return sawVictim
	}
	lastLog := time.Now()
	err := untilTime(ctx, r.pubStart.Add(r.beforeKill+60*time.Second), 5*time.Millisecond, "the victim delivering", func() error {
		if err := r.c.died(); err != nil {
			return poll.GiveUp(err)
		}
		if time.Since(r.pubStart) >= r.beforeKill && (!r.hasVictimDest || victimDelivered()) {
			return nil
		}
		if time.Since(lastLog) >= 2*time.Second {
			lastLog = time.Now()
			progress("acked %d, delivered %d", load.acked.Load(), part.Delivered())
		}
		return fmt.Errorf("%s did not deliver anything %s into publishing (%d acked, %d delivered, %d publish errors: %v)",
			r.victim, time.Since(r.pubStart).Round(time.Second), load.acked.Load(), part.Delivered(), load.errs.Load(), load.errList)
	})
	if err != nil {
		return err
	}
	// The victim's partitions right before the kill.
	if o, err := r.c.ownership(ctx); err == nil {
		r.victimParts = map[int]bool{}
		for _, p := range o.owned[r.victim] {
			r.victimParts[int(p)] = true
		}
		if b := o.busiest(); b != r.victim {
			progress("warning: %s now owns the most partitions (%s); killing %s as planned", b, o, r.victim)
		}
	}
	r.vp = slices.Sorted(maps.Keys(r.victimParts))
	r.ackedAtKill, r.deliveredAtKill = load.acked.Load(), int64(part.Delivered())
	r.killAt = time.Now()
	if err := r.c.agent(r.victim).kill9(); err != nil {
		return fmt.Errorf("kill -9 %s: %w", r.victim, err)
	}
	close(r.killed)
	progress("killed %s (kill -9, owned partitions %v) after %s of publishing: %d acked, %d delivered",
		r.victim, r.vp, r.killAt.Sub(r.pubStart).Round(time.Millisecond), r.ackedAtKill, r.deliveredAtKill)
	return nil
}

// waitOwnedAgain waits until the survivors own every partition, counting
// samples that list a partition under two of them.
func (r *foRun) waitOwnedAgain(ctx context.Context) error {
	lastLog := time.Now()
	var o ownership
	err := untilTime(ctx, r.killAt.Add(r.lockDelay+2*r.sessionTTL+30*time.Second), 100*time.Millisecond, "partitions owned by the survivors", func() error {
		if err := r.c.died(); err != nil {
			return poll.GiveUp(err)
		}
		var err error
		if o, err = r.c.ownership(ctx); err == nil {
			for _, names := range o.owners(r.victim) {
				if len(names) > 1 {
					r.doubleOwned++
					progress("warning: a partition is listed as owned by %v: %s", names, o)
					break
				}
			}
			if o.complete(r.partitions, r.victim) {
				r.ownedAgain, r.ownedAfter = time.Since(r.killAt), o
				return nil
			}
		}
		if time.Since(lastLog) >= 2*time.Second {
			lastLog = time.Now()
			progress("t+%4.1fs after kill: %s; acked %d, delivered %d", time.Since(r.killAt).Seconds(), o, r.load.acked.Load(), r.part.Delivered())
		}
		return fmt.Errorf("partitions not owned by the survivors %s after the kill (last: %v, error %v)",
			time.Since(r.killAt).Round(time.Second), o, err)
	})
	var timeout *poll.TimeoutError
	if errors.As(err, &timeout) {
		r.c.dumpJetStream(ctx, r.survivors[0])
	}
	if err != nil {
		return err
	}
	progress("all partitions owned by survivors %.2f s after the kill: %s", r.ownedAgain.Seconds(), r.ownedAfter)
	return nil
}

// waitPublished waits until every lane published its events.
func (r *foRun) waitPublished(ctx context.Context) error {
	load := r.load
	for waiting := true; waiting; {
		select {
		case <-r.pubDone:
			waiting = false
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
			if err := r.c.died(); err != nil {
				return err
			}
			progress("t+%4.1fs after kill: acked %d/%d (%d publish errors), delivered %d", time.Since(r.killAt).Seconds(),
				load.acked.Load(), r.planned, load.errs.Load(), r.part.Delivered())
		}
	}
	r.lastAck = time.Unix(0, load.lastAck.Load())
	progress("publishing done: %d acked, %d publish errors, last ack %.1f s after the kill", load.acked.Load(), load.errs.Load(), r.lastAck.Sub(r.killAt).Seconds())
	load.mu.Lock()
	r.allIDs = make([]string, 0, len(load.ackedAt))
	for id := range load.ackedAt {
		r.allIDs = append(r.allIDs, id)
	}
	load.mu.Unlock()
	return nil
}

// drain waits until every acked event was delivered, or -drain-timeout
// after the last ack (what is missing then is lost).
func (r *foRun) drain(ctx context.Context) error {
	lastLog := time.Now()
	err := untilTime(ctx, r.lastAck.Add(r.drainTimeout), 20*time.Millisecond, "every acked event delivered", func() error {
		if r.missing = r.part.Missing(r.allIDs); len(r.missing) == 0 {
			return nil
		}
		if err := r.c.died(); err != nil {
			return poll.GiveUp(err)
		}
		if time.Since(lastLog) >= 2*time.Second {
			lastLog = time.Now()
			progress("t+%4.1fs after kill: %d of %d acked events not delivered yet", time.Since(r.killAt).Seconds(), len(r.missing), len(r.allIDs))
		}
		return fmt.Errorf("%d of %d acked events not delivered", len(r.missing), len(r.allIDs))
	})
	var timeout *poll.TimeoutError
	if err != nil && !errors.As(err, &timeout) {
		return err
	}
	// Late duplicates (a redelivery of something already delivered) show
	// up shortly after; give them a moment.
	time.Sleep(time.Second)
	if len(r.missing) > 0 {
		r.c.dumpJetStream(ctx, r.survivors[0])
	}
	return nil
}

// foFigures is what a failover run measured.
type foFigures struct {
	log              []partner.Request
	drainedAt        time.Time
	duplicates       int
	dupBy            map[string]int // "destination by agent" → 2xx beyond the first
	badUA            []string
	badUAn           int
	firstAfter       float64               // s; -1: none
	firstPart        map[int]time.Duration // victim partition → first survivor 2xx after the kill
	victimAfterKill  int
	byAgent          map[string][2]int // agent → 2xx before, after the kill
	byLane           map[string][]string
	reordered        int
	violations       int
	violationSamples []string
	drain            float64 // s; -1: not drained
	lostBy           map[string]int
	attempted        map[string]int
}

// figures reads the partner's log against the load.
func (r *foRun) figures() foFigures {
	fig := foFigures{log: r.part.Requests(), duplicates: r.part.Duplicates(), badUA: r.part.BadUserAgents(5),
		dupBy: map[string]int{}, firstAfter: -1, firstPart: map[int]time.Duration{}, byAgent: map[string][2]int{},
		drain: -1, lostBy: map[string]int{}, attempted: map[string]int{}}
	for _, id := range r.allIDs {
		if t, ok := r.part.DeliveredAt(id); ok && t.After(fig.drainedAt) {
			fig.drainedAt = t
		}
	}
	// Where the duplicates came from: destination and the agent of each
	// extra 2xx.
	seenOK := map[string]bool{}
	for _, d := range fig.log {
		fig.attempted[d.ID]++
		if d.Status != http.StatusOK {
			continue
		}
		if seenOK[d.ID] {
			fig.dupBy[fmt.Sprintf("%s by %s", d.Dest, d.Agent)]++
		}
		seenOK[d.ID] = true
	}
	for _, d := range fig.log {
		r.afterKill(&fig, d)
	}
	r.load.mu.Lock()
	fig.byLane = r.load.byLane
	for _, id := range r.missing {
		d := r.load.destOf[id]
		fig.lostBy[fmt.Sprintf("%s (p%d)", d, lanes.Partition(d, r.partitions))]++
	}
	r.load.mu.Unlock()
	fig.reordered, fig.violations, fig.violationSamples = laneOrder(fig.log, fig.byLane)
	if len(r.missing) == 0 && !fig.drainedAt.IsZero() {
		fig.drain = max(fig.drainedAt.Sub(r.killAt), 0).Seconds()
	}
	return fig
}

// afterKill counts one request into the per-agent and after-the-kill
// figures.
func (r *foRun) afterKill(fig *foFigures, d partner.Request) {
	if d.Agent == "" {
		fig.badUAn++
	}
	if d.Status == http.StatusOK {
		n := fig.byAgent[d.Agent]
		if d.At.Before(r.killAt) {
			n[0]++
		} else {
			n[1]++
		}
		fig.byAgent[d.Agent] = n
	}
	if !d.At.After(r.killAt) {
		return
	}
	if d.Agent == r.victim {
		fig.victimAfterKill++
		return
	}
	p := lanes.Partition(d.Dest, r.partitions)
	if d.Status != http.StatusOK || !r.victimParts[p] || d.Agent == "" {
		return
	}
	if _, ok := fig.firstPart[p]; !ok {
		fig.firstPart[p] = d.At.Sub(r.killAt)
	}
	if fig.firstAfter < 0 {
		fig.firstAfter = d.At.Sub(r.killAt).Seconds()
	}
}

// report prints the table, the details on stderr and the JSON line, and
// fails when an event was lost, a lane reordered or the victim delivered
// after its death.
func (r *foRun) report(fig foFigures) error {
	r.table(fig)
	r.details(fig)
	if err := printJSON(map[string]float64{
		"first_delivery_after_kill_s": round(fig.firstAfter, 3),
		"owned_again_s":               round(r.ownedAgain.Seconds(), 3),
		"events_acked":                float64(len(r.allIDs)),
		"events_lost":                 float64(len(r.missing)),
		"lanes_reordered":             float64(fig.reordered),
		"duplicates":                  float64(fig.duplicates),
		"drain_s":                     round(fig.drain, 3),
		"publish_errors":              float64(r.load.errs.Load()),
		"victim_partitions":           float64(len(r.vp)),
	}, []string{"first_delivery_after_kill_s", "owned_again_s", "events_acked", "events_lost", "lanes_reordered",
		"duplicates", "drain_s", "publish_errors", "victim_partitions"}); err != nil {
		return err
	}
	var fails []string
	if len(r.missing) > 0 {
		fails = append(fails, fmt.Sprintf("%d acked events lost", len(r.missing)))
	}
	if fig.reordered > 0 {
		fails = append(fails, fmt.Sprintf("%d lanes reordered", fig.reordered))
	}
	if fig.victimAfterKill > 0 {
		fails = append(fails, fmt.Sprintf("%d requests from the killed agent after the kill", fig.victimAfterKill))
	}
	if fig.firstAfter < 0 && r.hasVictimDest {
		fails = append(fails, "no survivor delivered an event of the victim's partitions")
	}
	if len(fails) > 0 {
		return errors.New(strings.Join(fails, "; "))
	}
	return nil
}

// table prints the figures as a table on stdout.
func (r *foRun) table(fig foFigures) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "failover: %d agents, %d partitions, Consul session TTL %s, lock-delay %s; %d destinations × %d lanes × %d events, partner answers 200 after %s\n",
		r.agents, r.partitions, r.sessionTTL, r.lockDelay, len(r.dests), r.lanes, r.eventsPerLane, r.partnerDelay)
	fmt.Fprintln(tw, "measure\tvalue\tnote")
	fmt.Fprintf(tw, "victim\t%s\tkill -9 after %d acked / %d delivered; it owned partitions %v\n", r.victim, r.ackedAtKill, r.deliveredAtKill, r.vp)
	fmt.Fprintf(tw, "destinations\t%s\t\n", strings.Join(r.destDesc, ", "))
	fmt.Fprintf(tw, "first_delivery_after_kill_s\t%.2f s\tkill → first 2xx by a survivor of an event on a partition the victim owned\n", fig.firstAfter)
	for _, p := range r.vp {
		var on []string
		for _, d := range r.dests {
			if lanes.Partition(d, r.partitions) == p {
				on = append(on, d)
			}
		}
		switch t, ok := fig.firstPart[p]; {
		case ok:
			fmt.Fprintf(tw, "  partition %d\t%.2f s\tfirst survivor delivery after the kill (%s)\n", p, t.Seconds(), strings.Join(on, ", "))
		case len(on) == 0:
			fmt.Fprintf(tw, "  partition %d\t-\tno destination on it\n", p)
		default:
			fmt.Fprintf(tw, "  partition %d\t-\tNO survivor delivery after the kill (%s)\n", p, strings.Join(on, ", "))
		}
	}
	fmt.Fprintf(tw, "owned_again_s\t%.2f s\tkill → all %d partitions owned by healthy survivors (polled every 100ms): %s\n", r.ownedAgain.Seconds(), r.partitions, r.ownedAfter)
	fmt.Fprintf(tw, "events_acked\t%d\tof %d published (%d publish errors after SDK retries)\n", len(r.allIDs), r.planned, r.load.errs.Load())
	fmt.Fprintf(tw, "events_lost\t%d\tacked, not delivered 2xx within %s of the last ack\n", len(r.missing), r.drainTimeout)
	fmt.Fprintf(tw, "lanes_reordered\t%d\tof %d lanes (%d out-of-order requests)\n", fig.reordered, len(fig.byLane), fig.violations)
	var dupDesc []string
	for _, k := range slices.Sorted(maps.Keys(fig.dupBy)) {
		dupDesc = append(dupDesc, fmt.Sprintf("%s: %d", k, fig.dupBy[k]))
	}
	fmt.Fprintf(tw, "duplicates\t%d\t2xx deliveries beyond the first of an event (%d requests in all) %s\n", fig.duplicates, len(fig.log), strings.Join(dupDesc, ", "))
	fmt.Fprintf(tw, "drain_s\t%.2f s\tkill → every acked event delivered (%.2f s after the last ack)\n", fig.drain, max(fig.drainedAt.Sub(r.lastAck), 0).Seconds())
	fmt.Fprintf(tw, "victim requests after kill\t%d\tmust be 0\n", fig.victimAfterKill)
	fmt.Fprintf(tw, "unparsable user-agent\t%d\twant rivora/<version> (<agent>)\n", fig.badUAn)
	for _, name := range slices.Sorted(maps.Keys(fig.byAgent)) {
		n := fig.byAgent[name]
		fmt.Fprintf(tw, "  2xx by %q\t%d before, %d after the kill\t\n", name, n[0], n[1])
	}
	fmt.Fprintf(tw, "double ownership seen\t%d\tsamples listing one partition under two healthy survivors\n", r.doubleOwned)
	tw.Flush()
}

// details prints publish errors, reorders, bad user-agents and lost
// events on stderr.
func (r *foRun) details(fig foFigures) {
	for _, e := range r.load.errList {
		fmt.Fprintf(os.Stderr, "publish error: %s\n", e)
	}
	for _, s := range fig.violationSamples {
		fmt.Fprintf(os.Stderr, "reorder: %s\n", s)
	}
	for _, ua := range fig.badUA {
		fmt.Fprintf(os.Stderr, "unparsable user-agent: %q\n", ua)
	}
	if len(r.missing) == 0 {
		return
	}
	for k, n := range fig.lostBy {
		fmt.Fprintf(os.Stderr, "lost: %d events of %s\n", n, k)
	}
	for _, id := range r.missing[:min(10, len(r.missing))] {
		r.load.mu.Lock()
		at := r.load.ackedAt[id]
		r.load.mu.Unlock()
		fmt.Fprintf(os.Stderr, "lost: %s acked %+.2f s from the kill, %d requests for it\n", id, at.Sub(r.killAt).Seconds(), fig.attempted[id])
	}
}
