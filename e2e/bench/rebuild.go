package main

// rebuild measures ARCHITECTURE.md rule 3 ("the queue is a scheduler, not
// the source of truth … rebuilt from the streams; target: 1M pending events
// in under 10 s") against a real `rivora dev`:
//
//	go run ./e2e/bench rebuild                               # 1,000,000 events over 100,000 lanes
//	go run ./e2e/bench rebuild -events 100000 -lanes 10000
//
// It creates a few destinations and pauses them (nothing is delivered),
// publishes N events over L lanes with PublishBatch, waits until
// GetDestinationHealth counts all N pending, stops the server with SIGTERM
// and restarts it on the same data dir. Measured from the restarted
// process's start: /healthz 200 (ready_s), and the health API reporting all
// N pending again (rebuild_s); the server log's `partition rebuilt … took=`
// lines are summed and their maximum reported. Memory: heap in use after a
// forced GC (GET /debug/pprof/heap?gc=1, so the server runs with --pprof)
// after the rebuild, minus the same on an empty restarted server with the
// same destinations (the baseline), divided by lanes and by events; the
// heap profiles taken with it split the per-event bytes between the
// embedded NATS server (stacks through nats-server) and Rivora (the rest).
// A SIGTERM lets each partition owner write a pending snapshot, and the
// restart rebuilds from it (the log says `partition rebuilt from
// snapshot`); -scan removes the snapshots before the restart, so it
// measures the full scan of the lane store, as after a kill -9. The
// report counts the partitions rebuilt each way.
// -age restarts only once the events are older than the lane store's
// duplicate window: within it, the embedded NATS server rebuilds its dedup
// ids at start-up (time and memory counted here).
//
// Progress goes to stderr; a table and, as the last line, one JSON object
// go to stdout. It exits non-zero when anything fails or -timeout passes.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/google/pprof/profile"

	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
)

type rebuildFlags struct {
	common
	events, lanes, dests int
	payload              int
	batch, conc          int
	timeout              time.Duration
	poll                 time.Duration
	age                  time.Duration
	window               time.Duration
	settled              bool
	baseline             bool
	scan                 bool
	profileDir           string
	profileSeconds       int
	hc                   *http.Client
}

func runRebuild(args []string) error {
	fs := flag.NewFlagSet("rebuild", flag.ExitOnError)
	var f rebuildFlags
	f.register(fs)
	fs.IntVar(&f.events, "events", 1_000_000, "pending events to rebuild")
	fs.IntVar(&f.lanes, "lanes", 100_000, "lanes the events are spread over (round robin)")
	fs.IntVar(&f.dests, "dests", 4, "destinations (paused), on distinct partitions when possible")
	fs.IntVar(&f.payload, "payload", 64, "payload bytes per event")
	fs.IntVar(&f.batch, "batch", 1000, "events per PublishBatch")
	fs.IntVar(&f.conc, "c", 4, "concurrent PublishBatch calls")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "fail when the whole bench takes longer")
	fs.DurationVar(&f.poll, "poll", 100*time.Millisecond, "GetDestinationHealth poll interval during the rebuild (each call walks every lane)")
	fs.DurationVar(&f.age, "age", 0, "wait this long with all events pending before the restart (older than the lane store's 2m dedup window, NATS does not rebuild their dedup ids)")
	fs.DurationVar(&f.window, "window", 2*time.Minute, "the lane store's duplicate window (rivora's --dedup-window; the server runs with its default)")
	fs.BoolVar(&f.settled, "settled", true, "after the rebuild, wait until the last ack is older than -window and measure the heap again: the embedded NATS server has then dropped the dedup ids of the published events, so what is left is the pending state alone")
	fs.BoolVar(&f.scan, "scan", false, "remove the pending snapshots the graceful stop wrote before the restart: measure the full scan (as after kill -9)")
	fs.BoolVar(&f.baseline, "baseline", true, "measure an empty restarted server for the memory baseline")
	fs.StringVar(&f.profileDir, "profile-dir", "", "write a CPU profile of the restart and a heap profile after it into `DIR`")
	fs.IntVar(&f.profileSeconds, "profile-seconds", 15, "length of the restart CPU profile")
	fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if f.events <= 0 || f.lanes <= 0 || f.lanes > f.events || f.dests <= 0 || f.dests > f.lanes {
		return fmt.Errorf("need 0 < -dests (%d) <= -lanes (%d) <= -events (%d)", f.dests, f.lanes, f.events)
	}
	if f.batch <= 0 || f.conc <= 0 || f.payload < 2 {
		return errors.New("-batch and -c must be positive, -payload at least 2")
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	err := f.run(ctx)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("overran -timeout %s: %w", f.timeout, err)
	}
	return err
}

