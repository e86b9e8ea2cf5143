package main

// edge measures `rivora edge` joined to a `rivora dev` cell through a WAN
// that is cut silently (testkit/cutproxy), on one machine:
//
//   - ingest at the edge while its link is cut (it stores and
//     acknowledges locally): Publish and PublishBatch, as ratios of raw
//     JetStream async publish measured in the same run (the limit of a
//     JetStream store on this machine), and next to the cell's own
//     PublishBatch;
//   - forwarding: the cut lasts until the edge holds -backlog events
//     (1M), then the link returns; the time until the edge's buffer is
//     empty (events/s), and until the cell has moved them all into lanes;
//   - a bystander destination on the cell, published to at a steady rate
//     and delivered at once: its delivery p99 (publish call to the
//     partner's 2xx) with the cell idle, and during the catch-up.
//
// The backlog's destination has an almost empty budget: its events stay
// pending in lanes, so the catch-up is the forwarding and the move into
// lanes, not their delivery (bench deliver measures that). Edge and cell
// share this machine's cores, as they never would in production: every
// figure is a floor.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/e2e/creds"
	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/cutproxy"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

type edgeFlags struct {
	common
	n, conc                  int
	batchN, batch, batchConc int
	rawN, rawPending         int
	backlog                  int
	size, lanes              int
	bystanderRate            int
	bystanderIdle            time.Duration
	maxBuffer                int64
	limit, forwardLimit      time.Duration
}

func runEdge(args []string) error {
	fs := flag.NewFlagSet("edge", flag.ExitOnError)
	var f edgeFlags
	f.register(fs)
	fs.IntVar(&f.n, "n", 40000, "events for the edge's Publish phase")
	fs.IntVar(&f.conc, "c", 64, "concurrent Publish calls")
	fs.IntVar(&f.batchN, "batch-n", 200000, "events for the PublishBatch phases (edge and cell)")
	fs.IntVar(&f.batch, "batch", 500, "events per PublishBatch")
	fs.IntVar(&f.batchConc, "batch-c", 4, "concurrent PublishBatch calls")
	fs.IntVar(&f.rawN, "raw-n", 200000, "messages for the raw JetStream phase")
	fs.IntVar(&f.rawPending, "raw-pending", 4000, "raw JetStream max outstanding async publishes")
	fs.IntVar(&f.backlog, "backlog", 1000000, "events the edge holds when the link returns (the Publish and PublishBatch phases count)")
	fs.IntVar(&f.size, "payload", 256, "payload bytes")
	fs.IntVar(&f.lanes, "lanes", 2000, "lane keys to spread the backlog over")
	fs.IntVar(&f.bystanderRate, "bystander-rate", 100, "events/s published to the bystander destination on the cell")
	fs.DurationVar(&f.bystanderIdle, "bystander-idle", 10*time.Second, "how long the bystander's baseline (cell idle) runs")
	fs.Int64Var(&f.maxBuffer, "max-buffer", 8<<30, "rivora edge --max-buffer (bytes)")
	fs.DurationVar(&f.limit, "phase-timeout", 5*time.Minute, "fail when a publish phase takes longer")
	fs.DurationVar(&f.forwardLimit, "forward-timeout", 15*time.Minute, "fail when forwarding the backlog takes longer")
	fs.Parse(args)
	fmt.Fprintf(os.Stderr, "bench edge: GOMAXPROCS=%d NumCPU=%d payload=%dB backlog=%d\n", runtime.GOMAXPROCS(0), runtime.NumCPU(), f.size, f.backlog)
	if f.backlog < f.n+f.batchN {
		return fmt.Errorf("-backlog %d is less than the Publish and PublishBatch phases (%d)", f.backlog, f.n+f.batchN)
	}
	return f.run(context.Background())
}

// edgeRig is the cell, the WAN and the edge.
type edgeRig struct {
	d        *dev
	tokenDir string // the cell token's (removed by stop)
	cell     auth.CellToken
	leaf, cp *cutproxy.Proxy
	edge     *proc
	name     string
	admin    rivorav1connect.AdminServiceClient
	cellAPI  rivorav1connect.IngestServiceClient
	edgeAPI  rivorav1connect.IngestServiceClient
	nc       *nats.Conn // to the cell's NATS
}

