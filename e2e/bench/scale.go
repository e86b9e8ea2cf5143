package main

// scale runs one `rivora dev` at the size its users will (issue 26: "proven
// at ten million pending events"):
//
//	go run ./e2e/bench scale                                              # 10M pending events, 1M lanes, 10k destinations
//	go run ./e2e/bench scale -pending 200000 -lanes 20000 -destinations 200 # a short run
//
// The shape: event i goes to lane i mod -lanes (so every lane holds
// pending/lanes events); the first tenth of the lanes belong to one
// destination, big (at the default size 1M events over 100k lanes), the
// rest are spread round robin over the other destinations. Every event
// has its own idempotency key (as the SDKs send them; -keys=false for
// none) and a -payload body. The destinations are limited far above what
// the machine delivers (rate 100k/s, burst 10k, default max_in_flight),
// so what is measured is Rivora, not a budget.
//
// Phases, each with its own time limit:
//
//  1. setup: create the destinations (-admin-c calls at a time) and pause
//     them; restart (SIGTERM) and measure the baseline: heap in use after
//     two forced GCs (GET /debug/pprof/heap?gc=1, then /metrics) and RSS.
//  2. delivery at -small pending (the "at 10k" figure): on -small-dests
//     destinations of their own (10 events per lane, 100 lanes each),
//     -small-rounds times: pause them, publish -small events, wait until
//     they are all pending, resume them and let them drain to another fast
//     partner. The rate is that of each drain's middle eight tenths (from
//     the request that makes a tenth to the one that makes nine tenths),
//     summed over the rounds: like the full backlog's window it leaves out
//     the resume and the drain's tail, where fewer lanes are left than
//     workers. The whole drains' rate is reported beside it. This runs
//     before the big fill, on the same process, the scale destinations
//     paused.
//  3. fill: publish -pending events with PublishBatch (the fill rate is
//     events acked per second), wait until the health API counts them all
//     pending, then until the last ack is -age old (older than the stores'
//     2-minute duplicate window: a restart within it rebuilds their dedup
//     ids, a transient cost not counted per pending event).
//  4. restart: SIGTERM, start on the same data dir, and time process start
//     to /healthz 200 (ready_s) and to the health API counting every
//     pending event again (rebuild_s). Heap and RSS are read at once and
//     again after -settle (the embedded NATS server drops the block caches
//     the rebuild loaded); (settled - baseline) / pending is the memory per
//     pending event.
//  5. lookups at that size, everything still paused: -lists ListLanes
//     calls (limit 100) on big, and as many on random other destinations;
//     -lookups GetEvent calls on random pending events (ids sampled while
//     filling), each checked to answer pending on its destination.
//  6. resume and pause big (its own partner), every other destination
//     still paused: resume — from the call to the first request big's
//     partner receives; pause, once it delivers at full pace (2000
//     requests) — from the call to the last request its partner receives
//     (it must then stay quiet for -quiet). Measured while the others
//     deliver, big would get too small a share of the workers (one
//     destination of 10k) for its last request to time the pause.
//  7. delivery at full: resume every destination (-admin-c calls at a
//     time), wait -warmup, then count the partners' deliveries over
//     -window while the backlog is still about -pending; nothing is
//     published meanwhile.
//
// The server's CPU per delivery (user+system from /proc/PID/stat) is
// reported for both delivery phases: over the small drains' middle eight
// tenths, and over the full backlog's window. With -profile-dir DIR the
// bench also writes CPU profiles of the server (it runs with --pprof):
// small.pprof, the small drains merged (one profile per drain, from the
// resume for about as long as the drain before it took), and full.pprof,
// the full backlog's counted window; small-allocs.pprof and
// full-allocs.pprof, what the server allocated over the same times; and
// full-heap.pprof, a heap profile right after that window. Compare them
// with
//
//	go tool pprof -top -diff_base DIR/small.pprof DIR/full.pprof
//
// (normalised per sample: -normalize), or each with -top.
//
// The backlog is not drained: the process is stopped at the end. Progress
// goes to stderr; a table and, as the last line, one JSON object go to
// stdout. It exits non-zero with a message when anything fails or a phase
// overruns its limit.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/google/pprof/profile"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
)

type scaleFlags struct {
	common
	pending, lanes, dests int
	payload, batch, conc  int
	keys                  bool
	small, smallDests     int
	smallRounds           int
	window, warmup, quiet time.Duration
	age, settle           time.Duration
	lookups, lists        int
	adminConc             int
	timeout               time.Duration
	setupLimit            time.Duration
	fillLimit             time.Duration
	rebuildLimit          time.Duration
	phaseLimit            time.Duration
	profileDir            string
}

func runScale(args []string) error {
	fs := flag.NewFlagSet("scale", flag.ExitOnError)
	var f scaleFlags
	f.register(fs)
	fs.IntVar(&f.pending, "pending", 10_000_000, "pending events to fill")
	fs.IntVar(&f.lanes, "lanes", 1_000_000, "lanes the events are spread over (round robin); a tenth belong to the big destination")
	fs.IntVar(&f.dests, "destinations", 10_000, "destinations, big included")
	fs.IntVar(&f.payload, "payload", 256, "payload bytes per event")
	fs.IntVar(&f.batch, "batch", 1000, "events per PublishBatch")
	fs.IntVar(&f.conc, "c", 4, "concurrent PublishBatch calls")
	fs.BoolVar(&f.keys, "keys", true, "give every event its own idempotency key, as the SDKs do")
	fs.IntVar(&f.small, "small", 10_000, "the small backlog whose drain gives deliver_per_s_at_10k")
	fs.IntVar(&f.smallDests, "small-dests", 10, "destinations of the small backlog (their own, outside -destinations)")
	fs.IntVar(&f.smallRounds, "small-rounds", 5, "drains of the small backlog (their deliveries and times are summed)")
	fs.DurationVar(&f.window, "window", 30*time.Second, "how long deliveries are counted at the full backlog")
	fs.DurationVar(&f.warmup, "warmup", 5*time.Second, "after every destination was resumed, wait this long before counting deliveries")
	fs.DurationVar(&f.quiet, "quiet", 3*time.Second, "after pausing big, how long its partner must receive nothing for the pause to count as in effect")
	fs.DurationVar(&f.age, "age", 2*time.Minute, "restart only once the last ack is this old (the stores' duplicate window; 0: at once)")
	fs.DurationVar(&f.settle, "settle", 20*time.Second, "wait after the rebuild before the settled heap reading (the embedded NATS server drops block caches after ~10 s)")
	fs.IntVar(&f.lookups, "lookups", 500, "GetEvent calls on random pending events")
	fs.IntVar(&f.lists, "lists", 200, "ListLanes calls on big, and as many on random other destinations")
	fs.IntVar(&f.adminConc, "admin-c", 16, "concurrent admin calls (create, pause, resume of every destination)")
	fs.DurationVar(&f.timeout, "timeout", 90*time.Minute, "fail when the whole bench takes longer")
	fs.DurationVar(&f.setupLimit, "setup-timeout", 10*time.Minute, "limit of creating and pausing the destinations, and of the baseline restart")
	fs.DurationVar(&f.fillLimit, "fill-timeout", 45*time.Minute, "limit of the fill: publishing and the health API counting every event pending")
	fs.DurationVar(&f.rebuildLimit, "rebuild-timeout", 15*time.Minute, "limit of the restart: process start to every event pending again")
	fs.StringVar(&f.profileDir, "profile-dir", "", "write CPU and allocation profiles of the server during the small drains (small.pprof, small-allocs.pprof) and the full backlog's window (full.pprof, full-allocs.pprof), and a heap profile after that window (full-heap.pprof), into `DIR`")
	fs.DurationVar(&f.phaseLimit, "phase-timeout", 10*time.Minute, "limit of each other phase (small drains, lookups, resuming every destination, pause/resume of big)")
	fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := f.check(); err != nil {
		return err
	}
	if f.profileDir != "" {
		if err := os.MkdirAll(f.profileDir, 0o755); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	err := f.run(ctx)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("overran -timeout %s: %w", f.timeout, err)
	}
	return err
}