// rbProc is one `rivora dev` process on a data dir the bench keeps across
// restarts.
type rbProc struct {
	*proc
}

type rbResult struct {
	baselineInuse, baselineAlloc uint64
	// Live heap by owner, from the heap profiles: the embedded NATS
	// server's (a stack with a nats-server frame) and the rest (Rivora's).
	baselineShares, shares heapShares
	afterPublishInuse      uint64
	publish                time.Duration
	pendingWait            time.Duration
	shutdown               time.Duration
	listen, owned          time.Duration // from the restart's log
	ready, rebuilt         time.Duration
	parts                  []partRebuild
	serverCPU              time.Duration
	inuse, alloc, rss      uint64
	// The heap once the last ack is older than the duplicate window
	// (-settled): the pending state without NATS's dedup ids.
	settledInuse, settledAlloc uint64
	settledShares              heapShares
	healthCall                 time.Duration
	warnings                   []string
}

type partRebuild struct {
	partition, lanes, events int
	took                     time.Duration
	fromSnapshot             bool // `partition rebuilt from snapshot`, not a scan
}

func (f *rebuildFlags) run(ctx context.Context) error {
	fmt.Fprintf(os.Stderr, "bench rebuild: GOMAXPROCS=%d NumCPU=%d events=%d lanes=%d dests=%d payload=%dB partitions=%d\n",
		runtime.GOMAXPROCS(0), runtime.NumCPU(), f.events, f.lanes, f.dests, f.payload, f.partitions)
	root, err := os.MkdirTemp("", "rivora-rebuild-")
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
	if f.bin, err = buildRivora(ctx, f.bin, root); err != nil {
		return err
	}
	if f.profileDir != "" {
		if err := os.MkdirAll(f.profileDir, 0o755); err != nil {
			return err
		}
	}
	dests := f.destinationIDs()
	part, err := partner.Start(partner.Options{CountOnly: true})
	if err != nil {
		return err
	}
	defer part.Close()

	var res rbResult
	if f.baseline {
		if err := f.measureBaseline(ctx, root, dests, part, &res); err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
	}
	if err := f.measureRebuild(ctx, root, dests, part, &res); err != nil {
		return err
	}
	if n := int64(part.Count()); n > 0 {
		return fmt.Errorf("the partner received %d requests although every destination was paused", n)
	}
	f.report(&res)
	return nil
}

// destinationIDs picks ids that hash to distinct partitions (as far as
// there are partitions), so the rebuild is spread the way a real cell's is.
func (f *rebuildFlags) destinationIDs() []string {
	ids := make([]string, 0, f.dests)
	used := map[int]bool{}
	for i := 0; len(ids) < f.dests; i++ {
		id := fmt.Sprintf("rebuild-%d", i)
		p := lanes.Partition(id, f.partitions)
		if used[p] && len(used) < f.partitions && i < 100*f.dests {
			continue
		}
		used[p] = true
		ids = append(ids, id)
	}
	return ids
}

func (f *rebuildFlags) start(dataDir, logName string) (*rbProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"dev", "--listen", addr, "--data-dir", dataDir, "--pprof",
		"--partitions", strconv.Itoa(f.partitions), "--workers", strconv.Itoa(f.workers)}
	if f.fsync {
		args = append(args, "--fsync")
	}
	p, err := startProc(f.bin, "rivora dev", addr, filepath.Join(filepath.Dir(dataDir), logName), args, false)
	if err != nil {
		return nil, err
	}
	return &rbProc{proc: p}, nil
}

// kill is proc.kill, also for a process that never started (nil).
func (p *rbProc) kill() {
	if p != nil {
		p.proc.kill()
	}
}

