package main

// gameday replays the incident that motivates Rivora against a real
// `rivora dev`, with Go fakes for the partners:
//
//	go run ./e2e/bench gameday                       # a WAF answering 429 above 600 req/s
//	go run ./e2e/bench gameday -scenario hard-down   # a partner answering 503 to everything
//
// waf: one destination configured at 2,000/s sits behind a fake WAF that
// answers 429 once more than 600 requests arrived in the current second; a
// burst of 20,000 events is published to it while three bystander
// destinations take a steady 50 events/s each. Reported: how long until the
// destination's current rate (GetDestinationHealth) is at most half the
// configured one after the first 429, how long until the per-second 429
// share stays under 25%, the 429 share after that, the bystanders' p99
// publish→delivery before and during the burst, the drain time and lane
// order violations.
//
// hard-down: the partner answers 503 to everything, for far longer than
// the destination's max_attempts would last; reported: time from the
// first failure to `parked`, the probe rate while parked, and, once the
// partner is back, the time to the first 2xx and until the backlog
// drained, and the dead letters (must be 0: an outage costs no attempt).
//
// Progress goes to stderr; a table and, as the last line, one JSON object
// go to stdout.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
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

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

type gamedayFlags struct {
	common
	scenario       string
	events         int
	lanes          int
	wafLimit       int
	rate           float64
	burst          int
	bystanders     int
	bystanderRate  float64
	baseline       time.Duration
	probeWindow    time.Duration
	scenarioLimit  time.Duration
	hardDownEvents int
	hardDownRate   float64
	hardDownMax    int
}

func runGameday(args []string) error {
	fs := flag.NewFlagSet("gameday", flag.ExitOnError)
	var g gamedayFlags
	g.register(fs)
	fs.StringVar(&g.scenario, "scenario", "waf", "waf (429 above -waf-limit req/s) or hard-down (503 to everything)")
	fs.IntVar(&g.events, "events", 20000, "waf: events in the burst")
	fs.IntVar(&g.lanes, "lanes", 2000, "lanes the burst (or the hard-down backlog) is spread over")
	fs.IntVar(&g.wafLimit, "waf-limit", 600, "waf: requests per second the fake WAF lets through")
	fs.Float64Var(&g.rate, "rate", 2000, "waf: the throttled destination's configured rate_per_second")
	fs.IntVar(&g.burst, "burst", 200, "the throttled destination's burst")
	fs.IntVar(&g.bystanders, "bystanders", 3, "waf: bystander destinations")
	fs.Float64Var(&g.bystanderRate, "bystander-rate", 50, "waf: events/s published to each bystander")
	fs.DurationVar(&g.baseline, "baseline", 10*time.Second, "waf: bystander-only phase before the burst")
	fs.IntVar(&g.hardDownEvents, "hard-down-events", 5000, "hard-down: backlog published while the partner is down")
	fs.Float64Var(&g.hardDownRate, "hard-down-rate", 500, "hard-down: the destination's configured rate_per_second")
	fs.IntVar(&g.hardDownMax, "hard-down-max-attempts", 3, "hard-down: the destination's max attempts (back-offs 1+2 s at 3: the outage lasts far longer)")
	fs.DurationVar(&g.probeWindow, "probe-window", 10*time.Second, "hard-down: how long to measure probes once parked")
	fs.DurationVar(&g.scenarioLimit, "limit", 170*time.Second, "fail when the scenario takes longer")
	fs.Parse(args)
	fmt.Fprintf(os.Stderr, "bench gameday %s: GOMAXPROCS=%d NumCPU=%d\n", g.scenario, runtime.GOMAXPROCS(0), runtime.NumCPU())
	switch g.scenario {
	case "waf":
		return g.runWAF()
	case "hard-down":
		return g.runHardDown()
	}
	return fmt.Errorf("unknown -scenario %q (waf or hard-down)", g.scenario)
}

// ---------------------------------------------------------------------------
// fakes

// wafGate answers 429 once more than limit requests arrived in the current
// fixed one-second window (refused ones count too), else 200.
func wafGate(limit int) func(time.Time) int {
	start := time.Now()
	var win int64
	n := 0
	return func(now time.Time) int {
		w := int64(now.Sub(start) / time.Second)
		if w != win {
			win, n = w, 0
		}
		n++
		if n > limit {
			return http.StatusTooManyRequests
		}
		return http.StatusOK
	}
}