func (f *scaleFlags) check() error {
	if f.dests < 2 || f.lanes < 10 || f.pending < f.lanes {
		return fmt.Errorf("need -destinations >= 2, -lanes >= 10 and -pending (%d) >= -lanes (%d)", f.pending, f.lanes)
	}
	if f.lanes-f.bigLanes() < f.dests-1 {
		return fmt.Errorf("-lanes %d leaves %d lanes for the %d destinations other than big: each needs one", f.lanes, f.lanes-f.bigLanes(), f.dests-1)
	}
	if f.small < 10*f.smallDests || f.smallDests < 1 || f.smallRounds < 1 {
		return errors.New("need -small-dests >= 1, -small-rounds >= 1 and -small >= 10 x -small-dests")
	}
	if f.batch <= 0 || f.conc <= 0 || f.payload < 2 || f.lookups <= 0 || f.lists <= 0 || f.adminConc <= 0 || f.window <= 0 {
		return errors.New("-batch, -c, -lookups, -lists, -admin-c and -window must be positive, -payload at least 2")
	}
	return nil
}

// bigLanes is how many lanes (the first ones) belong to big.
func (f *scaleFlags) bigLanes() int { return f.lanes / 10 }

// bigPending is how many of the events fall on big's lanes.
func (f *scaleFlags) bigPending() int {
	return f.pending/f.lanes*f.bigLanes() + min(f.pending%f.lanes, f.bigLanes())
}

// scaleRun is one run's processes, clients and figures.
type scaleRun struct {
	f       *scaleFlags
	root    string
	dataDir string
	bin     string
	p       *rbProc
	hc      *http.Client
	admin   rivorav1connect.AdminServiceClient
	ingest  rivorav1connect.IngestServiceClient
	lanes   rivorav1connect.LaneServiceClient
	events  rivorav1connect.EventServiceClient

	big      string
	rest     []string // every destination but big
	scaleSet map[string]bool
	smalls   []string
	// main receives the deliveries of every destination but big; bigP
	// big's; smallP the small backlog's.
	main, bigP, smallP *partner.Partner
	bigLast            atomic.Int64 // UnixNano of the last request big's partner received
	bigFirst           atomic.Int64 // UnixNano of the first request big's partner received
	smallClock         struct {
		drainClock
		lastWhole time.Duration // the previous drain's, for the length of the next one's profile
	}
	run     string // idempotency key prefix, unique per run
	version uint64 // the newest config version the bench made
	samples []sampledEvent
	res     scaleResult
}

// drainClock times one drain from its partner's requests (no request
// arrives before it is reset: the destinations are paused): the first
// and the last, and those that cross a tenth and nine tenths of n; at
// these two it also reads the server's CPU time.
type drainClock struct {
	lo, hi                  atomic.Int64 // request counts whose arrival is kept
	pid                     atomic.Int64 // the server's, whose CPU is read
	seen                    atomic.Int64
	first, last, atLo, atHi atomic.Int64 // UnixNano
	cpuLo, cpuHi            atomic.Int64 // the server's CPU time (ns) at atLo and atHi
}

func (c *drainClock) reset(n, serverPid int) {
	c.lo.Store(int64(n / 10))
	c.hi.Store(int64(n - n/10))
	c.pid.Store(int64(serverPid))
	for _, v := range []*atomic.Int64{&c.seen, &c.first, &c.last, &c.atLo, &c.atHi, &c.cpuLo, &c.cpuHi} {
		v.Store(0)
	}
}

func (c *drainClock) saw(at time.Time) {
	n, t := c.seen.Add(1), at.UnixNano()
	c.first.CompareAndSwap(0, t)
	c.last.Store(t)
	switch n {
	case c.lo.Load():
		c.atLo.Store(t)
		c.cpuLo.Store(int64(processCPU(int(c.pid.Load()))))
	case c.hi.Load():
		c.atHi.Store(t)
		c.cpuHi.Store(int64(processCPU(int(c.pid.Load()))))
	}
}

// middle is the time from a tenth to nine tenths of the drain, how many
// requests it spans, and the server's CPU time meanwhile.
func (c *drainClock) middle() (time.Duration, int, time.Duration) {
	return time.Duration(c.atHi.Load() - c.atLo.Load()), int(c.hi.Load() - c.lo.Load()), time.Duration(c.cpuHi.Load() - c.cpuLo.Load())
}

// whole is the time from the first request to the last.
func (c *drainClock) whole() time.Duration { return time.Duration(c.last.Load() - c.first.Load()) }

// sampledEvent is an event whose id was kept for GetEvent.
type sampledEvent struct {
	index int
	id    string
}

type scaleResult struct {
	create, pause              time.Duration
	baselineInuse, baselineRSS uint64
	// the small drains: the middle eight tenths of each (requests and
	// time, summed), and each whole drain's time, summed.
	smallMiddle                  int
	smallMiddleTime              time.Duration
	smallMiddleCPU               time.Duration // the server's, over the middles
	smallWholeTime               time.Duration
	smallDelivered               int
	publish, toPending           time.Duration
	fillInuse, fillRSS           uint64
	shutdown                     time.Duration
	ready, rebuilt               time.Duration
	rebuildCPU                   time.Duration
	rebuiltInuse, rebuiltRSS     uint64
	settledInuse, settledRSS     uint64
	listBig, listOther, gets     []time.Duration
	resumeAll                    time.Duration
	fullDelivered                int
	fullWindow                   time.Duration
	fullCPU                      time.Duration // the server's, over the window
	backlogAtStart, backlogAtEnd int64
	bigPending                   int64
	pauseApplied, pauseEffect    time.Duration
	pauseLate                    int
	resumeApplied, resumeEffect  time.Duration
}

