package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/nats-io/nats.go"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
)

// buildRivora returns bin when set; otherwise it builds ./cmd/rivora into
// dir and returns that binary.
func buildRivora(ctx context.Context, bin, dir string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	bin = filepath.Join(dir, "rivora")
	progress("building ./cmd/rivora")
	mod, err := moduleRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/rivora")
	cmd.Dir = mod
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/rivora: %v\n%s", err, out)
	}
	return bin, nil
}

// batchPublish publishes n events, event(i) for i in [0, n), in
// PublishBatch calls of batch events from conc goroutines. acked counts
// the events acknowledged so far, for progress. It fails on the first
// error, or when an answer does not carry one id per event.
type batchPublish struct {
	n, batch, conc int
	event          func(i int) *rivorav1.PublishRequest
	acked          atomic.Int64
}

func (bp *batchPublish) run(ctx context.Context, ingest rivorav1connect.IngestServiceClient) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := (bp.n + bp.batch - 1) / bp.batch
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	fail := func(err error) { once.Do(func() { firstErr = err; cancel() }) }
	var wg sync.WaitGroup
	for range bp.conc {
		wg.Go(func() {
			for {
				b := int(next.Add(1)) - 1
				if b >= batches || ctx.Err() != nil {
					return
				}
				if err := bp.send(ctx, ingest, b); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("publish: %w", firstErr)
	}
	if n := bp.acked.Load(); n != int64(bp.n) {
		return fmt.Errorf("publish: %d of %d acked: %w", n, bp.n, ctx.Err())
	}
	return nil
}

// send publishes batch b.
func (bp *batchPublish) send(ctx context.Context, ingest rivorav1connect.IngestServiceClient, b int) error {
	lo, hi := b*bp.batch, min((b+1)*bp.batch, bp.n)
	events := make([]*rivorav1.PublishRequest, 0, hi-lo)
	for i := lo; i < hi; i++ {
		events = append(events, bp.event(i))
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	resp, err := ingest.PublishBatch(ctx, connect.NewRequest(&rivorav1.PublishBatchRequest{Events: events}))
	if err != nil {
		return fmt.Errorf("batch %d: %w", b, err)
	}
	if got := len(resp.Msg.GetEventIds()); got != len(events) {
		return fmt.Errorf("batch %d: %d ids for %d events", b, got, len(events))
	}
	bp.acked.Add(int64(len(events)))
	return nil
}

// pacedPublishPhase offers n Publish calls at rate per second, open loop:
// call i is due at start + i/rate whatever the earlier ones did, and its
// latency runs from when it was due (a slow server's queueing counts, as
// it would for a publisher producing at that rate). At most maxConc calls
// are in flight; a call that finds none free waits, and that wait counts.
func pacedPublishPhase(ctx context.Context, publish publishCaller, n int, rate float64, maxConc int, limit time.Duration, req func(int) *rivorav1.PublishRequest) (row, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var firstErr error
	var errOnce sync.Once
	lat := make([]time.Duration, n)
	slots := make(chan struct{}, maxConc)
	var wg sync.WaitGroup
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := publish(ctx, req(i)); err != nil {
				errOnce.Do(func() { firstErr = fmt.Errorf("event %d: %w", i, err); cancel() })
				return
			}
			lat[i] = time.Since(due)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return row{}, firstErr
	}
	if ctx.Err() != nil {
		return row{}, fmt.Errorf("paced publish: not done within %s", limit)
	}
	windows, slow := stalls(lat, rate)
	slices.Sort(lat)
	return row{name: fmt.Sprintf("rivora Publish at %.0f/s offered", rate), events: n, elapsed: elapsed, p50: percentile(lat, 0.5), p99: percentile(lat, 0.99),
		note:    fmt.Sprintf("open loop, at most %d in flight; latency from when each call was due", maxConc),
		windows: windows, slowWindows: slow}, nil
}

// An open-loop phase's calls are grouped by when each was due into
// windows of stallWindow; a window whose median call took longer than
// stallMedian stalled: nearly every call in it waited, as behind a GC
// cycle that took the cores an already busy server needed, rather than a
// few slow calls.
const (
	stallWindow = 50 * time.Millisecond
	stallMedian = 5 * time.Millisecond
)

// stalls counts the windows of lat (by call index, calls due at rate per
// second) and those that stalled.
func stalls(lat []time.Duration, rate float64) (windows, stalled int) {
	per := max(1, int(rate*stallWindow.Seconds()))
	for start := 0; start < len(lat); start += per {
		w := slices.Clone(lat[start:min(len(lat), start+per)])
		slices.Sort(w)
		windows++
		if w[len(w)/2] > stallMedian {
			stalled++
		}
	}
	return windows, stalled
}

// fsyncBench is `bench ingest -fsync`: the Publish phase (conc concurrent
// calls) and the PublishBatch phase against a `rivora dev` without
// --fsync, then the same against a fresh one with it, back to back in one
// run: what an acknowledgement that survives a power loss costs, as a
// ratio of one that reaches the OS. The store's syncs are read from
// /metrics (rivora_store_syncs_total): events per sync says how many
// acknowledgements the group commit answers with one.
type fsyncBench struct {
	common
	n, conc, batchN, batchSize, batchConc int
	size, dests, lanes                    int
	limit                                 time.Duration
	keyed                                 bool
}

// fsyncRun is one run's figures: the phases, and the syncs each took.
type fsyncRun struct {
	pub, bat           row
	pubSyncs, batSyncs float64
}

func (b fsyncBench) run() error {
	fmt.Fprintf(os.Stderr, "bench ingest -fsync: GOMAXPROCS=%d NumCPU=%d payload=%dB; without --fsync, then with it\n", runtime.GOMAXPROCS(0), runtime.NumCPU(), b.size)
	// One binary for both runs.
	dir, err := os.MkdirTemp("", "rivora-bench-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if b.bin, err = buildRivora(context.Background(), b.bin, dir); err != nil {
		return err
	}
	var plain, synced fsyncRun
	if plain, err = b.runOne(false); err != nil {
		return fmt.Errorf("without --fsync: %w", err)
	}
	if synced, err = b.runOne(true); err != nil {
		return fmt.Errorf("with --fsync: %w", err)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tevents\tseconds\tevents/s\tp50 ms\tp99 ms\tserver CPU µs/event\tsyncs\tevents/sync\t")
	line := func(label string, r row, syncs float64) {
		perSync := 0.0
		if syncs > 0 {
			perSync = float64(r.events) / syncs
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%.2f\t%.2f\t%.1f\t%.0f\t%.1f\t\n", label, r.events, r.elapsed.Seconds(), r.rate(), ms(r.p50), ms(r.p99), r.cpuPerEvent(), syncs, perSync)
	}
	line(plain.pub.name, plain.pub, plain.pubSyncs)
	line(synced.pub.name+" --fsync", synced.pub, synced.pubSyncs)
	line(plain.bat.name, plain.bat, plain.batSyncs)
	line(synced.bat.name+" --fsync", synced.bat, synced.batSyncs)
	tw.Flush()
	fmt.Printf("  Publish: %d concurrent calls, latency per event ack; PublishBatch: batches of %d, %d concurrent, latency per batch ack\n", b.conc, b.batchSize, b.batchConc)
	fmt.Println("  --fsync: every answer waits for a syncfs of the store begun after its writes; the answers that wait meanwhile share the next one (group commit)")
	perSync := func(events int, syncs float64) float64 {
		if syncs == 0 {
			return 0
		}
		return round(float64(events)/syncs, 1)
	}
	return printJSON(map[string]float64{
		"publish_per_s":           round(plain.pub.rate(), 0),
		"publish_fsync_per_s":     round(synced.pub.rate(), 0),
		"publish64_fsync_ratio":   round(synced.pub.rate()/plain.pub.rate(), 3),
		"publish_p99_ms":          round(ms(plain.pub.p99), 2),
		"publish_fsync_p99_ms":    round(ms(synced.pub.p99), 2),
		"batch_per_s":             round(plain.bat.rate(), 0),
		"batch_fsync_per_s":       round(synced.bat.rate(), 0),
		"batch_fsync_ratio":       round(synced.bat.rate()/plain.bat.rate(), 3),
		"publish_events_per_sync": perSync(synced.pub.events, synced.pubSyncs),
		"batch_events_per_sync":   perSync(synced.bat.events, synced.batSyncs),
	}, []string{"publish_per_s", "publish_fsync_per_s", "publish64_fsync_ratio", "publish_p99_ms", "publish_fsync_p99_ms",
		"batch_per_s", "batch_fsync_per_s", "batch_fsync_ratio", "publish_events_per_sync", "batch_events_per_sync"})
}

// runOne runs the phases against a fresh `rivora dev`, with --fsync or
// without.
func (b fsyncBench) runOne(fsync bool) (res fsyncRun, err error) {
	c := b.common
	c.fsync = fsync
	d, err := c.startDev()
	defer d.stop()
	if err != nil {
		return res, err
	}
	ctx := context.Background()
	hc := c.httpClient(b.conc)
	admin := rivorav1connect.NewAdminServiceClient(hc, d.url())
	ingest := rivorav1connect.NewIngestServiceClient(hc, d.url())
	p, err := partner.Start(partner.Options{CountOnly: true})
	if err != nil {
		return res, err
	}
	defer p.Close()
	req, err := b.requests(ctx, admin, p.URL())
	if err != nil {
		return res, err
	}
	nc, err := nats.Connect("nats://"+d.natsAddr, nats.Name("rivora-bench"))
	if err != nil {
		return res, fmt.Errorf("connect to embedded NATS %s: %w", d.natsAddr, err)
	}
	defer nc.Close()
	syncs := func() (float64, error) { return devMetric(ctx, hc, d.url(), "rivora_store_syncs_total") }

	progress("warm-up: 2000 Publish calls")
	if _, err := publishPhase(ctx, ingest, 2000, b.conc, b.limit, func(i int) *rivorav1.PublishRequest { return req(i + 1<<30) }); err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}
	if err := waitIdle(nc, b.limit); err != nil {
		return res, err
	}
	progress("Publish: %d events, %d concurrent (fsync %v)", b.n, b.conc, fsync)
	syncs0, err := syncs()
	if err != nil {
		return res, err
	}
	cpu0 := d.cpu()
	if res.pub, err = publishPhase(ctx, ingest, b.n, b.conc, b.limit, req); err != nil {
		return res, fmt.Errorf("publish phase: %w", err)
	}
	res.pub.serverCPU = d.cpu() - cpu0
	syncs1, err := syncs()
	if err != nil {
		return res, err
	}
	res.pubSyncs = syncs1 - syncs0
	progress("Publish: %.0f events/s, p50 %.2f ms, p99 %.2f ms, %.0f syncs", res.pub.rate(), ms(res.pub.p50), ms(res.pub.p99), res.pubSyncs)
	if err := waitIdle(nc, b.limit); err != nil {
		return res, err
	}
	progress("PublishBatch: %d events in batches of %d, %d concurrent (fsync %v)", b.batchN, b.batchSize, b.batchConc, fsync)
	if syncs0, err = syncs(); err != nil {
		return res, err
	}
	cpu0 = d.cpu()
	if res.bat, err = batchPhase(ctx, ingest, b.batchN, b.batchSize, b.batchConc, b.limit, req); err != nil {
		return res, fmt.Errorf("PublishBatch phase: %w", err)
	}
	res.bat.serverCPU = d.cpu() - cpu0
	if syncs1, err = syncs(); err != nil {
		return res, err
	}
	res.batSyncs = syncs1 - syncs0
	progress("PublishBatch: %.0f events/s, batch p50 %.2f ms, p99 %.2f ms, %.0f syncs", res.bat.rate(), ms(res.bat.p50), ms(res.bat.p99), res.batSyncs)
	return res, nil
}

// requests creates the destinations (with an almost empty budget: the
// events stay pending, so the phases measure ingest alone) and returns
// the i-th event to publish, as runIngest's.
func (b fsyncBench) requests(ctx context.Context, admin rivorav1connect.AdminServiceClient, partnerURL string) (func(int) *rivorav1.PublishRequest, error) {
	destIDs := make([]string, b.dests)
	for i := range destIDs {
		destIDs[i] = fmt.Sprintf("bench-%02d", i)
		if err := createDestination(ctx, admin, destIDs[i], partnerURL, &rivorav1.Limits{RatePerSecond: 0.001, Burst: 1}); err != nil {
			return nil, err
		}
	}
	body := payload(b.size, 1)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	return func(i int) *rivorav1.PublishRequest {
		r := &rivorav1.PublishRequest{
			DestinationId: destIDs[i%len(destIDs)], CustomerId: "bench", LaneKey: "lane-" + strconv.Itoa(i%b.lanes),
			Type: "bench.event", Payload: body,
		}
		if b.keyed {
			r.IdempotencyKey = run + "-" + strconv.Itoa(i)
		}
		return r
	}, nil
}

// devMetric reads one unlabelled sample of rivora dev's /metrics (0 when
// absent).
func devMetric(ctx context.Context, hc *http.Client, base, series string) (float64, error) {
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
	for line := range strings.Lines(string(body)) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	// A binary from before the group commit (-bin) has none: no syncs
	// counted.
	return 0, nil
}

// phaseProfile records a CPU profile of the server for seconds into
// dir/name.pprof while a phase runs (-profile-dir), and what it
// allocated meanwhile into dir/name-allocs.pprof; wait returns their
// error once the phase is over. dir "" records nothing.
func phaseProfile(ctx context.Context, d *dev, dir, name string, seconds int) (wait func() error) {
	if dir == "" {
		return func() error { return nil }
	}
	record := func(kind, file string) <-chan error {
		done := make(chan error, 1)
		go func() {
			p, err := fetchProfile(ctx, fmt.Sprintf("%s/debug/pprof/%s?seconds=%d", d.url(), kind, seconds))
			if err == nil {
				err = writeMergedProfile(dir, file, []*profile.Profile{p})
			}
			done <- err
		}()
		return done
	}
	cpu, allocs := record("profile", name+".pprof"), record("allocs", name+"-allocs.pprof")
	return func() error { return errors.Join(<-cpu, <-allocs) }
}