func (p *rbProc) rss() uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// heap forces a GC through the pprof heap handler, then reads the heap
// gauges from /metrics: in use (spans holding objects) and allocated (live
// objects right after the GC).
func (p *rbProc) heap(ctx context.Context, saveProfile string) (inuse, alloc uint64, err error) {
	return heapOf(ctx, p.url(), saveProfile)
}

// heapOf is heap for the rivora process serving base.
func heapOf(ctx context.Context, base, saveProfile string) (inuse, alloc uint64, err error) {
	hc := &http.Client{Transport: withBearer(nil), Timeout: time.Minute}
	get := func(path string) ([]byte, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return b, err
	}
	prof, err := get("/debug/pprof/heap?gc=1")
	if err != nil {
		return 0, 0, fmt.Errorf("force GC: %w", err)
	}
	if saveProfile != "" {
		if err := os.WriteFile(saveProfile, prof, 0o644); err != nil {
			return 0, 0, err
		}
	}
	metrics, err := get("/metrics")
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(string(metrics)) {
		name, val, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		v, perr := strconv.ParseFloat(val, 64)
		if perr != nil {
			continue
		}
		switch name {
		case "go_memstats_heap_inuse_bytes":
			inuse = uint64(v)
		case "go_memstats_heap_alloc_bytes", "go_memstats_alloc_bytes":
			alloc = uint64(v)
		}
	}
	if inuse == 0 {
		return 0, 0, errors.New("/metrics has no go_memstats_heap_inuse_bytes")
	}
	return inuse, alloc, nil
}

// setup creates the destinations and pauses them.
func setup(ctx context.Context, admin rivorav1connect.AdminServiceClient, dests []string, url string) error {
	for _, id := range dests {
		if err := createDestination(ctx, admin, id, url, nil); err != nil {
			return err
		}
		resp, err := admin.PauseDestination(ctx, connect.NewRequest(&rivorav1.PauseDestinationRequest{
			DestinationId: id, Reason: "bench rebuild: nothing may be delivered", Author: "bench",
		}))
		if err != nil {
			return fmt.Errorf("pause %s: %w", id, err)
		}
		if err := waitApplied(ctx, admin, resp.Msg.GetVersion()); err != nil {
			return err
		}
	}
	return nil
}

// pending sums the health API's pending events over dests (0 and an error
// while the server cannot answer yet).
func pending(ctx context.Context, admin rivorav1connect.AdminServiceClient, dests []string) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := admin.GetDestinationHealth(cctx, connect.NewRequest(&rivorav1.GetDestinationHealthRequest{}))
	if err != nil {
		return 0, err
	}
	var n int64
	for _, h := range resp.Msg.GetDestinations() {
		if slices.Contains(dests, h.GetDestinationId()) {
			n += h.GetPendingEvents()
		}
	}
	return n, nil
}

func waitPending(ctx context.Context, admin rivorav1connect.AdminServiceClient, dests []string, want int64, every time.Duration) error {
	var last int64
	var lastErr error
	lastLog := time.Now()
	for {
		n, err := pending(ctx, admin, dests)
		if err == nil {
			last = n
			if n == want {
				return nil
			}
			if n > want {
				return fmt.Errorf("health API reports %d pending, more than the %d published", n, want)
			}
		}
		lastErr = err
		if time.Since(lastLog) >= 2*time.Second {
			lastLog = time.Now()
			progress("pending %d/%d", last, want)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("health API reports %d of %d pending (last error: %v): %w", last, want, lastErr, ctx.Err())
		case <-time.After(every):
		}
	}
}

// clients returns Connect clients for a server at base; they share one
// HTTP client.
func (f *rebuildFlags) clients(base string) (rivorav1connect.AdminServiceClient, rivorav1connect.IngestServiceClient) {
	if f.hc == nil {
		f.hc = f.httpClient(f.conc + 4)
	}
	return rivorav1connect.NewAdminServiceClient(f.hc, base), rivorav1connect.NewIngestServiceClient(f.hc, base)
}