func (f *scaleFlags) run(ctx context.Context) error {
	fmt.Fprintf(os.Stderr, "bench scale: GOMAXPROCS=%d NumCPU=%d pending=%d lanes=%d destinations=%d payload=%dB partitions=%d workers=%d\n",
		runtime.GOMAXPROCS(0), runtime.NumCPU(), f.pending, f.lanes, f.dests, f.payload, f.partitions, f.workers)
	root, err := os.MkdirTemp("", "rivora-scale-")
	if err != nil {
		return err
	}
	defer func() {
		if f.keep {
			progress("kept %s", root)
			return
		}
		os.RemoveAll(root)
	}()
	r := &scaleRun{f: f, root: root, dataDir: filepath.Join(root, "data"), run: strconv.FormatInt(time.Now().UnixNano(), 36)}
	if r.bin, err = buildRivora(ctx, f.bin, root); err != nil {
		return err
	}
	if err := r.startPartners(); err != nil {
		return err
	}
	defer r.closePartners()
	defer func() { r.stopProcess() }()

	steps := []struct {
		name  string
		limit time.Duration
		run   func(context.Context) error
	}{
		{"setup", f.setupLimit, r.setup},
		{"delivery at the small backlog", f.phaseLimit, r.smallDrains},
		{"fill", f.fillLimit, r.fill},
		{"restart", f.rebuildLimit, r.restart},
		{"lookups", f.phaseLimit, r.lookups},
		{"resume and pause big", f.phaseLimit, r.pauseResumeBig},
		{"delivery at the full backlog", f.phaseLimit + f.warmup + f.window, r.deliverFull},
	}
	for _, s := range steps {
		if err := phase(ctx, s.name, s.limit, s.run); err != nil {
			return err
		}
	}
	return r.report()
}

// phase runs one phase under its limit and names it in a failure.
func phase(ctx context.Context, name string, limit time.Duration, run func(context.Context) error) error {
	pctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	progress("phase %s (limit %s)", name, limit)
	err := run(pctx)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", name, err)
	case pctx.Err() != nil:
		return fmt.Errorf("%s overran its limit of %s: %w", name, limit, err)
	}
	return fmt.Errorf("%s: %w", name, err)
}

func (r *scaleRun) startPartners() error {
	var err error
	if r.main, err = partner.Start(partner.Options{CountOnly: true}); err != nil {
		return err
	}
	// Answer sees every request as it arrives (returning 0 keeps the
	// partner's own 200): it timestamps what the pause and the small
	// drains are measured by.
	if r.bigP, err = partner.Start(partner.Options{CountOnly: true, Answer: func(rq partner.Request) int {
		r.bigLast.Store(rq.At.UnixNano())
		r.bigFirst.CompareAndSwap(0, rq.At.UnixNano())
		return 0
	}}); err != nil {
		return err
	}
	r.smallP, err = partner.Start(partner.Options{CountOnly: true, Answer: func(rq partner.Request) int {
		r.smallClock.saw(rq.At)
		return 0
	}})
	return err
}

func (r *scaleRun) closePartners() {
	for _, p := range []*partner.Partner{r.main, r.bigP, r.smallP} {
		if p != nil {
			p.Close()
		}
	}
}

// start starts `rivora dev` on the run's data dir and waits for /healthz.
func (r *scaleRun) start(ctx context.Context, logName string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"dev", "--listen", addr, "--data-dir", r.dataDir, "--pprof",
		"--partitions", strconv.Itoa(r.f.partitions), "--workers", strconv.Itoa(r.f.workers),
		// The small backlog's destinations come on top of -destinations
		// (whose default is the cap's).
		"--max-destinations", strconv.Itoa(r.f.dests + r.f.smallDests)}
	if r.f.fsync {
		args = append(args, "--fsync")
	}
	args = append(args, r.f.devArgs...)
	p, err := startProc(r.bin, "rivora dev", addr, filepath.Join(r.root, logName), args, false)
	if err != nil {
		return err
	}
	r.p = &rbProc{proc: p}
	if r.hc == nil {
		r.hc = r.f.httpClient(max(r.f.conc, r.f.adminConc) + 4)
	}
	base := p.url()
	r.admin = rivorav1connect.NewAdminServiceClient(r.hc, base)
	r.ingest = rivorav1connect.NewIngestServiceClient(r.hc, base)
	r.lanes = rivorav1connect.NewLaneServiceClient(r.hc, base)
	r.events = rivorav1connect.NewEventServiceClient(r.hc, base)
	return nil
}

// stopProcess ends the running process (cleanup: a backlog is left).
func (r *scaleRun) stopProcess() {
	if r.p != nil {
		r.p.stop(30 * time.Second)
	}
}

// ---------------------------------------------------------------------------
// setup

var scaleLimits = &rivorav1.Limits{RatePerSecond: 100_000, Burst: 10_000}

func (r *scaleRun) setup(ctx context.Context) error {
	f := r.f
	r.big = "scale-big"
	r.scaleSet = map[string]bool{r.big: true}
	for i := range f.dests - 1 {
		id := fmt.Sprintf("scale-%05d", i)
		r.rest = append(r.rest, id)
		r.scaleSet[id] = true
	}
	for i := range f.smallDests {
		r.smalls = append(r.smalls, fmt.Sprintf("small-%02d", i))
	}
	if err := r.start(ctx, "first.log"); err != nil {
		return err
	}
	if _, err := r.p.waitHealthy(ctx, 0, 50*time.Millisecond); err != nil {
		return err
	}
	progress("creating %d destinations (%d at a time) and %d for the small backlog", f.dests, f.adminConc, f.smallDests)
	t0 := time.Now()
	all := append(append([]string{r.big}, r.rest...), r.smalls...)
	if err := r.eachDestination(ctx, all, "create", func(ctx context.Context, id string) (uint64, error) {
		url := r.main.DestURL(id)
		switch {
		case id == r.big:
			url = r.bigP.DestURL(id)
		case slices.Contains(r.smalls, id):
			url = r.smallP.DestURL(id)
		}
		resp, err := r.admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: id, Url: url, Limits: scaleLimits}))
		if err != nil {
			return 0, err
		}
		return resp.Msg.GetVersion(), nil
	}); err != nil {
		return err
	}
	r.res.create = time.Since(t0)
	progress("created in %s", r.res.create.Round(time.Millisecond))
	t0 = time.Now()
	if err := r.setPaused(ctx, append(append([]string{r.big}, r.rest...), r.smalls...), true); err != nil {
		return err
	}
	r.res.pause = time.Since(t0)
	progress("paused in %s", r.res.pause.Round(time.Millisecond))

	// The baseline is a restarted process, as the one measured after the
	// rebuild is.
	if _, err := r.p.terminate(60 * time.Second); err != nil {
		return err
	}
	if err := r.start(ctx, "baseline.log"); err != nil {
		return err
	}
	if _, err := r.p.waitHealthy(ctx, 0, 50*time.Millisecond); err != nil {
		return err
	}
	if err := waitApplied(ctx, r.admin, r.version); err != nil {
		return err
	}
	inuse, err := r.settledHeap(ctx)
	if err != nil {
		return err
	}
	r.res.baselineInuse, r.res.baselineRSS = inuse, r.p.rss()
	progress("baseline (restarted, %d paused destinations, nothing pending): heap in use %.1f MB, RSS %.1f MB",
		f.dests+f.smallDests, mb(r.res.baselineInuse), mb(r.res.baselineRSS))
	return nil
}

// eachDestination makes call for every id, -admin-c at a time, and then
// waits until the agent applied the newest config version they made.
func (r *scaleRun) eachDestination(ctx context.Context, ids []string, what string, call func(context.Context, string) (uint64, error)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next, done atomic.Int64
	var newest atomic.Uint64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	if len(ids) >= 1000 {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			tick := time.NewTicker(5 * time.Second)
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
					progress("%s: %d/%d", what, done.Load(), len(ids))
				case <-stop:
					return
				}
			}
		}()
	}
	for range min(r.f.adminConc, len(ids)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ids) || ctx.Err() != nil {
					return
				}
				v, err := call(ctx, ids[i])
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("%s %s: %w", what, ids[i], err); cancel() })
					return
				}
				for old := newest.Load(); v > old && !newest.CompareAndSwap(old, v); old = newest.Load() {
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.version = max(r.version, newest.Load())
	return waitApplied(ctx, r.admin, newest.Load())
}