// ---------------------------------------------------------------------------
// load

// laneLog remembers, per lane, event ids in publish order.
type laneLog struct {
	mu     sync.Mutex
	byLane map[string][]string
}

func newLaneLog() *laneLog { return &laneLog{byLane: map[string][]string{}} }

func (l *laneLog) add(lane, id string) {
	l.mu.Lock()
	l.byLane[lane] = append(l.byLane[lane], id)
	l.mu.Unlock()
}

// orderViolations counts requests for a lane's event i made while an
// earlier event of that lane had not been answered 2xx.
func orderViolations(log []partner.Request, lanes *laneLog) int {
	index := map[string]int{}
	for _, ids := range lanes.byLane {
		for i, id := range ids {
			index[id] = i
		}
	}
	frontier := map[string]int{}
	bad := 0
	for _, a := range log {
		i, ok := index[a.ID]
		if !ok {
			continue
		}
		f := frontier[a.Lane]
		switch {
		case i > f:
			bad++
		case i == f && a.Status/100 == 2:
			frontier[a.Lane] = f + 1
		}
	}
	return bad
}

// publishBacklog publishes n events to dest, event i on lane i%lanes, in
// sequential batches of 500 (so lane order is publish order).
func publishBacklog(ctx context.Context, ingest rivorav1connect.IngestServiceClient, dest string, n, lanes int, into *laneLog) error {
	body := payload(256, 7)
	const batchSize = 500
	for lo := 0; lo < n; lo += batchSize {
		hi := min(lo+batchSize, n)
		events := make([]*rivorav1.PublishRequest, 0, hi-lo)
		for i := lo; i < hi; i++ {
			events = append(events, &rivorav1.PublishRequest{DestinationId: dest, CustomerId: "acme",
				LaneKey: "lane-" + strconv.Itoa(i%lanes), Type: "erp.sync", Payload: body})
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		resp, err := ingest.PublishBatch(cctx, connect.NewRequest(&rivorav1.PublishBatchRequest{Events: events}))
		cancel()
		if err != nil {
			return fmt.Errorf("publish batch at %d: %w", lo, err)
		}
		ids := resp.Msg.GetEventIds()
		if len(ids) != len(events) {
			return fmt.Errorf("publish batch at %d: %d ids for %d events", lo, len(ids), len(events))
		}
		for i, id := range ids {
			into.add("acme/"+events[i].GetLaneKey(), id)
		}
	}
	return nil
}

// steady publishes rate events/s to dest over 20 lanes until ctx ends,
// recording each event's publish start.
type steady struct {
	dest    string
	p       *partner.Partner
	mu      sync.Mutex
	started map[string]time.Time
	acked   map[string]time.Time
	errs    atomic.Int64
}

func (s *steady) run(ctx context.Context, ingest rivorav1connect.IngestServiceClient, rate float64, wg *sync.WaitGroup) {
	defer wg.Done()
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t0 := time.Now()
		resp, err := ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{DestinationId: s.dest, CustomerId: "steady",
			LaneKey: "user-" + strconv.Itoa(i%20), Type: "steady", Payload: payload(128, i)}))
		if err != nil {
			if ctx.Err() == nil {
				s.errs.Add(1)
			}
			continue
		}
		s.mu.Lock()
		s.started[resp.Msg.GetEventId()] = t0
		s.acked[resp.Msg.GetEventId()] = time.Now()
		s.mu.Unlock()
	}
}

// latencies are publish start (fromAck: publish ack) → first 2xx at the
// partner for events published in [from, to); missing counts those not
// delivered.
func (s *steady) latencies(from, to time.Time, fromAck bool) (lat []time.Duration, missing int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, t0 := range s.started {
		if t0.Before(from) || !t0.Before(to) {
			continue
		}
		at, ok := s.p.DeliveredAt(id)
		if !ok {
			missing++
			continue
		}
		if fromAck {
			t0 = s.acked[id]
		}
		lat = append(lat, max(at.Sub(t0), 0))
	}
	slices.Sort(lat)
	return lat, missing
}

func (s *steady) waitDelivered(limit time.Duration) {
	poll.Check(limit, 20*time.Millisecond, func() error {
		s.mu.Lock()
		n := len(s.started)
		s.mu.Unlock()
		if s.p.Delivered() >= n {
			return nil
		}
		return poll.ErrTimeout
	})
}

// ---------------------------------------------------------------------------
// waf scenario