func (f *rebuildFlags) measureBaseline(ctx context.Context, root string, dests []string, part *partner.Partner, res *rbResult) error {
	dataDir := filepath.Join(root, "baseline", "data")
	if err := os.MkdirAll(filepath.Dir(dataDir), 0o755); err != nil {
		return err
	}
	p, err := f.start(dataDir, "first.log")
	defer func() { p.kill() }()
	if err != nil {
		return err
	}
	if _, err := p.waitHealthy(ctx, 0, 20*time.Millisecond); err != nil {
		return err
	}
	admin, _ := f.clients(p.url())
	if err := setup(ctx, admin, dests, part.URL()); err != nil {
		return err
	}
	if _, err := p.terminate(60 * time.Second); err != nil {
		return err
	}
	p, err = f.start(dataDir, "restart.log")
	if err != nil {
		return err
	}
	if _, err := p.waitHealthy(ctx, 0, 20*time.Millisecond); err != nil {
		return err
	}
	admin, _ = f.clients(p.url())
	if err := waitPending(ctx, admin, dests, 0, f.poll); err != nil {
		return err
	}
	// Let start-up garbage and timers settle, as after the real rebuild.
	time.Sleep(time.Second)
	profile := filepath.Join(root, "baseline-heap.pprof")
	res.baselineInuse, res.baselineAlloc, err = p.heap(ctx, profile)
	if err != nil {
		return err
	}
	if res.baselineShares, err = readHeapShares(profile); err != nil {
		return err
	}
	progress("baseline (empty restart, %d paused destinations): heap in use %.1f MB, live %.1f MB, RSS %.1f MB",
		len(dests), mb(res.baselineInuse), mb(res.baselineAlloc), mb(p.rss()))
	_, err = p.terminate(60 * time.Second)
	return err
}

func (f *rebuildFlags) measureRebuild(ctx context.Context, root string, dests []string, part *partner.Partner, res *rbResult) error {
	dataDir := filepath.Join(root, "main", "data")
	if err := os.MkdirAll(filepath.Dir(dataDir), 0o755); err != nil {
		return err
	}
	p, err := f.start(dataDir, "first.log")
	defer func() { p.kill() }()
	if err != nil {
		return err
	}
	if _, err := p.waitHealthy(ctx, 0, 20*time.Millisecond); err != nil {
		return err
	}
	admin, ingest := f.clients(p.url())
	if err := setup(ctx, admin, dests, part.URL()); err != nil {
		return err
	}

	progress("publishing %d events over %d lanes and %d paused destinations: PublishBatch of %d, %d concurrent, %d B payload",
		f.events, f.lanes, len(dests), f.batch, f.conc, f.payload)
	t0 := time.Now()
	if err := f.publish(ctx, ingest, dests); err != nil {
		return err
	}
	res.publish = time.Since(t0)
	lastAck := time.Now()
	progress("published %d events in %s (%.0f/s)", f.events, res.publish.Round(time.Millisecond), float64(f.events)/res.publish.Seconds())
	t0 = time.Now()
	if err := waitPending(ctx, admin, dests, int64(f.events), 250*time.Millisecond); err != nil {
		return err
	}
	res.pendingWait = time.Since(t0)
	progress("health API reports all %d pending (%s after the last ack)", f.events, res.pendingWait.Round(time.Millisecond))
	if inuse, _, err := p.heap(ctx, ""); err == nil {
		res.afterPublishInuse = inuse
	}

	if f.age > 0 {
		progress("waiting %s before the restart (-age)", f.age)
		select {
		case <-time.After(f.age):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	progress("SIGTERM")
	if res.shutdown, err = p.terminate(60 * time.Second); err != nil {
		return err
	}
	progress("stopped gracefully in %s", res.shutdown.Round(time.Millisecond))
	if f.scan {
		if err := os.RemoveAll(filepath.Join(dataDir, "snapshots")); err != nil {
			return err
		}
		progress("removed the pending snapshots (-scan): the restart scans the lane stores")
	}

	// Restart on the same data dir.
	p, err = f.start(dataDir, "restart.log")
	if err != nil {
		return err
	}
	var ready atomic.Int64
	var wg sync.WaitGroup
	readyErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		d, err := p.waitHealthy(ctx, 0, 10*time.Millisecond)
		if err != nil {
			readyErr <- err
			return
		}
		ready.Store(int64(d))
		progress("/healthz 200 after %s", d.Round(time.Millisecond))
	}()
	var profErr error
	if f.profileDir != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			profErr = p.cpuProfile(ctx, filepath.Join(f.profileDir, "rebuild-cpu.pprof"), f.profileSeconds)
		}()
	}
	admin, _ = f.clients(p.url())
	if err := waitPending(ctx, admin, dests, int64(f.events), f.poll); err != nil {
		return fmt.Errorf("after the restart: %w; log:\n%s", err, p.Tail(8<<10))
	}
	res.rebuilt = time.Since(p.Started())
	res.serverCPU = p.cpu()
	progress("health API reports all %d pending %s after the process started", f.events, res.rebuilt.Round(time.Millisecond))
	wg.Wait()
	select {
	case err := <-readyErr:
		return err
	default:
	}
	if profErr != nil {
		return fmt.Errorf("CPU profile: %w", profErr)
	}
	res.ready = time.Duration(ready.Load())

	t0 = time.Now()
	if _, err := pending(ctx, admin, dests); err != nil {
		return err
	}
	res.healthCall = time.Since(t0)

	time.Sleep(time.Second)
	heapProfile := filepath.Join(root, "rebuild-heap.pprof")
	if f.profileDir != "" {
		heapProfile = filepath.Join(f.profileDir, "rebuild-heap.pprof")
	}
	if res.inuse, res.alloc, err = p.heap(ctx, heapProfile); err != nil {
		return err
	}
	if res.shares, err = readHeapShares(heapProfile); err != nil {
		return err
	}
	res.rss = p.rss()
	if err := res.parseLog(p.LogPath, p.Started()); err != nil {
		return err
	}
	if f.settled {
		if err := f.measureSettled(ctx, root, p, lastAck, res); err != nil {
			return err
		}
	}
	total := 0
	for _, pr := range res.parts {
		total += pr.events
	}
	if total != f.events {
		return fmt.Errorf("the restart log's `partition rebuilt` lines count %d events, want %d", total, f.events)
	}
	if _, err := p.terminate(60 * time.Second); err != nil {
		return err
	}
	if f.profileDir != "" {
		progress("profiles: go tool pprof -top %s %s   (and rebuild-heap.pprof)", f.bin, filepath.Join(f.profileDir, "rebuild-cpu.pprof"))
	}
	return nil
}