// setPaused pauses or resumes ids and waits until the agent applied it.
func (r *scaleRun) setPaused(ctx context.Context, ids []string, paused bool) error {
	if paused {
		return r.eachDestination(ctx, ids, "pause", func(ctx context.Context, id string) (uint64, error) {
			resp, err := r.admin.PauseDestination(ctx, connect.NewRequest(&rivorav1.PauseDestinationRequest{
				DestinationId: id, Reason: "bench scale: filling", Author: "bench"}))
			if err != nil {
				return 0, err
			}
			return resp.Msg.GetVersion(), nil
		})
	}
	return r.eachDestination(ctx, ids, "resume", func(ctx context.Context, id string) (uint64, error) {
		resp, err := r.admin.ResumeDestination(ctx, connect.NewRequest(&rivorav1.ResumeDestinationRequest{DestinationId: id, Author: "bench"}))
		if err != nil {
			return 0, err
		}
		return resp.Msg.GetVersion(), nil
	})
}

// settledHeap is the heap in use after two forced GCs.
func (r *scaleRun) settledHeap(ctx context.Context) (uint64, error) {
	if _, _, err := r.p.heap(ctx, ""); err != nil {
		return 0, err
	}
	inuse, _, err := r.p.heap(ctx, "")
	return inuse, err
}

// pendingOf sums the health API's pending events over the destinations
// in set.
func (r *scaleRun) pendingOf(ctx context.Context, set map[string]bool) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := r.admin.GetDestinationHealth(cctx, connect.NewRequest(&rivorav1.GetDestinationHealthRequest{}))
	if err != nil {
		return 0, err
	}
	var n int64
	for _, h := range resp.Msg.GetDestinations() {
		if set[h.GetDestinationId()] {
			n += h.GetPendingEvents()
		}
	}
	return n, nil
}

// waitPending waits until the health API counts want pending events on
// the scale destinations, logging progress every few seconds.
func (r *scaleRun) waitPending(ctx context.Context, want int64, every time.Duration) error {
	var last int64 = -1
	var lastErr error
	lastLog := time.Now()
	for {
		n, err := r.pendingOf(ctx, r.scaleSet)
		lastErr = err
		if err == nil {
			last = n
			if n == want {
				return nil
			}
			if n > want {
				return fmt.Errorf("the health API counts %d pending, more than the %d published", n, want)
			}
		}
		if time.Since(lastLog) >= 5*time.Second {
			lastLog = time.Now()
			progress("pending %d/%d (last error: %v)", last, want, lastErr)
		}
		if err := r.p.diedErr(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the health API counts %d of %d pending (last error: %v): %w", last, want, lastErr, ctx.Err())
		case <-time.After(every):
		}
	}
}

// ---------------------------------------------------------------------------
// delivery at the small backlog

// smallEvent is event i of a small backlog: 10 events per lane, lanes
// spread round robin over the small destinations.
func (r *scaleRun) smallEvent(round, i int, body []byte) *rivorav1.PublishRequest {
	lanes := r.f.small / 10
	lane := i % lanes
	return &rivorav1.PublishRequest{
		DestinationId: r.smalls[lane%len(r.smalls)], CustomerId: "c" + strconv.Itoa(lane%16),
		LaneKey: "small-" + strconv.Itoa(lane), Type: "bench.scale.small", Payload: body,
		IdempotencyKey: r.key(fmt.Sprintf("small-%d-%d", round, i)),
	}
}

// key is an idempotency key unique to this run ("" without -keys).
func (r *scaleRun) key(s string) string {
	if !r.f.keys {
		return ""
	}
	return r.run + "-" + s
}

func (r *scaleRun) smallDrains(ctx context.Context) error {
	f := r.f
	body := payload(f.payload, 11)
	smallSet := map[string]bool{}
	for _, id := range r.smalls {
		smallSet[id] = true
	}
	var smallProfiles, smallAllocs []*profile.Profile
	for round := range f.smallRounds {
		if round > 0 {
			if err := r.setPaused(ctx, r.smalls, true); err != nil {
				return err
			}
		}
		pub := &batchPublish{n: f.small, batch: min(f.batch, 500), conc: f.conc, event: func(i int) *rivorav1.PublishRequest {
			return r.smallEvent(round, i, body)
		}}
		if err := pub.run(ctx, r.ingest); err != nil {
			return err
		}
		if err := until(ctx, time.Minute, 20*time.Millisecond, "the small backlog pending", func() error {
			n, err := r.pendingOf(ctx, smallSet)
			if err == nil && n != int64(f.small) {
				err = fmt.Errorf("%d of %d pending", n, f.small)
			}
			return err
		}); err != nil {
			return err
		}
		before := r.smallP.Delivered()
		r.smallClock.reset(f.small, r.p.Pid())
		// The profile starts before the resume and lasts about as long
		// as the drain before it took (the first: 2 s); what follows a
		// drain within it is the idle process.
		profileSeconds := 2
		if round > 0 {
			profileSeconds = max(1, int(math.Ceil(1.2*r.smallClock.lastWhole.Seconds())))
		}
		waitProfile := r.startProfile(ctx, "profile", profileSeconds)
		waitAllocs := r.startProfile(ctx, "allocs", profileSeconds)
		if err := r.setPaused(ctx, r.smalls, false); err != nil {
			return err
		}
		want := before + f.small
		if err := until(ctx, time.Minute, 5*time.Millisecond, "the small backlog delivered", func() error {
			if n := r.smallP.Delivered(); n < want {
				return fmt.Errorf("%d of %d delivered", n-before, f.small)
			}
			return nil
		}); err != nil {
			return err
		}
		middle, middleN, middleCPU := r.smallClock.middle()
		whole := r.smallClock.whole()
		r.smallClock.lastWhole = whole
		if p, err := waitProfile(); err != nil {
			return fmt.Errorf("CPU profile of small drain %d: %w", round+1, err)
		} else if p != nil {
			smallProfiles = append(smallProfiles, p)
		}
		if p, err := waitAllocs(); err != nil {
			return fmt.Errorf("allocation profile of small drain %d: %w", round+1, err)
		} else if p != nil {
			smallAllocs = append(smallAllocs, p)
		}
		if dup := r.smallP.Count() - r.smallP.Delivered(); dup > 0 {
			progress("round %d: the small partner saw %d requests beyond the distinct events", round+1, dup)
		}
		r.res.smallDelivered += f.small
		r.res.smallWholeTime += whole
		r.res.smallMiddle += middleN
		r.res.smallMiddleTime += middle
		r.res.smallMiddleCPU += middleCPU
		progress("small backlog, round %d/%d: %d events drained in %s (first to last request) = %.0f/s; its middle eight tenths %.0f/s, server CPU %.1f µs/delivery",
			round+1, f.smallRounds, f.small, whole.Round(time.Millisecond), float64(f.small)/whole.Seconds(), float64(middleN)/middle.Seconds(),
			float64(middleCPU.Microseconds())/float64(middleN))
	}
	if err := writeMergedProfile(f.profileDir, "small-allocs.pprof", smallAllocs); err != nil {
		return err
	}
	return writeMergedProfile(f.profileDir, "small.pprof", smallProfiles)
}