// edgeResult is what the phases measured.
type edgeResult struct {
	raw, pub, bat, cellBat, fill row
	forward, drain               time.Duration
	bytesPerEvent                float64 // the edge's buffer, on disk, per event
	idle, catchup                latencies
}

func (f *edgeFlags) run(ctx context.Context) error {
	r, err := f.start(ctx)
	defer r.stop()
	if err != nil {
		return err
	}
	res := &edgeResult{}
	backlogPartner, bystander, err := f.destinations(ctx, r)
	for _, p := range []*partner.Partner{backlogPartner, bystander} {
		if p != nil {
			defer p.Close()
		}
	}
	if err != nil {
		return err
	}
	if err := f.rawBaseline(ctx, r, res); err != nil {
		return err
	}
	r.leaf.Cut()
	r.cp.Cut()
	progress("WAN cut: the edge stores and acknowledges on its own")
	if err := f.ingestPhases(ctx, r, res); err != nil {
		return err
	}
	if err := waitIdle(r.nc, f.limit); err != nil {
		return err
	}
	progress("bystander baseline: %d events/s for %s, cell idle", f.bystanderRate, f.bystanderIdle)
	idleCtx, cancel := context.WithTimeout(ctx, f.bystanderIdle)
	idle, err := f.runBystander(idleCtx, r, bystander, 0)
	cancel()
	if err != nil {
		return err
	}
	res.idle = summarize(idle)
	if err := f.catchUp(ctx, r, backlogPartner, bystander, res); err != nil {
		return err
	}
	return f.report(res)
}