// measureSettled waits until the last ack is older than the lane store's
// duplicate window (and a few seconds more: NATS drops expired dedup ids
// on a timer), then reads the heap again. Within the window the embedded
// NATS server keeps every recent event's dedup id, whether the event is
// pending or delivered: a cost per recently accepted event, which ends
// with the window. Past it, what the heap holds per event is the pending
// state alone.
func (f *rebuildFlags) measureSettled(ctx context.Context, root string, p *rbProc, lastAck time.Time, res *rbResult) error {
	until := lastAck.Add(f.window + 5*time.Second)
	if wait := time.Until(until); wait > 0 {
		progress("waiting %s until the last ack is older than the %s duplicate window (-settled)", wait.Round(time.Second), f.window)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	profile := filepath.Join(root, "settled-heap.pprof")
	if f.profileDir != "" {
		profile = filepath.Join(f.profileDir, "settled-heap.pprof")
	}
	var err error
	if res.settledInuse, res.settledAlloc, err = p.heap(ctx, profile); err != nil {
		return err
	}
	if res.settledShares, err = readHeapShares(profile); err != nil {
		return err
	}
	progress("heap past the duplicate window: %.1f MB in use, %.1f MB live", mb(res.settledInuse), mb(res.settledAlloc))
	return nil
}

// cpuProfile starts a CPU profile as soon as the restarted server answers
// HTTP at all (the rebuild starts right after, when the first config
// arrives), and writes it to path.
func (p *rbProc) cpuProfile(ctx context.Context, path string, seconds int) error {
	hc := &http.Client{Transport: withBearer(nil)}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url()+"/healthz", nil)
		if resp, err := hc.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			break
		}
		if err, ok := p.exited(); ok {
			return fmt.Errorf("rivora exited: %v", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	progress("CPU profile for %ds starts %s after the process started", seconds, time.Since(p.Started()).Round(time.Millisecond))
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", p.url(), seconds), nil)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func (f *rebuildFlags) publish(ctx context.Context, ingest rivorav1connect.IngestServiceClient, dests []string) error {
	body := payload(f.payload, 5)
	bp := &batchPublish{n: f.events, batch: f.batch, conc: f.conc, event: func(i int) *rivorav1.PublishRequest {
		lane := i % f.lanes
		return &rivorav1.PublishRequest{
			DestinationId: dests[lane%len(dests)], CustomerId: "bench", LaneKey: "lane-" + strconv.Itoa(lane),
			Type: "bench.rebuild", Payload: body,
		}
	}}
	done := make(chan error, 1)
	go func() { done <- bp.run(ctx, ingest) }()
	start := time.Now()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			n := bp.acked.Load()
			progress("published %d/%d (%.0f/s)", n, f.events, float64(n)/time.Since(start).Seconds())
		}
	}
}