// ---------------------------------------------------------------------------
// fill

// event is event i of the big backlog.
func (r *scaleRun) event(i int, body []byte) *rivorav1.PublishRequest {
	lane := i % r.f.lanes
	return &rivorav1.PublishRequest{
		DestinationId: r.destinationOf(lane), CustomerId: "c" + strconv.Itoa(lane%16),
		LaneKey: "lane-" + strconv.Itoa(lane), Type: "bench.scale", Payload: body,
		IdempotencyKey: r.key(strconv.Itoa(i)),
	}
}

// destinationOf is the destination of lane: big's are the first tenth.
func (r *scaleRun) destinationOf(lane int) string {
	if lane < r.f.bigLanes() {
		return r.big
	}
	return r.rest[(lane-r.f.bigLanes())%len(r.rest)]
}

func (r *scaleRun) fill(ctx context.Context) error {
	f := r.f
	if n := r.main.Count() + r.bigP.Count(); n > 0 {
		return fmt.Errorf("the partners received %d requests although every scale destination is paused", n)
	}
	progress("publishing %d events over %d lanes and %d paused destinations (big: %d events over %d lanes): PublishBatch of %d, %d concurrent, %d B payload, keys %v",
		f.pending, f.lanes, f.dests, f.bigPending(), f.bigLanes(), f.batch, f.conc, f.payload, f.keys)
	t0 := time.Now()
	if err := r.publishAll(ctx); err != nil {
		return err
	}
	lastAck := time.Now()
	r.res.publish = lastAck.Sub(t0)
	progress("published %d events in %s (%.0f/s)", f.pending, r.res.publish.Round(time.Millisecond), float64(f.pending)/r.res.publish.Seconds())
	if err := r.waitPending(ctx, int64(f.pending), time.Second); err != nil {
		return err
	}
	r.res.toPending = time.Since(t0)
	progress("the health API counts all %d pending %s after the first publish", f.pending, r.res.toPending.Round(time.Millisecond))
	// One forced GC: the filled heap is informative, and a forced GC of
	// a heap this size takes long on a shared machine.
	if inuse, _, err := r.p.heap(ctx, ""); err == nil {
		r.res.fillInuse, r.res.fillRSS = inuse, r.p.rss()
		progress("filled process: heap in use %.1f MB, RSS %.1f MB", mb(inuse), mb(r.res.fillRSS))
	}
	if wait := f.age - time.Since(lastAck); wait > 0 {
		progress("waiting %s, until the last ack is %s old (-age)", wait.Round(time.Second), f.age)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if n := r.main.Count() + r.bigP.Count(); n > 0 {
		return fmt.Errorf("the partners received %d requests although every scale destination is paused", n)
	}
	return nil
}

// publishAll publishes every event of the big backlog, keeping the ids of
// a sample for the lookups, with progress (rate) every 5 s.
func (r *scaleRun) publishAll(ctx context.Context) error {
	f := r.f
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	body := payload(f.payload, 9)
	sampleEvery := max(1, f.pending/20_000)
	batches := (f.pending + f.batch - 1) / f.batch
	var next, acked atomic.Int64
	var firstErr error
	var once sync.Once
	samples := make([][]sampledEvent, f.conc)
	var wg sync.WaitGroup
	for w := range f.conc {
		wg.Go(func() {
			for {
				b := int(next.Add(1)) - 1
				if b >= batches || ctx.Err() != nil {
					return
				}
				lo, hi := b*f.batch, min((b+1)*f.batch, f.pending)
				events := make([]*rivorav1.PublishRequest, 0, hi-lo)
				for i := lo; i < hi; i++ {
					events = append(events, r.event(i, body))
				}
				cctx, ccancel := context.WithTimeout(ctx, time.Minute)
				resp, err := r.ingest.PublishBatch(cctx, connect.NewRequest(&rivorav1.PublishBatchRequest{Events: events}))
				ccancel()
				if err == nil && len(resp.Msg.GetEventIds()) != len(events) {
					err = fmt.Errorf("%d ids for %d events", len(resp.Msg.GetEventIds()), len(events))
				}
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("batch %d: %w", b, err); cancel() })
					return
				}
				for i := lo; i < hi; i++ {
					if i%sampleEvery == 0 {
						samples[w] = append(samples[w], sampledEvent{i, resp.Msg.GetEventIds()[i-lo]})
					}
				}
				acked.Add(int64(hi - lo))
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	start := time.Now()
	last, lastN := start, int64(0)
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case now := <-tick.C:
			n := acked.Load()
			progress("filled %d/%d: %.0f/s in the last %s, %.0f/s on average", n, f.pending,
				float64(n-lastN)/now.Sub(last).Seconds(), now.Sub(last).Round(time.Second), float64(n)/now.Sub(start).Seconds())
			last, lastN = now, n
		}
	}
	if firstErr != nil {
		return fmt.Errorf("publish: %w", firstErr)
	}
	if n := acked.Load(); n != int64(f.pending) {
		return fmt.Errorf("publish: %d of %d acked: %w", n, f.pending, ctx.Err())
	}
	r.samples = slices.Concat(samples...)
	return nil
}

// ---------------------------------------------------------------------------
// restart

func (r *scaleRun) restart(ctx context.Context) error {
	f := r.f
	progress("SIGTERM")
	var err error
	if r.res.shutdown, err = r.p.terminate(2 * time.Minute); err != nil {
		return err
	}
	progress("stopped gracefully in %s", r.res.shutdown.Round(time.Millisecond))
	if err := r.start(ctx, "restart.log"); err != nil {
		return err
	}
	// The data dir holds the admin token since the first start: the health
	// API is polled before /healthz answers.
	registerAdminToken(r.dataDir, r.p.url())
	readyErr := make(chan error, 1)
	go func() {
		d, err := r.p.waitHealthy(ctx, 0, 10*time.Millisecond)
		r.res.ready = d
		if err == nil {
			progress("/healthz 200 after %s", d.Round(time.Millisecond))
		}
		readyErr <- err
	}()
	// Each health call walks every lane: polled 4 times a second, it
	// costs the rebuild little and times it to a quarter second.
	if err := r.waitPending(ctx, int64(f.pending), 250*time.Millisecond); err != nil {
		return fmt.Errorf("after the restart: %w; log:\n%s", err, r.p.Tail(8<<10))
	}
	r.res.rebuilt = time.Since(r.p.Started())
	r.res.rebuildCPU = r.p.cpu()
	if err := <-readyErr; err != nil {
		return err
	}
	progress("the health API counts all %d pending %s after the process started (%.0f events/s)",
		f.pending, r.res.rebuilt.Round(time.Millisecond), float64(f.pending)/r.res.rebuilt.Seconds())
	if r.res.rebuiltInuse, _, err = r.p.heap(ctx, ""); err != nil {
		return err
	}
	r.res.rebuiltRSS = r.p.rss()
	progress("right after the rebuild (one forced GC): heap in use %.1f MB, RSS %.1f MB; settling %s", mb(r.res.rebuiltInuse), mb(r.res.rebuiltRSS), f.settle)
	select {
	case <-time.After(f.settle):
	case <-ctx.Done():
		return ctx.Err()
	}
	if r.res.settledInuse, err = r.settledHeap(ctx); err != nil {
		return err
	}
	r.res.settledRSS = r.p.rss()
	progress("settled: heap in use %.1f MB, RSS %.1f MB", mb(r.res.settledInuse), mb(r.res.settledRSS))
	return nil
}