// start builds rivora, starts `rivora dev` with a leaf port and the edge
// joined to it through two proxies (leaf port, control plane API).
func (f *edgeFlags) start(ctx context.Context) (*edgeRig, error) {
	r := &edgeRig{name: "bench-edge"}
	tokenDir, err := os.MkdirTemp("", "rivora-bench-edge-")
	if err != nil {
		return r, err
	}
	r.tokenDir = tokenDir
	tokenPath, err := creds.WriteCellToken(tokenDir)
	if err != nil {
		return r, err
	}
	if r.cell, err = auth.LoadCellToken(tokenPath); err != nil {
		return r, err
	}
	leafPort, err := freePort()
	if err != nil {
		return r, err
	}
	leafAddr := "127.0.0.1:" + strconv.Itoa(leafPort)
	f.devArgs = []string{"--leaf-listen", leafAddr, "--cell-token-file", tokenPath}
	if r.d, err = f.startDev(); err != nil {
		return r, err
	}
	if r.nc, err = nats.Connect("nats://"+r.d.natsAddr, nats.Name("rivora-bench"), nats.UserInfo(natsd.User, r.cell.Derive("nats"))); err != nil {
		return r, fmt.Errorf("connect to the cell's NATS %s: %w", r.d.natsAddr, err)
	}
	hc := f.httpClient(f.conc)
	r.admin = rivorav1connect.NewAdminServiceClient(hc, r.d.url())
	r.cellAPI = rivorav1connect.NewIngestServiceClient(hc, r.d.url())
	if r.leaf, err = cutproxy.Start(leafAddr); err != nil {
		return r, err
	}
	if r.cp, err = cutproxy.Start(r.d.Addr); err != nil {
		return r, err
	}
	tokens := rivorav1connect.NewTokenServiceClient(hc, r.d.url())
	tok, err := tokens.CreateToken(ctx, connect.NewRequest(&rivorav1.CreateTokenRequest{Name: "bench-edge-publisher", Role: rivorav1.Role_ROLE_PUBLISHER, Customers: []string{"*"}}))
	if err != nil {
		return r, fmt.Errorf("create a publisher token: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return r, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	creds.Register(tok.Msg.GetToken(), "http://"+addr)
	dataDir := filepath.Join(r.d.dir, "edge")
	args := []string{"edge", "--name", r.name, "--listen", addr, "--data-dir", dataDir,
		"--cell-leaf", "nats-leaf://" + r.leaf.Addr(), "--controlplane", "http://" + r.cp.Addr(),
		"--cell-token-file", tokenPath, "--max-buffer", strconv.FormatInt(f.maxBuffer, 10)}
	bin := r.d.Bin
	if r.edge, err = startProc(bin, "rivora edge", addr, filepath.Join(r.d.dir, "edge.log"), args, false); err != nil {
		return r, err
	}
	if _, err := r.edge.waitHealthy(ctx, 60*time.Second, 50*time.Millisecond); err != nil {
		return r, err
	}
	r.edgeAPI = rivorav1connect.NewIngestServiceClient(hc, r.edge.url())
	progress("rivora edge %s healthy on %s, joined through %s (leaf) and %s (control plane)", r.name, addr, r.leaf.Addr(), r.cp.Addr())
	return r, nil
}

func (r *edgeRig) stop() {
	if r.nc != nil {
		r.nc.Close()
	}
	if r.edge != nil {
		r.edge.stop(20 * time.Second)
	}
	for _, p := range []*cutproxy.Proxy{r.leaf, r.cp} {
		if p != nil {
			p.Close()
		}
	}
	r.d.stop()
	if r.tokenDir != "" {
		os.RemoveAll(r.tokenDir)
	}
}

// destinations creates the backlog's destination (an almost empty
// budget: its events stay pending) and the bystander (open), and waits
// until the edge applied them.
func (f *edgeFlags) destinations(ctx context.Context, r *edgeRig) (*partner.Partner, *partner.Partner, error) {
	backlog, err := partner.Start(partner.Options{CountOnly: true})
	if err != nil {
		return nil, nil, err
	}
	bystander, err := partner.Start(partner.Options{})
	if err != nil {
		return backlog, nil, err
	}
	if err := createDestination(ctx, r.admin, "backlog", backlog.URL(), &rivorav1.Limits{RatePerSecond: 0.001, Burst: 1}); err != nil {
		return backlog, bystander, err
	}
	// Open: its latency is the cell's, not the default budget's (50/s).
	if err := createDestination(ctx, r.admin, "bystander", bystander.URL(), &rivorav1.Limits{RatePerSecond: 5000, Burst: 5000, MaxInFlight: 64}); err != nil {
		return backlog, bystander, err
	}
	st, err := r.admin.GetConfigStatus(ctx, connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
	if err != nil {
		return backlog, bystander, err
	}
	err = until(ctx, 30*time.Second, 50*time.Millisecond, "the edge applied the destinations", func() error {
		e, err := r.status(ctx)
		if err != nil {
			return err
		}
		if got := e.GetBuffer().GetAppliedVersion(); got < st.Msg.GetVersion() {
			return fmt.Errorf("edge applied version %d of %d", got, st.Msg.GetVersion())
		}
		return nil
	})
	return backlog, bystander, err
}

// status is the control plane's account of the edge.
func (r *edgeRig) status(ctx context.Context) (*rivorav1.EdgeStatus, error) {
	resp, err := r.admin.GetEdge(ctx, connect.NewRequest(&rivorav1.GetEdgeRequest{Name: r.name}))
	if err != nil {
		return nil, fmt.Errorf("GetEdge %s: %w", r.name, err)
	}
	return resp.Msg.GetEdge(), nil
}

// rawBaseline is raw JetStream async publish on the cell's server: the
// machine's limit for a JetStream store, with no Rivora code in the path.
func (f *edgeFlags) rawBaseline(ctx context.Context, r *edgeRig, res *edgeResult) error {
	progress("raw JetStream async publish: %d messages of %d B, max pending %d", f.rawN, f.size, f.rawPending)
	cpu0 := r.d.cpu()
	var err error
	if res.raw, err = rawPhase(ctx, r.nc, f.rawN, f.rawPending, f.size, f.limit, false); err != nil {
		return fmt.Errorf("raw JetStream phase: %w", err)
	}
	res.raw.serverCPU = r.d.cpu() - cpu0
	progress("raw JetStream: %.0f msgs/s", res.raw.rate())
	return dropRawStreams(ctx, r.nc)
}

// ingestPhases measure the edge's Publish and PublishBatch with its link
// cut, the cell's PublishBatch, then fill the edge's buffer to -backlog.
func (f *edgeFlags) ingestPhases(ctx context.Context, r *edgeRig, res *edgeResult) error {
	body := payload(f.size, 7)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	req := func(i int) *rivorav1.PublishRequest {
		return &rivorav1.PublishRequest{DestinationId: "backlog", CustomerId: "bench", LaneKey: "lane-" + strconv.Itoa(i%f.lanes),
			Type: "bench.event", Payload: body, IdempotencyKey: run + "-" + strconv.Itoa(i)}
	}
	var err error
	progress("edge Publish: %d events, %d concurrent", f.n, f.conc)
	if res.pub, err = publishPhase(ctx, r.edgeAPI, f.n, f.conc, f.limit, req); err != nil {
		return fmt.Errorf("edge Publish phase: %w", err)
	}
	res.pub.name = "edge Publish"
	progress("edge Publish: %.0f events/s, p99 %.2f ms", res.pub.rate(), ms(res.pub.p99))
	progress("edge PublishBatch: %d events in batches of %d, %d concurrent", f.batchN, f.batch, f.batchConc)
	// batchPhase offsets its events by 1<<29: new events, not repeats.
	if res.bat, err = batchPhase(ctx, r.edgeAPI, f.batchN, f.batch, f.batchConc, f.limit, req); err != nil {
		return fmt.Errorf("edge PublishBatch phase: %w", err)
	}
	res.bat.name = "edge PublishBatch"
	progress("edge PublishBatch: %.0f events/s, batch p99 %.2f ms", res.bat.rate(), ms(res.bat.p99))

	progress("cell PublishBatch (for comparison): %d events", f.batchN)
	cellReq := func(i int) *rivorav1.PublishRequest {
		r := req(i)
		r.IdempotencyKey = "cell-" + r.IdempotencyKey
		return r
	}
	if res.cellBat, err = batchPhase(ctx, r.cellAPI, f.batchN, f.batch, f.batchConc, f.limit, cellReq); err != nil {
		return fmt.Errorf("cell PublishBatch phase: %w", err)
	}
	res.cellBat.name = "cell PublishBatch"
	progress("cell PublishBatch: %.0f events/s", res.cellBat.rate())

	rest := f.backlog - f.n - f.batchN
	progress("filling the edge's buffer: %d more events", rest)
	fill := &batchPublish{n: rest, batch: f.batch, conc: f.batchConc, event: func(i int) *rivorav1.PublishRequest { return req(i + 1<<30) }}
	start := time.Now()
	fillCtx, cancel := context.WithTimeout(ctx, f.forwardLimit)
	defer cancel()
	if err := fill.run(fillCtx, r.edgeAPI); err != nil {
		return fmt.Errorf("filling the edge: %w", err)
	}
	res.fill = row{name: "edge PublishBatch (fill)", events: rest, elapsed: time.Since(start),
		note: fmt.Sprintf("the buffer growing from %d to %d events", f.n+f.batchN, f.backlog)}
	progress("filled: %.0f events/s", res.fill.rate())
	return f.bufferSize(ctx, r, res)
}

// bufferSize reads what the full buffer holds per event (its report
// comes through the cut link, so the edge's own metrics tell it).
func (f *edgeFlags) bufferSize(ctx context.Context, r *edgeRig, res *edgeResult) error {
	return until(ctx, 30*time.Second, 200*time.Millisecond, "the edge's metrics counting the backlog", func() error {
		events, err := r.edgeMetric(ctx, "rivora_edge_buffered_events")
		if err != nil {
			return err
		}
		bytes, err := r.edgeMetric(ctx, "rivora_edge_buffered_bytes")
		if err != nil {
			return err
		}
		if int(events) != f.backlog {
			return fmt.Errorf("rivora_edge_buffered_events %v, want %d", events, f.backlog)
		}
		res.bytesPerEvent = bytes / events
		progress("the edge's buffer holds %d events in %.0f MiB (%.0f B per event of %d B payload)", f.backlog, bytes/(1<<20), res.bytesPerEvent, f.size)
		return nil
	})
}

// edgeMetric reads one unlabelled sample of the edge's /metrics.
func (r *edgeRig) edgeMetric(ctx context.Context, series string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.edge.url()+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, fmt.Errorf("the edge's /metrics has no %s", series)
}

// catchUp restores the WAN and measures how long the edge takes to
// forward its buffer and the cell to move it into lanes, while the
// bystander publishes.
func (f *edgeFlags) catchUp(ctx context.Context, r *edgeRig, backlog, bystander *partner.Partner, res *edgeResult) error {
	byCtx, stopBystander := context.WithCancel(ctx)
	var lat []time.Duration
	var byErr error
	var wg sync.WaitGroup
	wg.Go(func() { lat, byErr = f.runBystander(byCtx, r, bystander, 1<<20) })
	defer func() { stopBystander(); wg.Wait() }()

	// The cut must have held: the edge still holds the whole backlog.
	if held, err := r.edgeMetric(ctx, "rivora_edge_buffered_events"); err != nil || int(held) != f.backlog {
		return fmt.Errorf("before the restore the edge holds %v events (%v), want %d: the cut did not hold", held, err, f.backlog)
	}
	r.leaf.Restore()
	r.cp.Restore()
	start := time.Now()
	progress("WAN restored: forwarding %d events", f.backlog)
	last := start
	// The edge's own metrics (sampled every second) tell it sooner than
	// its reports to the control plane (every 2 s).
	err := until(ctx, f.forwardLimit, 100*time.Millisecond, "the edge's buffer forwarded", func() error {
		connected, err := r.edgeMetric(ctx, "rivora_edge_cell_connected")
		if err != nil {
			return err
		}
		buffered, err := r.edgeMetric(ctx, "rivora_edge_buffered_events")
		if err != nil {
			return err
		}
		if connected == 1 && buffered == 0 {
			return nil
		}
		if time.Since(last) >= 5*time.Second {
			last = time.Now()
			progress("forwarding: %.0f events buffered at the edge", buffered)
		}
		return fmt.Errorf("%.0f events still buffered", buffered)
	})
	if err != nil {
		return err
	}
	res.forward = time.Since(start)
	progress("the edge's buffer is empty %s after the restore (%.0f events/s)", res.forward.Round(time.Millisecond), float64(f.backlog)/res.forward.Seconds())
	if err := f.checkBacklog(ctx, r, backlog); err != nil {
		return err
	}
	res.drain = time.Since(start)
	progress("every event is in its lane %s after the restore", res.drain.Round(time.Millisecond))
	stopBystander()
	wg.Wait()
	if byErr != nil {
		return fmt.Errorf("bystander: %w", byErr)
	}
	res.catchup = summarize(lat)
	return nil
}

// bystanderEvent is one event published to the bystander.
type bystanderEvent struct {
	id string
	at time.Time
}

// runBystander publishes f.bystanderRate events/s to the bystander on the
// cell until ctx ends, then waits for every one to be delivered and
// returns their delivery latencies (publish call to the partner's 2xx).
func (f *edgeFlags) runBystander(ctx context.Context, r *edgeRig, p *partner.Partner, seed int) ([]time.Duration, error) {
	var sent []bystanderEvent
	tick := time.NewTicker(time.Second / time.Duration(f.bystanderRate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return bystanderLatencies(p, sent)
		}
		at := time.Now()
		pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := r.cellAPI.Publish(pctx, connect.NewRequest(&rivorav1.PublishRequest{
			DestinationId: "bystander", CustomerId: "by", LaneKey: "b-" + strconv.Itoa((seed+i)%64), Type: "bench.bystander", Payload: payload(f.size, seed+i),
		}))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("publish to the bystander: %w", err)
		}
		sent = append(sent, bystanderEvent{resp.Msg.GetEventId(), at})
	}
}

// bystanderLatencies waits until every event sent was delivered and
// returns their latencies.
func bystanderLatencies(p *partner.Partner, sent []bystanderEvent) ([]time.Duration, error) {
	var lat []time.Duration
	err := until(context.Background(), 2*time.Minute, 50*time.Millisecond, "every bystander event delivered", func() error {
		lat = lat[:0]
		for _, s := range sent {
			t, ok := p.DeliveredAt(s.id)
			if !ok {
				return fmt.Errorf("%s not delivered yet", s.id)
			}
			lat = append(lat, t.Sub(s.at))
		}
		return nil
	})
	return lat, err
}

// checkBacklog waits until the backlog's destination counts every event
// published to it (through the edge and the cell) as pending or
// delivered, exactly: nothing lost, nothing doubled.
func (f *edgeFlags) checkBacklog(ctx context.Context, r *edgeRig, p *partner.Partner) error {
	want := int64(f.backlog + f.batchN)
	return until(ctx, f.forwardLimit, 100*time.Millisecond, "the backlog counted at the cell", func() error {
		resp, err := r.admin.GetDestination(ctx, connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "backlog"}))
		if err != nil {
			return poll.GiveUp(err)
		}
		if got := resp.Msg.GetPending() + int64(p.Delivered()); got != want {
			return fmt.Errorf("backlog destination: %d pending + %d delivered, want %d in all (%d through the edge, %d through the cell)",
				resp.Msg.GetPending(), p.Delivered(), want, f.backlog, f.batchN)
		}
		return nil
	})
}