type healthSample struct {
	at      time.Time
	state   string
	current float64
}

func pollHealth(ctx context.Context, admin rivorav1connect.AdminServiceClient, dest string, every time.Duration, out *[]healthSample, mu *sync.Mutex, wg *sync.WaitGroup) {
	defer wg.Done()
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := admin.GetDestinationHealth(cctx, connect.NewRequest(&rivorav1.GetDestinationHealthRequest{DestinationId: dest}))
		cancel()
		if err == nil {
			for _, h := range resp.Msg.GetDestinations() {
				if h.GetDestinationId() == dest {
					mu.Lock()
					*out = append(*out, healthSample{at: time.Now(), state: h.GetState(), current: h.GetCurrentRate()})
					mu.Unlock()
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
}

func (g *gamedayFlags) runWAF() error {
	deadline := time.Now().Add(g.scenarioLimit)
	d, err := g.startDev()
	defer d.stop()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hc := g.httpClient(16)
	admin := rivorav1connect.NewAdminServiceClient(hc, d.url())
	ingest := rivorav1connect.NewIngestServiceClient(hc, d.url())

	erp, err := partner.Start(partner.Options{Answer: atArrival(wafGate(g.wafLimit))})
	if err != nil {
		return err
	}
	defer erp.Close()
	if err := createDestination(ctx, admin, "erp", erp.URL(), &rivorav1.Limits{RatePerSecond: g.rate, Burst: int32(g.burst), MaxAttempts: 1000}); err != nil {
		return err
	}
	var bys []*steady
	for i := range g.bystanders {
		f, err := partner.Start(partner.Options{})
		if err != nil {
			return err
		}
		defer f.Close()
		s := &steady{dest: fmt.Sprintf("bystander-%d", i), p: f, started: map[string]time.Time{}, acked: map[string]time.Time{}}
		// Budget well above the load: the bystanders measure isolation, not
		// their own budget.
		if err := createDestination(ctx, admin, s.dest, f.URL(), &rivorav1.Limits{RatePerSecond: 10 * g.bystanderRate, Burst: 100}); err != nil {
			return err
		}
		bys = append(bys, s)
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var loadWG sync.WaitGroup
	for _, s := range bys {
		loadWG.Add(1)
		go s.run(loadCtx, ingest, g.bystanderRate, &loadWG)
	}
	baseFrom, cpuBase0, selfBase0 := time.Now(), d.cpu(), selfCPU()
	progress("baseline: %d bystanders at %.0f events/s each for %s", len(bys), g.bystanderRate, g.baseline)
	time.Sleep(g.baseline)
	baseTo, cpuBase1, selfBase1 := time.Now(), d.cpu(), selfCPU()

	var healthMu sync.Mutex
	var health []healthSample
	var pollWG sync.WaitGroup
	pollWG.Add(1)
	go pollHealth(loadCtx, admin, "erp", 100*time.Millisecond, &health, &healthMu, &pollWG)

	lanes := newLaneLog()
	progress("burst: %d events over %d lanes to erp (configured %.0f/s, burst %d) behind a WAF allowing %d req/s", g.events, g.lanes, g.rate, g.burst, g.wafLimit)
	burstAt, cpuBurst0, selfBurst0 := time.Now(), d.cpu(), selfCPU()
	if err := publishBacklog(ctx, ingest, "erp", g.events, g.lanes, lanes); err != nil {
		return err
	}
	publishedAt := time.Now()
	progress("burst published in %s", publishedAt.Sub(burstAt).Round(time.Millisecond))

	latest := func() healthSample {
		healthMu.Lock()
		defer healthMu.Unlock()
		if len(health) == 0 {
			return healthSample{}
		}
		return health[len(health)-1]
	}
	if err := g.waitWAFDrained(ctx, d, erp, deadline, burstAt, latest); err != nil {
		return err
	}
	drainedAt, cpuBurst1, selfBurst1 := time.Now(), d.cpu(), selfCPU()
	drain := drainedAt.Sub(burstAt)
	progress("erp drained %d events in %s", g.events, drain.Round(time.Millisecond))
	stopLoad()
	loadWG.Wait()
	pollWG.Wait()
	for _, s := range bys {
		s.waitDelivered(10 * time.Second)
	}

	log := erp.Requests()
	var first429 time.Time
	for _, a := range log {
		if a.Status == http.StatusTooManyRequests {
			first429 = a.At
			break
		}
	}
	if first429.IsZero() {
		return errors.New("the WAF never answered 429: the burst did not exceed it")
	}
	// halve_s: first 429 → the first health sample at ≤ half the configured
	// rate.
	halve := -1.0
	healthMu.Lock()
	for _, h := range health {
		if h.current > 0 && h.current <= g.rate/2 {
			halve = max(h.at.Sub(first429).Seconds(), 0)
			break
		}
	}
	samples := slices.Clone(health)
	healthMu.Unlock()

	buckets := wafSeconds(log, burstAt, drain)
	settleAt := burstAt.Add(time.Duration(settleSecond(buckets)) * time.Second)
	settle := settleAt.Sub(burstAt).Seconds()
	var afterAll, afterRefused int
	for _, a := range log {
		if !a.At.Before(settleAt) {
			afterAll++
			if a.Status == http.StatusTooManyRequests {
				afterRefused++
			}
		}
	}
	throttledAfter := float64(afterRefused) / float64(max(afterAll, 1))

	// Bystander latency, publish start → delivery (the JSON figures), and
	// for diagnosis: publish ack → delivery, and the time after the burst
	// was published (no ingest contention).
	lats := func(from, to time.Time, fromAck bool) ([]time.Duration, int) {
		var all []time.Duration
		missing := 0
		for _, s := range bys {
			l, m := s.latencies(from, to, fromAck)
			all, missing = append(all, l...), missing+m
		}
		slices.Sort(all)
		return all, missing
	}
	baseLat, baseMissing := lats(baseFrom, baseTo, false)
	duringLat, duringMissing := lats(burstAt, drainedAt, false)
	baseAck, _ := lats(baseFrom, baseTo, true)
	duringAck, _ := lats(burstAt, drainedAt, true)
	afterPub, _ := lats(publishedAt, drainedAt, false)
	violations := orderViolations(log, lanes)
	var pubErrs int64
	for _, s := range bys {
		pubErrs += s.errs.Load()
	}
	total429 := 0
	for _, a := range log {
		if a.Status == http.StatusTooManyRequests {
			total429++
		}
	}

	// Table: per second, then the summary.
	printWAFSeconds(buckets, burstAt, samples)
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "scenario\twaf: %d events, erp at %.0f/s (burst %d) behind a WAF at %d req/s; %d bystanders at %.0f/s\n", g.events, g.rate, g.burst, g.wafLimit, len(bys), g.bystanderRate)
	fmt.Fprintf(tw, "halve\t%.2f s from the first 429 to current rate ≤ %.0f/s (write-up: 9 s)\n", halve, g.rate/2)
	fmt.Fprintf(tw, "settle\t%.0f s from the burst until every second's 429 share stays < 25%%\n", settle)
	fmt.Fprintf(tw, "throttled after settle\t%.1f%% of %d attempts\n", 100*throttledAfter, afterAll)
	fmt.Fprintf(tw, "attempts\t%d (%d × 429) for %d events\n", len(log), total429, g.events)
	fmt.Fprintf(tw, "drain\t%.1f s (%.0f events/s)\n", drain.Seconds(), float64(g.events)/drain.Seconds())
	fmt.Fprintf(tw, "bystander p50/p99 baseline\t%.1f / %.1f ms (%d events, %d undelivered)\n", ms(percentile(baseLat, 0.5)), ms(percentile(baseLat, 0.99)), len(baseLat), baseMissing)
	fmt.Fprintf(tw, "bystander p50/p99 during\t%.1f / %.1f ms (%d events, %d undelivered; write-up: +41 ms)\n", ms(percentile(duringLat, 0.5)), ms(percentile(duringLat, 0.99)), len(duringLat), duringMissing)
	fmt.Fprintf(tw, "  ack → delivery p99\t%.1f ms baseline, %.1f ms during\n", ms(percentile(baseAck, 0.99)), ms(percentile(duringAck, 0.99)))
	fmt.Fprintf(tw, "  p99 once the burst was published\t%.1f ms (%d events; the burst's ingest took %.1f s)\n", ms(percentile(afterPub, 0.99)), len(afterPub), publishedAt.Sub(burstAt).Seconds())
	fmt.Fprintf(tw, "bystander publish errors\t%d\n", pubErrs)
	util := func(c0, c1 time.Duration, from, to time.Time) float64 {
		return 100 * (c1 - c0).Seconds() / to.Sub(from).Seconds()
	}
	fmt.Fprintf(tw, "CPU baseline\trivora dev %.0f%%, bench (fakes + publishers) %.0f%% of one core\n",
		util(cpuBase0, cpuBase1, baseFrom, baseTo), util(selfBase0, selfBase1, baseFrom, baseTo))
	fmt.Fprintf(tw, "CPU during\trivora dev %.0f%%, bench (fakes + publishers) %.0f%% of one core (%d cores)\n",
		util(cpuBurst0, cpuBurst1, burstAt, drainedAt), util(selfBurst0, selfBurst1, burstAt, drainedAt), runtime.NumCPU())
	fmt.Fprintf(tw, "lane order violations\t%d\n", violations)
	tw.Flush()
	return printJSON(map[string]float64{
		"halve_s":                      round(halve, 2),
		"settle_s":                     round(settle, 1),
		"throttled_share_after_settle": round(throttledAfter, 4),
		"bystander_p99_ms_baseline":    round(ms(percentile(baseLat, 0.99)), 1),
		"bystander_p99_ms_during":      round(ms(percentile(duringLat, 0.99)), 1),
		"drain_s":                      round(drain.Seconds(), 1),
		"order_violations":             float64(violations),
	}, []string{"halve_s", "settle_s", "throttled_share_after_settle", "bystander_p99_ms_baseline", "bystander_p99_ms_during", "drain_s", "order_violations"})
}

// waitWAFDrained waits until erp got every event of the burst, with
// progress every 2 s.
func (g *gamedayFlags) waitWAFDrained(ctx context.Context, d *dev, erp *partner.Partner, deadline, burstAt time.Time, latest func() healthSample) error {
	lastLog := time.Now()
	return until(ctx, max(time.Until(deadline), time.Nanosecond), 20*time.Millisecond, "the burst drained", func() error {
		if erp.Delivered() >= g.events {
			return nil
		}
		if err, ok := d.exited(); ok {
			return poll.GiveUp(fmt.Errorf("rivora dev exited: %v\n%s", err, d.Tail(8<<10)))
		}
		if time.Since(lastLog) >= 2*time.Second {
			lastLog = time.Now()
			now := time.Now()
			var ok, refused int
			for _, a := range erp.Requests() {
				if a.At.After(now.Add(-time.Second)) {
					if a.Status == http.StatusTooManyRequests {
						refused++
					} else {
						ok++
					}
				}
			}
			h := latest()
			progress("t+%4.1fs erp delivered %5d/%d; last second %d×2xx %d×429; %s at %.0f/s of %.0f/s",
				now.Sub(burstAt).Seconds(), erp.Delivered(), g.events, ok, refused, h.state, h.current, g.rate)
		}
		return fmt.Errorf("erp: %d of %d delivered when the scenario limit %s ran out", erp.Delivered(), g.events, g.scenarioLimit)
	})
}

// wafSecond is one second of the WAF scenario from the burst on.
type wafSecond struct{ all, ok, refused int }

func (b wafSecond) share() float64 { return float64(b.refused) / float64(max(b.all, 1)) }

// wafSeconds buckets the attempts per second from the burst until drained.
func wafSeconds(log []partner.Request, burstAt time.Time, drain time.Duration) []wafSecond {
	secs := int(drain/time.Second) + 1
	buckets := make([]wafSecond, secs)
	for _, a := range log {
		i := int(a.At.Sub(burstAt) / time.Second)
		if i < 0 || i >= secs {
			continue
		}
		buckets[i].all++
		if a.Status/100 == 2 {
			buckets[i].ok++
		} else if a.Status == http.StatusTooManyRequests {
			buckets[i].refused++
		}
	}
	return buckets
}

// settleSecond is the first second from which every second's 429 share
// stays under 25%.
func settleSecond(buckets []wafSecond) int {
	settleIdx := len(buckets)
	for i := len(buckets) - 1; i >= 0; i-- {
		if buckets[i].share() >= 0.25 {
			break
		}
		settleIdx = i
	}
	return settleIdx
}

// printWAFSeconds prints the per-second table with the health samples.
func printWAFSeconds(buckets []wafSecond, burstAt time.Time, samples []healthSample) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "second\tattempts\t2xx\t429\t429 share\trate (health)\tstate\t")
	for i, b := range buckets {
		at := burstAt.Add(time.Duration(i+1) * time.Second)
		var h healthSample
		for _, s := range samples {
			if s.at.Before(at) {
				h = s
			}
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%.1f%%\t%.0f\t%s\t\n", i, b.all, b.ok, b.refused, 100*b.share(), h.current, h.state)
	}
	tw.Flush()
}

// ---------------------------------------------------------------------------
// hard-down scenario

func (g *gamedayFlags) runHardDown() error {
	deadline := time.Now().Add(g.scenarioLimit)
	d, err := g.startDev()
	defer d.stop()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hc := g.httpClient(16)
	admin := rivorav1connect.NewAdminServiceClient(hc, d.url())
	ingest := rivorav1connect.NewIngestServiceClient(hc, d.url())

	var up atomic.Bool
	p, err := partner.Start(partner.Options{Answer: func(partner.Request) int {
		if up.Load() {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	}})
	if err != nil {
		return err
	}
	defer p.Close()
	if err := createDestination(ctx, admin, "erp", p.URL(), &rivorav1.Limits{RatePerSecond: g.hardDownRate, Burst: int32(g.burst), MaxAttempts: int32(g.hardDownMax)}); err != nil {
		return err
	}
	var healthMu sync.Mutex
	var health []healthSample
	var pollWG sync.WaitGroup
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	pollWG.Add(1)
	go pollHealth(pollCtx, admin, "erp", 100*time.Millisecond, &health, &healthMu, &pollWG)
	latest := func() healthSample {
		healthMu.Lock()
		defer healthMu.Unlock()
		if len(health) == 0 {
			return healthSample{}
		}
		return health[len(health)-1]
	}

	lanes := newLaneLog()
	lanesN := min(g.lanes, g.hardDownEvents)
	progress("hard-down: the partner answers 503; publishing %d events over %d lanes (erp at %.0f/s, burst %d)", g.hardDownEvents, lanesN, g.hardDownRate, g.burst)
	pubAt := time.Now()
	if err := publishBacklog(ctx, ingest, "erp", g.hardDownEvents, lanesN, lanes); err != nil {
		return err
	}
	progress("published in %s", time.Since(pubAt).Round(time.Millisecond))

	// Until parked.
	var firstFail, parkedAt time.Time
	lastLog := time.Now()
	err = until(ctx, max(time.Until(deadline), time.Nanosecond), 20*time.Millisecond, "erp parked", func() error {
		if firstFail.IsZero() {
			if log := p.Requests(); len(log) > 0 {
				firstFail = log[0].At
			}
		}
		if h := latest(); h.state == "parked" && !firstFail.IsZero() {
			parkedAt = h.at
			return nil
		}
		if time.Since(lastLog) >= 2*time.Second {
			lastLog = time.Now()
			h := latest()
			progress("t+%4.1fs %d attempts so far; %s at %.2f/s", time.Since(pubAt).Seconds(), len(p.Requests()), h.state, h.current)
		}
		return fmt.Errorf("erp not parked when the scenario limit %s ran out (state %q)", g.scenarioLimit, latest().state)
	})
	if err != nil {
		return err
	}
	parked := parkedAt.Sub(firstFail)
	progress("parked %.1f s after the first failure; measuring probes for %s", parked.Seconds(), g.probeWindow)

	probeFrom := time.Now()
	time.Sleep(g.probeWindow)
	probeTo := time.Now()
	probes := 0
	for _, a := range p.Requests() {
		if !a.At.Before(probeFrom) && a.At.Before(probeTo) {
			probes++
		}
	}
	probeRate := float64(probes) / probeTo.Sub(probeFrom).Seconds()
	if st := latest().state; st != "parked" {
		progress("warning: state %q at the end of the probe window", st)
	}
	progress("probes while parked: %d in %s = %.2f/s", probes, probeTo.Sub(probeFrom).Round(time.Millisecond), probeRate)

	// The partner returns.
	upAt := time.Now()
	up.Store(true)
	progress("partner healthy again; waiting for the backlog to drain")
	var firstOK time.Time
	lastLog = time.Now()
	dead := 0
	err = until(ctx, max(time.Until(deadline), time.Nanosecond), 20*time.Millisecond, "erp drained", func() error {
		if p.Delivered()+dead >= g.hardDownEvents {
			return nil
		}
		var err error
		if dead, err = deadLettered(ctx, hc, d.url(), "erp"); err != nil {
			return poll.GiveUp(err)
		}
		if firstOK.IsZero() && p.Delivered() > 0 {
			firstOK = firstOKAt(p)
		}
		if time.Since(lastLog) >= 2*time.Second {
			lastLog = time.Now()
			h := latest()
			progress("t+%4.1fs after recovery: %d/%d delivered; %s at %.1f/s", time.Since(upAt).Seconds(), p.Delivered(), g.hardDownEvents, h.state, h.current)
		}
		return fmt.Errorf("erp: %d of %d delivered (%d dead letters) when the scenario limit %s ran out", p.Delivered(), g.hardDownEvents, dead, g.scenarioLimit)
	})
	if err != nil {
		return err
	}
	drainedAt := time.Now()
	if firstOK.IsZero() {
		firstOK = firstOKAt(p)
	}
	stopPoll()
	pollWG.Wait()
	recovered := firstOK.Sub(upAt)
	drain := drainedAt.Sub(upAt)
	log := p.Requests()
	violations := orderViolations(log, lanes)
	var failures int
	for _, a := range log {
		if a.Status/100 != 2 {
			failures++
		}
	}
	// Transitions seen by the health poller.
	var transitions []string
	prev := ""
	healthMu.Lock()
	for _, h := range health {
		if h.state != prev {
			transitions = append(transitions, fmt.Sprintf("%+.1fs %s (%.2f/s)", h.at.Sub(firstFail).Seconds(), h.state, h.current))
			prev = h.state
		}
	}
	healthMu.Unlock()

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "scenario\thard-down: %d events over %d lanes, erp at %.0f/s (burst %d), partner 503 until parked + %s\n", g.hardDownEvents, lanesN, g.hardDownRate, g.burst, g.probeWindow)
	fmt.Fprintf(tw, "parked\t%.1f s after the first failure (write-up: 40 s)\n", parked.Seconds())
	fmt.Fprintf(tw, "probes while parked\t%.2f/s (%d in %.1f s)\n", probeRate, probes, probeTo.Sub(probeFrom).Seconds())
	fmt.Fprintf(tw, "first 2xx after recovery\t%.2f s\n", recovered.Seconds())
	fmt.Fprintf(tw, "drain after recovery\t%.1f s (%.0f events/s)\n", drain.Seconds(), float64(g.hardDownEvents)/drain.Seconds())
	fmt.Fprintf(tw, "failed attempts (503)\t%d (max attempts %d)\n", failures, g.hardDownMax)
	fmt.Fprintf(tw, "dead letters\t%d (want 0)\n", dead)
	fmt.Fprintf(tw, "lane order violations\t%d\n", violations)
	for i, tr := range transitions {
		name := ""
		if i == 0 {
			name = "health states seen"
		}
		fmt.Fprintf(tw, "%s\t%s\n", name, tr)
	}
	tw.Flush()
	return printJSON(map[string]float64{
		"parked_s":      round(parked.Seconds(), 1),
		"probe_per_s":   round(probeRate, 2),
		"recover_s":     round(recovered.Seconds(), 2),
		"drain_s":       round(drain.Seconds(), 1),
		"dead_lettered": float64(dead),
	}, []string{"parked_s", "probe_per_s", "recover_s", "drain_s", "dead_lettered"})
}

// deadLettered reads how many events of a destination became dead letters
// (rivora_deadletters_total, every reason) from /metrics.
func deadLettered(ctx context.Context, hc *http.Client, base, dest string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("GET /metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %s %v", resp.Status, err)
	}
	total := 0.0
	for line := range strings.Lines(string(body)) {
		if !strings.HasPrefix(line, "rivora_deadletters_total{") || !strings.Contains(line, `destination="`+dest+`"`) {
			continue
		}
		_, val, _ := strings.Cut(strings.TrimSpace(line), "} ")
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return 0, fmt.Errorf("/metrics line %q: %w", strings.TrimSpace(line), err)
		}
		total += v
	}
	return int(total), nil
}

// selfCPU is this process's user+system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// atArrival makes a gate of arrival times a partner's Answer.
func atArrival(gate func(time.Time) int) func(partner.Request) int {
	return func(r partner.Request) int { return gate(r.At) }
}

// firstOKAt is when p first answered 2xx (zero: never).
func firstOKAt(p *partner.Partner) time.Time {
	for _, r := range p.Requests() {
		if r.Status/100 == 2 {
			return r.At
		}
	}
	return time.Time{}
}