// ---------------------------------------------------------------------------
// lookups

func (r *scaleRun) lookups(ctx context.Context) error {
	f := r.f
	rng := rand.New(rand.NewPCG(26, uint64(f.pending)))
	progress("%d ListLanes on big (%d lanes), %d on random other destinations", f.lists, f.bigLanes(), f.lists)
	for i := range 2 * f.lists {
		dest := r.big
		if i%2 == 1 {
			dest = r.rest[rng.IntN(len(r.rest))]
		}
		took, err := r.listLanes(ctx, dest)
		if err != nil {
			return err
		}
		if dest == r.big {
			r.res.listBig = append(r.res.listBig, took)
		} else {
			r.res.listOther = append(r.res.listOther, took)
		}
	}
	progress("%d GetEvent on random pending events (from %d sampled ids)", f.lookups, len(r.samples))
	for range f.lookups {
		s := r.samples[rng.IntN(len(r.samples))]
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		t0 := time.Now()
		resp, err := r.events.GetEvent(cctx, connect.NewRequest(&rivorav1.GetEventRequest{EventId: s.id}))
		took := time.Since(t0)
		cancel()
		if err != nil {
			return fmt.Errorf("GetEvent(%s, event %d): %w", s.id, s.index, err)
		}
		want := r.destinationOf(s.index % f.lanes)
		if st, d := resp.Msg.GetState(), resp.Msg.GetDestinationId(); st != rivorav1.EventState_EVENT_STATE_PENDING || d != want {
			return fmt.Errorf("GetEvent(%s, event %d) = %v on %s, want pending on %s", s.id, s.index, st, d, want)
		}
		r.res.gets = append(r.res.gets, took)
	}
	for _, l := range [][]time.Duration{r.res.listBig, r.res.listOther, r.res.gets} {
		slices.Sort(l)
	}
	progress("lanes list on big p50 %.1f ms, p99 %.1f ms; on others p50 %.1f ms, p99 %.1f ms; events get p50 %.2f ms, p99 %.2f ms",
		ms(percentile(r.res.listBig, 0.5)), ms(percentile(r.res.listBig, 0.99)),
		ms(percentile(r.res.listOther, 0.5)), ms(percentile(r.res.listOther, 0.99)),
		ms(percentile(r.res.gets, 0.5)), ms(percentile(r.res.gets, 0.99)))
	return nil
}

// listLanes times one ListLanes (limit 100) and checks its answer.
func (r *scaleRun) listLanes(ctx context.Context, dest string) (time.Duration, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t0 := time.Now()
	resp, err := r.lanes.ListLanes(cctx, connect.NewRequest(&rivorav1.ListLanesRequest{DestinationId: dest, Limit: 100}))
	took := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("ListLanes(%s): %w", dest, err)
	}
	matched := resp.Msg.GetMatched()
	if dest == r.big && matched != int64(r.f.bigLanes()) {
		return 0, fmt.Errorf("ListLanes(%s) matched %d lanes, want %d", dest, matched, r.f.bigLanes())
	}
	if matched == 0 || len(resp.Msg.GetLanes()) != int(min(matched, 100)) {
		return 0, fmt.Errorf("ListLanes(%s) listed %d of %d matched lanes (limit 100)", dest, len(resp.Msg.GetLanes()), matched)
	}
	return took, nil
}

// ---------------------------------------------------------------------------
// delivery at the full backlog

func (r *scaleRun) deliverFull(ctx context.Context) error {
	f := r.f
	ids := append([]string{r.big}, r.rest...)
	progress("resuming %d destinations (%d at a time)", len(ids), f.adminConc)
	t0 := time.Now()
	if err := r.setPaused(ctx, ids, false); err != nil {
		return err
	}
	r.res.resumeAll = time.Since(t0)
	delivered := func() int { return r.main.Delivered() + r.bigP.Delivered() }
	// As the small drains leave out their first tenth, the window leaves
	// out the first seconds after the resume (the agent applying its
	// last config versions).
	progress("resumed in %s (%d delivered meanwhile); warming up for %s", r.res.resumeAll.Round(time.Millisecond), delivered(), f.warmup)
	select {
	case <-time.After(f.warmup):
	case <-ctx.Done():
		return ctx.Err()
	}
	start, atStart := time.Now(), delivered()
	r.res.backlogAtStart = int64(f.pending - atStart)
	if r.res.backlogAtStart < int64(f.pending)/2 {
		return fmt.Errorf("%d of the %d events were delivered during the resume and the warm-up: too few are left to measure delivery at the full backlog (a larger -pending, or a shorter -warmup)", atStart, f.pending)
	}
	cpuAtStart := r.p.cpu()
	waitProfile := r.startProfile(ctx, "profile", int(math.Ceil(f.window.Seconds())))
	waitAllocs := r.startProfile(ctx, "allocs", int(math.Ceil(f.window.Seconds())))
	progress("counting deliveries for %s (%d delivered so far)", f.window, atStart)
	end := start.Add(f.window)
	lastLog, lastN := start, atStart
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(5*time.Second, time.Until(end))):
		}
		if err := r.p.diedErr(); err != nil {
			return err
		}
		now, n := time.Now(), delivered()
		progress("delivering: %.0f/s in the last %s, %d delivered", float64(n-lastN)/now.Sub(lastLog).Seconds(), now.Sub(lastLog).Round(time.Second), n)
		lastLog, lastN = now, n
	}
	atEnd := delivered()
	r.res.fullCPU = r.p.cpu() - cpuAtStart
	r.res.fullWindow = time.Since(start)
	r.res.fullDelivered = atEnd - atStart
	r.res.backlogAtEnd = int64(f.pending - atEnd)
	if r.res.fullDelivered == 0 {
		return fmt.Errorf("nothing delivered in %s after every destination was resumed", f.window)
	}
	progress("at the full backlog (%d → %d pending): %d delivered in %s = %.0f/s, server CPU %.1f µs/delivery", r.res.backlogAtStart, r.res.backlogAtEnd,
		r.res.fullDelivered, r.res.fullWindow.Round(time.Millisecond), float64(r.res.fullDelivered)/r.res.fullWindow.Seconds(),
		float64(r.res.fullCPU.Microseconds())/float64(r.res.fullDelivered))
	p, err := waitProfile()
	if err != nil {
		return fmt.Errorf("CPU profile of the full backlog's window: %w", err)
	}
	allocs, err := waitAllocs()
	if err != nil {
		return fmt.Errorf("allocation profile of the full backlog's window: %w", err)
	}
	if p == nil {
		return nil
	}
	if err := writeMergedProfile(f.profileDir, "full.pprof", []*profile.Profile{p}); err != nil {
		return err
	}
	if err := writeMergedProfile(f.profileDir, "full-allocs.pprof", []*profile.Profile{allocs}); err != nil {
		return err
	}
	// The heap at the full backlog, while it still delivers (the forced
	// GC makes it the live heap).
	if _, _, err := r.p.heap(ctx, filepath.Join(f.profileDir, "full-heap.pprof")); err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	progress("profiles: go tool pprof -top -diff_base %s %s   (and small-allocs.pprof, full-allocs.pprof, full-heap.pprof)",
		filepath.Join(f.profileDir, "small.pprof"), filepath.Join(f.profileDir, "full.pprof"))
	return nil
}