func (f *edgeFlags) report(res *edgeResult) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tevents\tseconds\tevents/s\tratio to raw\tp99 ms\t")
	for _, r := range []row{res.pub, res.bat, res.fill, res.cellBat, res.raw} {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%.3f\t%.2f\t\n", r.name, r.events, r.elapsed.Seconds(), r.rate(), r.rate()/res.raw.rate(), ms(r.p99))
	}
	fmt.Fprintf(tw, "forwarding\t%d\t%.2f\t%.0f\t\t\t\n", f.backlog, res.forward.Seconds(), float64(f.backlog)/res.forward.Seconds())
	fmt.Fprintf(tw, "moved into lanes\t%d\t%.2f\t%.0f\t\t\t\n", f.backlog, res.drain.Seconds(), float64(f.backlog)/res.drain.Seconds())
	tw.Flush()
	fmt.Printf("bystander delivery: p99 %.2f ms with the cell idle (%d events), %.2f ms during the catch-up (%d events)\n",
		ms(res.idle.p99), res.idle.events, ms(res.catchup.p99), res.catchup.events)
	return printJSON(map[string]float64{
		"raw_async_per_s":          round(res.raw.rate(), 0),
		"edge_publish_per_s":       round(res.pub.rate(), 0),
		"edge_batch_per_s":         round(res.bat.rate(), 0),
		"publish_ratio":            round(res.pub.rate()/res.raw.rate(), 3),
		"batch_ratio":              round(res.bat.rate()/res.raw.rate(), 3),
		"cell_batch_per_s":         round(res.cellBat.rate(), 0),
		"edge_vs_cell_batch":       round(res.bat.rate()/res.cellBat.rate(), 3),
		"backlog_events":           float64(f.backlog),
		"buffer_bytes_per_event":   round(res.bytesPerEvent, 0),
		"forward_per_s":            round(float64(f.backlog)/res.forward.Seconds(), 0),
		"forward_seconds":          round(res.forward.Seconds(), 1),
		"lanes_seconds":            round(res.drain.Seconds(), 1),
		"bystander_idle_p99_ms":    round(ms(res.idle.p99), 2),
		"bystander_catchup_p99_ms": round(ms(res.catchup.p99), 2),
	}, []string{"raw_async_per_s", "edge_publish_per_s", "edge_batch_per_s", "publish_ratio", "batch_ratio", "cell_batch_per_s", "edge_vs_cell_batch",
		"backlog_events", "buffer_bytes_per_event", "forward_per_s", "forward_seconds", "lanes_seconds", "bystander_idle_p99_ms", "bystander_catchup_p99_ms"})
}