var (
	logAttr = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S*)`)
)

func parseLogLine(line string) map[string]string {
	m := map[string]string{}
	for _, a := range logAttr.FindAllStringSubmatch(line, -1) {
		v := a[2]
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		}
		m[a[1]] = v
	}
	return m
}

// parseLog reads the restarted server's log: when it listened, when it
// owned its last partition, each `partition rebuilt` line, and warnings.
func (r *rbResult) parseLog(path string, started time.Time) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	at := func(m map[string]string) time.Duration {
		t, err := time.Parse(time.RFC3339Nano, m["time"])
		if err != nil {
			return 0
		}
		return t.Sub(started)
	}
	for sc.Scan() {
		line := sc.Text()
		m := parseLogLine(line)
		switch {
		case m["msg"] == "rivora dev listening" && r.listen == 0:
			r.listen = at(m)
		case m["msg"] == "partition owned":
			// The last one: every partition opened.
			r.owned = max(r.owned, at(m))
		case m["msg"] == "partition rebuilt" || m["msg"] == "partition rebuilt from snapshot":
			pr := partRebuild{fromSnapshot: m["msg"] == "partition rebuilt from snapshot"}
			pr.partition, _ = strconv.Atoi(m["partition"])
			pr.lanes, _ = strconv.Atoi(m["lanes"])
			pr.events, _ = strconv.Atoi(m["events"])
			if pr.took, err = time.ParseDuration(m["took"]); err != nil {
				return fmt.Errorf("parse %q: %w", line, err)
			}
			r.parts = append(r.parts, pr)
		}
		if lvl := m["level"]; lvl == "WARN" || lvl == "ERROR" {
			r.warnings = append(r.warnings, line)
		}
	}
	return sc.Err()
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

// heapShares splits a heap profile's live bytes (inuse_space, as the
// profile estimates them from its samples) between the embedded NATS
// server and the rest of the process.
type heapShares struct {
	nats, rest float64
}

// natsServerFrame marks a sample allocated by the embedded NATS server.
const natsServerFrame = "github.com/nats-io/nats-server/"

func readHeapShares(path string) (heapShares, error) {
	fh, err := os.Open(path)
	if err != nil {
		return heapShares{}, err
	}
	defer fh.Close()
	prof, err := profile.Parse(fh)
	if err != nil {
		return heapShares{}, fmt.Errorf("parse heap profile %s: %w", path, err)
	}
	inuse := -1
	for i, st := range prof.SampleType {
		if st.Type == "inuse_space" {
			inuse = i
		}
	}
	if inuse < 0 {
		return heapShares{}, fmt.Errorf("heap profile %s has no inuse_space", path)
	}
	var sh heapShares
	for _, s := range prof.Sample {
		if allocatedBy(s, natsServerFrame) {
			sh.nats += float64(s.Value[inuse])
		} else {
			sh.rest += float64(s.Value[inuse])
		}
	}
	return sh, nil
}

func allocatedBy(s *profile.Sample, prefix string) bool {
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if line.Function != nil && strings.HasPrefix(line.Function.Name, prefix) {
				return true
			}
		}
	}
	return false
}

func (f *rebuildFlags) report(r *rbResult) {
	var sum, maxTook time.Duration
	fromSnapshot := 0
	for _, p := range r.parts {
		sum += p.took
		maxTook = max(maxTook, p.took)
		if p.fromSnapshot {
			fromSnapshot++
		}
	}
	delta := float64(r.inuse) - float64(r.baselineInuse)
	liveDelta := float64(r.alloc) - float64(r.baselineAlloc)
	if !f.baseline {
		delta, liveDelta = float64(r.inuse), float64(r.alloc)
	}
	perLane, perEvent := delta/float64(f.lanes), delta/float64(f.events)
	basis := "(heap in use - baseline)"
	if !f.baseline {
		basis = "heap in use (no baseline: -baseline=false)"
	}

	for _, w := range r.warnings {
		fmt.Fprintf(os.Stderr, "restart log: %s\n", w)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "rebuild: %d events over %d lanes, %d paused destinations, %d-byte payload, %d partitions, %d-event batches x %d concurrent, restart %s after the last ack\n",
		f.events, f.lanes, f.dests, f.payload, f.partitions, f.batch, f.conc, (r.pendingWait + f.age).Round(time.Second))
	fmt.Fprintln(tw, "measure\tvalue\tnote")
	fmt.Fprintf(tw, "publish\t%.2f s\t%.0f events/s (PublishBatch)\n", r.publish.Seconds(), float64(f.events)/r.publish.Seconds())
	fmt.Fprintf(tw, "graceful stop\t%.2f s\tSIGTERM to exit 0\n", r.shutdown.Seconds())
	fmt.Fprintf(tw, "restart: listening\t%.2f s\tprocess start to `rivora dev listening` (embedded NATS recovered the store)\n", r.listen.Seconds())
	fmt.Fprintf(tw, "restart: partitions owned\t%.2f s\tprocess start to the last `partition owned` (every partition rebuilt)\n", r.owned.Seconds())
	fmt.Fprintf(tw, "ready_s\t%.2f s\tprocess start to /healthz 200\n", r.ready.Seconds())
	fmt.Fprintf(tw, "rebuild_s\t%.2f s\tprocess start to the health API reporting all %d pending (polled every %s)\n", r.rebuilt.Seconds(), f.events, f.poll)
	fmt.Fprintf(tw, "partition rebuilds\t%.2f s sum, %.2f s max\t%d `partition rebuilt` lines; several partitions open at once, so the sum can exceed the wall time\n", sum.Seconds(), maxTook.Seconds(), len(r.parts))
	fmt.Fprintf(tw, "rebuild path\t%d of %d from snapshot\tthe others scanned their lane store (-scan, kill -9, or a store changed since the stop)\n", fromSnapshot, len(r.parts))
	for _, p := range r.parts {
		path := "scan"
		if p.fromSnapshot {
			path = "snapshot"
		}
		fmt.Fprintf(tw, "  partition %d\t%.2f s\t%d lanes, %d events, %.0f events/s, %s\n", p.partition, p.took.Seconds(), p.lanes, p.events, float64(p.events)/p.took.Seconds(), path)
	}
	fmt.Fprintf(tw, "server CPU to rebuilt\t%.2f s\tuser+system of the restarted process up to rebuild_s (steadier than wall time on a shared machine)\n", r.serverCPU.Seconds())
	fmt.Fprintf(tw, "health call\t%.1f ms\tone GetDestinationHealth after the rebuild (walks every lane)\n", ms(r.healthCall))
	if f.baseline {
		fmt.Fprintf(tw, "heap baseline\t%.1f MB in use, %.1f MB live\tempty restarted server, same destinations, after a forced GC\n", mb(r.baselineInuse), mb(r.baselineAlloc))
	}
	if r.afterPublishInuse > 0 {
		fmt.Fprintf(tw, "heap before restart\t%.1f MB in use\tfirst process, all events pending, after a forced GC\n", mb(r.afterPublishInuse))
	}
	fmt.Fprintf(tw, "heap after rebuild\t%.1f MB in use, %.1f MB live\tafter a forced GC (GET /debug/pprof/heap?gc=1); RSS %.1f MB\n", mb(r.inuse), mb(r.alloc), mb(r.rss))
	fmt.Fprintf(tw, "per pending lane\t%.0f B\t%s / lanes; live bytes give %.0f B\n", perLane, basis, liveDelta/float64(f.lanes))
	fmt.Fprintf(tw, "per pending event\t%.0f B\t%s / events; live bytes give %.0f B; includes the embedded NATS server's share\n", perEvent, basis, liveDelta/float64(f.events))
	natsPerEvent := (r.shares.nats - r.baselineShares.nats) / float64(f.events)
	restPerEvent := (r.shares.rest - r.baselineShares.rest) / float64(f.events)
	fmt.Fprintf(tw, "  of it, embedded NATS\t%.0f B\tper event, live bytes the heap profile's stacks put in nats-server (dedup ids of events younger than the lane store's duplicate window (-age), per-block subject state), minus the baseline's\n", natsPerEvent)
	fmt.Fprintf(tw, "  of it, Rivora\t%.0f B\tper event, the rest of the profile's live bytes, minus the baseline's\n", restPerEvent)
	settledPerEvent, settledNATS, settledRest := 0.0, 0.0, 0.0
	if f.settled {
		base := float64(r.baselineInuse)
		if !f.baseline {
			base = 0
		}
		settledPerEvent = (float64(r.settledInuse) - base) / float64(f.events)
		settledNATS = (r.settledShares.nats - r.baselineShares.nats) / float64(f.events)
		settledRest = (r.settledShares.rest - r.baselineShares.rest) / float64(f.events)
		fmt.Fprintf(tw, "per pending event, settled\t%.0f B\t%s / events once the last ack is older than the %s duplicate window (-settled): the pending state without NATS's dedup ids\n", settledPerEvent, basis, f.window)
		fmt.Fprintf(tw, "  of it, embedded NATS\t%.0f B\tper event, as above\n", settledNATS)
		fmt.Fprintf(tw, "  of it, Rivora\t%.0f B\tper event, as above\n", settledRest)
	}
	fmt.Fprintf(tw, "restart log warnings\t%d\tWARN/ERROR lines (on stderr)\n", len(r.warnings))
	tw.Flush()
	if f.events >= 1_000_000 {
		// Rule 3's target, scaled to this run's size.
		verdict := "met"
		if r.rebuilt.Seconds()*1e6/float64(f.events) >= 10 {
			verdict = "MISSED"
		}
		fmt.Printf("  rule 3 target (1M pending events rebuilt in under 10 s): %s\n", verdict)
		verdict = "met"
		if r.rebuilt.Seconds()*1e6/float64(f.events) > 3 {
			verdict = "MISSED"
		}
		fmt.Printf("  issue 26 target (1M pending events rebuilt in at most 3 s): %s\n", verdict)
	}
	if f.settled {
		verdict := "met"
		if settledPerEvent > 300 {
			verdict = "MISSED"
		}
		fmt.Printf("  issue 26 target (at most 300 B of heap per pending event, past the duplicate window): %s\n", verdict)
	}
	printJSON(map[string]float64{
		"events":                         float64(f.events),
		"lanes":                          float64(f.lanes),
		"ready_s":                        round(r.ready.Seconds(), 3),
		"rebuild_s":                      round(r.rebuilt.Seconds(), 3),
		"partition_rebuild_max_s":        round(maxTook.Seconds(), 3),
		"partition_rebuild_sum_s":        round(sum.Seconds(), 3),
		"heap_mb":                        round(mb(r.inuse), 1),
		"baseline_heap_mb":               round(mb(r.baselineInuse), 1),
		"bytes_per_lane":                 round(perLane, 0),
		"bytes_per_event":                round(perEvent, 0),
		"nats_bytes_per_event":           round(natsPerEvent, 0),
		"rivora_bytes_per_event":         round(restPerEvent, 0),
		"payload_bytes":                  float64(f.payload),
		"server_cpu_s":                   round(r.serverCPU.Seconds(), 2),
		"partitions_from_snapshot":       float64(fromSnapshot),
		"partitions_rebuilt":             float64(len(r.parts)),
		"settled_bytes_per_event":        round(settledPerEvent, 0),
		"settled_nats_bytes_per_event":   round(settledNATS, 0),
		"settled_rivora_bytes_per_event": round(settledRest, 0),
	}, []string{"events", "lanes", "ready_s", "rebuild_s", "partition_rebuild_max_s", "partition_rebuild_sum_s",
		"heap_mb", "baseline_heap_mb", "bytes_per_lane", "bytes_per_event", "nats_bytes_per_event", "rivora_bytes_per_event", "payload_bytes", "server_cpu_s", "partitions_from_snapshot", "partitions_rebuilt",
		"settled_bytes_per_event", "settled_nats_bytes_per_event", "settled_rivora_bytes_per_event"})
}