// startProfile starts a profile of the server over the next seconds
// (-profile-dir): kind "profile" is the CPU profile, "allocs" what was
// allocated meanwhile (a delta). wait returns it once it is over (nil
// without -profile-dir).
func (r *scaleRun) startProfile(ctx context.Context, kind string, seconds int) (wait func() (*profile.Profile, error)) {
	if r.f.profileDir == "" {
		return func() (*profile.Profile, error) { return nil, nil }
	}
	type result struct {
		p   *profile.Profile
		err error
	}
	done := make(chan result, 1)
	url := fmt.Sprintf("%s/debug/pprof/%s?seconds=%d", r.p.url(), kind, seconds)
	go func() {
		p, err := fetchProfile(ctx, url)
		done <- result{p, err}
	}()
	return func() (*profile.Profile, error) {
		res := <-done
		return res.p, res.err
	}
}

// fetchProfile GETs a pprof profile from the server's /debug/pprof.
func fetchProfile(ctx context.Context, url string) (*profile.Profile, error) {
	hc := &http.Client{Transport: withBearer(nil)}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return profile.Parse(resp.Body)
}

// writeMergedProfile writes the merge of profiles (none: nothing) to
// dir/name.
func writeMergedProfile(dir, name string, profiles []*profile.Profile) error {
	if dir == "" || len(profiles) == 0 {
		return nil
	}
	merged, err := profile.Merge(profiles)
	if err != nil {
		return fmt.Errorf("merge %s: %w", name, err)
	}
	out, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	if err := merged.Write(out); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// ---------------------------------------------------------------------------
// pause and resume big

func (r *scaleRun) pauseResumeBig(ctx context.Context) error {
	f := r.f
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	got, err := r.admin.GetDestination(cctx, connect.NewRequest(&rivorav1.GetDestinationRequest{Id: r.big}))
	cancel()
	if err != nil {
		return fmt.Errorf("get destination %s: %w", r.big, err)
	}
	r.res.bigPending = got.Msg.GetPending()

	// big's partner has received nothing yet (checked after the fill), so
	// its first request follows the resume.
	progress("resuming %s (%d pending), every other destination paused", r.big, r.res.bigPending)
	t0 := time.Now()
	rresp, err := r.admin.ResumeDestination(ctx, connect.NewRequest(&rivorav1.ResumeDestinationRequest{DestinationId: r.big, Author: "bench"}))
	if err != nil {
		return fmt.Errorf("resume %s: %w", r.big, err)
	}
	appliedErr := make(chan error, 1)
	go func() {
		err := waitApplied(ctx, r.admin, rresp.Msg.GetVersion())
		r.res.resumeApplied = time.Since(t0)
		appliedErr <- err
	}()
	if err := until(ctx, time.Minute, time.Millisecond, fmt.Sprintf("a request to %s after the resume", r.big), func() error {
		if r.bigFirst.Load() == 0 {
			return errors.New("none yet")
		}
		return nil
	}); err != nil {
		return err
	}
	r.res.resumeEffect = time.Unix(0, r.bigFirst.Load()).Sub(t0)
	if err := <-appliedErr; err != nil {
		return err
	}
	progress("resume: applied after %s, first request %s after the call", r.res.resumeApplied.Round(time.Millisecond), r.res.resumeEffect.Round(time.Millisecond))

	// Pause it while it delivers at full pace.
	pace := int(min(2000, r.res.bigPending/2))
	if err := until(ctx, time.Minute, 10*time.Millisecond, fmt.Sprintf("%d requests to %s", pace, r.big), func() error {
		if n := r.bigP.Count(); n < pace {
			return fmt.Errorf("%d so far", n)
		}
		return nil
	}); err != nil {
		return err
	}
	progress("pausing %s while it delivers (%d requests so far)", r.big, r.bigP.Count())
	t0 = time.Now()
	resp, err := r.admin.PauseDestination(ctx, connect.NewRequest(&rivorav1.PauseDestinationRequest{
		DestinationId: r.big, Reason: "bench scale: pause take-effect", Author: "bench"}))
	if err != nil {
		return fmt.Errorf("pause %s: %w", r.big, err)
	}
	if err := waitApplied(ctx, r.admin, resp.Msg.GetVersion()); err != nil {
		return err
	}
	r.res.pauseApplied = time.Since(t0)
	countAtApplied := r.bigP.Count()
	// In effect once big's partner has received nothing for -quiet: its
	// last request then is when the pause took effect.
	if err := until(ctx, time.Minute, 50*time.Millisecond, fmt.Sprintf("%s's partner quiet for %s after the pause", r.big, f.quiet), func() error {
		last := time.Unix(0, r.bigLast.Load())
		if since := time.Since(last); since < f.quiet {
			return fmt.Errorf("a request %s ago", since.Round(time.Millisecond))
		}
		return nil
	}); err != nil {
		return err
	}
	r.res.pauseEffect = max(0, time.Unix(0, r.bigLast.Load()).Sub(t0))
	r.res.pauseLate = r.bigP.Count() - countAtApplied
	progress("pause: applied after %s, last request %s after the call (%d requests after it was applied)",
		r.res.pauseApplied.Round(time.Millisecond), r.res.pauseEffect.Round(time.Millisecond), r.res.pauseLate)
	return nil
}

// ---------------------------------------------------------------------------
// report

func (r *scaleRun) report() error {
	f, res := r.f, &r.res
	perEvent := (float64(res.settledInuse) - float64(res.baselineInuse)) / float64(f.pending)
	rssPerEvent := (float64(res.settledRSS) - float64(res.baselineRSS)) / float64(f.pending)
	fillRate := float64(f.pending) / res.publish.Seconds()
	at10k := float64(res.smallMiddle) / res.smallMiddleTime.Seconds()
	at10kWhole := float64(res.smallDelivered) / res.smallWholeTime.Seconds()
	atFull := float64(res.fullDelivered) / res.fullWindow.Seconds()
	cpuAt10k := float64(res.smallMiddleCPU.Microseconds()) / float64(res.smallMiddle)
	cpuAtFull := float64(res.fullCPU.Microseconds()) / float64(res.fullDelivered)
	listBig99, listOther99 := percentile(res.listBig, 0.99), percentile(res.listOther, 0.99)

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "scale: %d pending events over %d lanes and %d destinations (big: %d events over %d lanes), %d-byte payloads, keys %v, %d partitions, %d workers\n",
		f.pending, f.lanes, f.dests, f.bigPending(), f.bigLanes(), f.payload, f.keys, f.partitions, f.workers)
	fmt.Fprintln(tw, "measure\tvalue\tnote")
	fmt.Fprintf(tw, "setup\t%.1f s create, %.1f s pause\t%d destinations, %d admin calls at a time, each step until the agent applied it\n", res.create.Seconds(), res.pause.Seconds(), f.dests+f.smallDests, f.adminConc)
	fmt.Fprintf(tw, "fill\t%.0f events/s\t%d events acked in %.1f s (PublishBatch of %d, %d concurrent); all pending after %.1f s\n",
		fillRate, f.pending, res.publish.Seconds(), f.batch, f.conc, res.toPending.Seconds())
	fmt.Fprintf(tw, "heap baseline\t%.1f MB in use, RSS %.1f MB\trestarted, every destination paused, nothing pending; two forced GCs\n", mb(res.baselineInuse), mb(res.baselineRSS))
	fmt.Fprintf(tw, "heap filled\t%.1f MB in use, RSS %.1f MB\tthe filling process, all pending, one forced GC\n", mb(res.fillInuse), mb(res.fillRSS))
	fmt.Fprintf(tw, "graceful stop\t%.1f s\tSIGTERM to exit 0\n", res.shutdown.Seconds())
	fmt.Fprintf(tw, "ready_s\t%.2f s\tprocess start to /healthz 200\n", res.ready.Seconds())
	fmt.Fprintf(tw, "rebuild_s\t%.2f s\tprocess start to the health API counting all %d pending: %.0f events/s; server CPU %.1f s\n",
		res.rebuilt.Seconds(), f.pending, float64(f.pending)/res.rebuilt.Seconds(), res.rebuildCPU.Seconds())
	fmt.Fprintf(tw, "heap rebuilt\t%.1f MB in use, RSS %.1f MB\tright after the rebuild, one forced GC\n", mb(res.rebuiltInuse), mb(res.rebuiltRSS))
	fmt.Fprintf(tw, "heap settled\t%.1f MB in use, RSS %.1f MB\t%s after the rebuild\n", mb(res.settledInuse), mb(res.settledRSS), f.settle)
	fmt.Fprintf(tw, "per pending event\t%.0f B heap, %.0f B RSS\t(settled - baseline) / pending; payloads are in the store\n", perEvent, rssPerEvent)
	fmt.Fprintf(tw, "lanes list, big\tp50 %.1f ms, p99 %.1f ms\t%d calls, limit 100, %d lanes matched\n", ms(percentile(res.listBig, 0.5)), ms(listBig99), len(res.listBig), f.bigLanes())
	fmt.Fprintf(tw, "lanes list, others\tp50 %.1f ms, p99 %.1f ms\t%d calls on random destinations of ~%d lanes\n", ms(percentile(res.listOther, 0.5)), ms(listOther99), len(res.listOther), (f.lanes-f.bigLanes())/len(r.rest))
	fmt.Fprintf(tw, "events get\tp50 %.2f ms, p99 %.2f ms\t%d random pending events, max %.2f ms\n", ms(percentile(res.gets, 0.5)), ms(percentile(res.gets, 0.99)), len(res.gets), ms(res.gets[len(res.gets)-1]))
	fmt.Fprintf(tw, "deliver at %d pending\t%.0f/s\t%d rounds before the fill: %d events on %d destinations of their own drained; their middle eight tenths (%.0f/s first to last request)\n",
		f.small, at10k, f.smallRounds, f.small, f.smallDests, at10kWhole)
	fmt.Fprintf(tw, "resume every destination\t%.1f s\t%d calls, until applied\n", res.resumeAll.Seconds(), f.dests)
	fmt.Fprintf(tw, "deliver at full\t%.0f/s\t%d delivered in %.1f s, backlog %d → %d, nothing published meanwhile\n",
		atFull, res.fullDelivered, res.fullWindow.Seconds(), res.backlogAtStart, res.backlogAtEnd)
	fmt.Fprintf(tw, "ratio full / small\t%.2f\t(target ≥ 0.8)\n", atFull/at10k)
	fmt.Fprintf(tw, "server CPU per delivery\t%.1f µs at %d, %.1f µs at full\tuser+system of the process over the small drains' middles and over the full window (/proc)\n",
		cpuAt10k, f.small, cpuAtFull)
	fmt.Fprintf(tw, "resume big\t%.0f ms\tcall to the first request big's partner received (%d pending, the others paused; applied after %.0f ms)\n",
		ms(res.resumeEffect), res.bigPending, ms(res.resumeApplied))
	fmt.Fprintf(tw, "pause big\t%.0f ms\tcall to the last request big's partner received, while it delivered (applied after %.0f ms; %d requests after that)\n",
		ms(res.pauseEffect), ms(res.pauseApplied), res.pauseLate)
	tw.Flush()
	if f.pending >= 10_000_000 {
		verdict := func(ok bool) string {
			if ok {
				return "met"
			}
			return "MISSED"
		}
		fmt.Printf("  targets: delivery at full ≥ 0.8 × at %d: %s; rebuild ≤ 30 s: %s; ≤ 300 B per pending event: %s\n",
			f.small, verdict(atFull >= 0.8*at10k), verdict(res.rebuilt <= 30*time.Second), verdict(perEvent <= 300))
	}
	out := map[string]float64{
		"pending":                    float64(f.pending),
		"lanes":                      float64(f.lanes),
		"destinations":               float64(f.dests),
		"fill_per_s":                 round(fillRate, 0),
		"bytes_per_pending_event":    round(perEvent, 0),
		"rss_per_pending_event":      round(rssPerEvent, 0),
		"ready_s":                    round(res.ready.Seconds(), 2),
		"rebuild_s":                  round(res.rebuilt.Seconds(), 2),
		"rebuild_events_per_s":       round(float64(f.pending)/res.rebuilt.Seconds(), 0),
		"deliver_per_s_at_10k":       round(at10k, 0),
		"deliver_per_s_at_full":      round(atFull, 0),
		"deliver_ratio":              round(atFull/at10k, 3),
		"server_cpu_us_at_10k":       round(cpuAt10k, 1),
		"server_cpu_us_at_full":      round(cpuAtFull, 1),
		"lanes_list_p50_ms":          round(ms(percentile(res.listBig, 0.5)), 2),
		"lanes_list_p99_ms":          round(ms(listBig99), 2),
		"lanes_list_other_p99_ms":    round(ms(listOther99), 2),
		"events_get_p50_ms":          round(ms(percentile(res.gets, 0.5)), 2),
		"events_get_p99_ms":          round(ms(percentile(res.gets, 0.99)), 2),
		"pause_take_effect_ms":       round(ms(res.pauseEffect), 1),
		"resume_take_effect_ms":      round(ms(res.resumeEffect), 1),
		"big_pending":                float64(res.bigPending),
		"deliver_per_s_at_10k_whole": round(at10kWhole, 0),
		"small_backlog":              float64(f.small),
		"payload_bytes":              float64(f.payload),
	}
	return printJSON(out, []string{"pending", "lanes", "destinations", "fill_per_s", "bytes_per_pending_event", "rss_per_pending_event",
		"ready_s", "rebuild_s", "rebuild_events_per_s", "deliver_per_s_at_10k", "deliver_per_s_at_10k_whole", "deliver_per_s_at_full", "deliver_ratio",
		"server_cpu_us_at_10k", "server_cpu_us_at_full", "lanes_list_p50_ms", "lanes_list_p99_ms", "lanes_list_other_p99_ms", "events_get_p50_ms", "events_get_p99_ms",
		"pause_take_effect_ms", "resume_take_effect_ms", "big_pending", "small_backlog", "payload_bytes"})
}
