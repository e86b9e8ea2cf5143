// Command bench measures a real `rivora dev` process on 127.0.0.1 next to a
// baseline without Rivora on the same machine, or (failover) a cell of a
// control plane and three agents on a real Consul:
//
//	go run ./e2e/bench ingest   # Publish / PublishBatch vs raw JetStream async publish
//	go run ./e2e/bench deliver  # backlog drain vs a raw Go HTTP client→server loop
//	go run ./e2e/bench rebuild  # restart with 1M pending events: scheduler rebuild time and memory
//	go run ./e2e/bench gameday  # a WAF throttling one partner, or a partner hard down
//	go run ./e2e/bench failover # kill -9 an agent of a three-agent cell on Consul mid-delivery
//	go run ./e2e/bench lanes    # ListLanes over 1M pending lanes, and delivery p99 elsewhere while it runs
//	go run ./e2e/bench history  # memory per retained event after a restart; events get p50/p99 at 1M and 10M
//	go run ./e2e/bench fanout   # PublishBatch fanning out to 1, 3 and 10 subscriptions vs the direct path; memory and match cost per subscription
//	go run ./e2e/bench edge     # an edge's Publish/PublishBatch vs raw JetStream; forwarding 1M events buffered during a cut; a bystander's p99 meanwhile
//	go run ./e2e/bench scale    # 10M pending events over 1M lanes and 10k destinations: fill, memory, rebuild, lookups, delivery at 10M vs 10k pending, pause/resume
//	go run ./e2e/bench flood    # one customer's flood of PublishBatch calls: another customer's Publish latency beside it, with the gateway's turns and without
//
// Progress goes to stderr; a table and, as the last line, one JSON object go
// to stdout. It exits non-zero with a message when anything fails or a phase
// overruns its time limit.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
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
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/ports"
)

func main() {
	if len(os.Args) < 2 || strings.HasPrefix(os.Args[1], "-") {
		usage()
		os.Exit(2)
	}
	mode, args := os.Args[1], os.Args[2:]
	var err error
	switch mode {
	case "ingest":
		err = runIngest(args)
	case "deliver":
		err = runDeliver(args)
	case "gameday":
		err = runGameday(args)
	case "rebuild":
		err = runRebuild(args)
	case "failover":
		err = runFailover(args)
	case "lanes":
		err = runLanes(args)
	case "history":
		err = runHistory(args)
	case "fanout":
		err = runFanout(args)
	case "edge":
		err = runEdge(args)
	case "scale":
		err = runScale(args)
	case "flood":
		err = runFlood(args)
	default:
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench %s: FAILED: %v\n", mode, err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: go run ./e2e/bench ingest|deliver|gameday|rebuild|failover|lanes|history|fanout|edge|scale|flood [flags]  (-h for flags)")
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// ---------------------------------------------------------------------------
// common: the rivora dev process

type common struct {
	bin        string
	partitions int
	workers    int
	fsync      bool
	h2c        bool
	keep       bool
	// pprof serves /debug/pprof (a mode that reads the heap sets it).
	pprof bool
	// devArgs are more flags for rivora dev (a mode sets them).
	devArgs []string
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.bin, "bin", "", "rivora binary to run (default: go build ./cmd/rivora into a temp dir)")
	fs.IntVar(&c.partitions, "partitions", 16, "rivora dev --partitions")
	fs.IntVar(&c.workers, "workers", 64, "rivora dev --workers")
	fs.BoolVar(&c.fsync, "fsync", false, "run rivora dev with --fsync (ingest: run its Publish and PublishBatch phases without --fsync, then with it, and compare)")
	fs.BoolVar(&c.h2c, "h2c", false, "talk to rivora over h2c instead of HTTP/1.1 with many connections")
	fs.BoolVar(&c.keep, "keep", false, "keep the temp data dir and log")
}

// dev is `rivora dev` in a temporary directory.
type dev struct {
	*proc
	natsAddr string
	dir      string
	keep     bool
}

func (c *common) startDev() (d *dev, err error) {
	dir, err := os.MkdirTemp("", "rivora-bench-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if d == nil {
			os.RemoveAll(dir)
		}
	}()
	bin, err := buildRivora(context.Background(), c.bin, dir)
	if err != nil {
		return nil, err
	}
	p1, err := freePort()
	if err != nil {
		return nil, err
	}
	p2, err := freePort()
	if err != nil {
		return nil, err
	}
	d = &dev{natsAddr: "127.0.0.1:" + strconv.Itoa(p2), dir: dir, keep: c.keep}
	addr := "127.0.0.1:" + strconv.Itoa(p1)
	args := []string{"dev", "--listen", addr, "--data-dir", filepath.Join(dir, "data"),
		"--nats-listen", d.natsAddr, "--partitions", strconv.Itoa(c.partitions), "--workers", strconv.Itoa(c.workers)}
	if c.fsync {
		args = append(args, "--fsync")
	}
	if c.pprof {
		args = append(args, "--pprof")
	}
	args = append(args, c.devArgs...)
	if d.proc, err = startProc(bin, "rivora dev", addr, filepath.Join(dir, "rivora.log"), args, false); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if _, err := d.waitHealthy(context.Background(), 60*time.Second, 50*time.Millisecond); err != nil {
		return d, err
	}
	progress("rivora dev healthy on %s (NATS on %s)", d.Addr, d.natsAddr)
	return d, nil
}

// stop terminates the process (SIGTERM, then SIGKILL after 20s) and removes
// the temp dir unless asked to keep it.
func (d *dev) stop() {
	if d == nil {
		return
	}
	d.proc.stop(20 * time.Second)
	if d.keep {
		progress("kept %s", d.dir)
		return
	}
	os.RemoveAll(d.dir)
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run from inside the rivora module (or pass -bin)")
	}
	return filepath.Dir(gomod), nil
}

// freePort is a port for a process to bind later (testkit/ports).
func freePort() (int, error) { return ports.Free() }

func (c *common) httpClient(conns int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = conns * 2
	t.MaxIdleConnsPerHost = conns * 2
	t.MaxConnsPerHost = 0
	if c.h2c {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		t.Protocols = &p
	}
	return &http.Client{Transport: withBearer(t)}
}

func payload(size int, seed int) []byte {
	b := make([]byte, size)
	copy(b, fmt.Sprintf(`{"seq":%d,"pad":"`, seed))
	for i := range b {
		if b[i] == 0 {
			b[i] = 'a' + byte((i+seed)%26)
		}
	}
	if size >= 2 {
		b[size-2], b[size-1] = '"', '}'
	}
	return b
}

func createDestination(ctx context.Context, admin rivorav1connect.AdminServiceClient, id, url string, limits *rivorav1.Limits) error {
	resp, err := admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: id, Url: url, Limits: limits}))
	if err != nil {
		return fmt.Errorf("create destination %s: %w", id, err)
	}
	return waitApplied(ctx, admin, resp.Msg.GetVersion())
}

// waitApplied waits until every connected agent applied config version v:
// changes reach agents asynchronously.
func waitApplied(ctx context.Context, admin rivorav1connect.AdminServiceClient, v uint64) error {
	return until(ctx, 30*time.Second, 10*time.Millisecond, fmt.Sprintf("config version %d applied", v), func() error {
		resp, err := admin.GetConfigStatus(ctx, connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
		if err != nil {
			return poll.GiveUp(fmt.Errorf("config status: %w", err))
		}
		connected, behind := 0, 0
		for _, a := range resp.Msg.GetAgents() {
			if a.GetConnected() {
				connected++
				if a.GetAppliedVersion() < v {
					behind++
				}
			}
		}
		if connected > 0 && behind == 0 {
			return nil
		}
		return fmt.Errorf("%d agents connected, %d behind", connected, behind)
	})
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func round(f float64, digits int) float64 {
	s := strconv.FormatFloat(f, 'f', digits, 64)
	r, _ := strconv.ParseFloat(s, 64)
	return r
}

// ---------------------------------------------------------------------------
// ingest

type row struct {
	name     string
	events   int
	elapsed  time.Duration
	p50, p99 time.Duration
	note     string
	// serverCPU is the rivora process's CPU time during the phase (it
	// includes moving events into lanes while the phase runs).
	serverCPU time.Duration
	// serverSystemCPU is the part of serverCPU spent in the kernel (the
	// stores' write system calls, page faults): where a noisy machine's
	// spread between runs mostly shows (set for the PublishBatch phase
	// and its raw baseline).
	serverSystemCPU time.Duration
	// clientCPU is this bench process's CPU time during the phase: the
	// callers (Connect clients, or the raw NATS publisher) share the
	// machine's cores with the server.
	clientCPU time.Duration
	// windows and slowWindows (an open-loop phase): its calls grouped by
	// when each was due into windows of stallWindow, and how many of
	// those had a median latency above stallMedian — stalls, when every
	// call waits, rather than a slow tail.
	windows, slowWindows int
}

func (r row) rate() float64 { return float64(r.events) / r.elapsed.Seconds() }

// stalledShare is the share of an open-loop phase's windows that stalled
// (0 for a phase without windows).
func (r row) stalledShare() float64 {
	if r.windows == 0 {
		return 0
	}
	return float64(r.slowWindows) / float64(r.windows)
}

func (r row) cpuPerEvent() float64 {
	return float64(r.serverCPU.Microseconds()) / float64(r.events)
}

func (r row) systemCPUPerEvent() float64 {
	return float64(r.serverSystemCPU.Microseconds()) / float64(r.events)
}

func (r row) clientCPUPerEvent() float64 {
	return float64(r.clientCPU.Microseconds()) / float64(r.events)
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// benchCPU is this process's user+system CPU time so far.
func benchCPU() time.Duration { return processCPU(os.Getpid()) }

// waitIdle waits until the INGEST stream is empty, so one phase is not
// charged for moving the previous phase's events into lanes.
func waitIdle(nc *nats.Conn, limit time.Duration) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	start := time.Now()
	var msgs uint64
	err = poll.Check(limit, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := js.Stream(ctx, "INGEST")
		msgs = 0
		if err == nil {
			var info *jetstream.StreamInfo
			info, err = st.Info(ctx)
			if err == nil {
				msgs = info.State.Msgs
			}
		}
		cancel()
		if err != nil {
			progress("cannot read the INGEST stream (%v); not waiting for the server to go idle", err)
			return nil
		}
		if msgs == 0 {
			progress("server idle (INGEST empty) after %s", time.Since(start).Round(time.Millisecond))
			return nil
		}
		return errNotIdle
	})
	if err != nil {
		return fmt.Errorf("INGEST still holds %d events %s after the phase", msgs, limit)
	}
	return nil
}

// errNotIdle is waitIdle's check while INGEST holds events.
var errNotIdle = errors.New("INGEST not empty")

func runIngest(args []string) error {
	fs := flag.NewFlagSet("ingest", flag.ExitOnError)
	var c common
	c.register(fs)
	n := fs.Int("n", 40000, "events for the Publish phase")
	conc := fs.Int("c", 64, "concurrent Publish calls")
	batchN := fs.Int("batch-n", 200000, "events for the PublishBatch phase")
	batchSize := fs.Int("batch", 500, "events per PublishBatch")
	batchConc := fs.Int("batch-c", 4, "concurrent PublishBatch calls")
	rawN := fs.Int("raw-n", 200000, "messages for the raw JetStream phase")
	rawPending := fs.Int("raw-pending", 4000, "raw JetStream max outstanding async publishes")
	size := fs.Int("payload", 256, "payload bytes")
	dests := fs.Int("dests", 16, "destinations to spread events over")
	lanes := fs.Int("lanes", 2000, "lane keys to spread events over")
	limit := fs.Duration("phase-timeout", 90*time.Second, "fail when a phase takes longer")
	keyed := fs.Bool("keys", true, "give every event its own idempotency key, as the SDKs do (the server then checks it is not reused for another event)")
	pacedRate := fs.Float64("paced-rate", 10000, "Publish calls per second offered in the open-loop phases: by the generated Connect client (its p99 is publish_p99_ms_at_rate), then by the lean caller (publish_p99_ms_at_rate_lean)")
	pacedN := fs.Int("paced-n", 30000, "events for each open-loop Publish phase")
	profileDir := fs.String("profile-dir", "", "write CPU profiles of the server during the raw publish over the lanes' subjects (raw-msgid-lanes.pprof, its first second), Publish (publish.pprof, its first seconds), paced Publish (paced.pprof and paced-lean.pprof, their first seconds) and PublishBatch (batch.pprof) phases, and beside each what the server allocated meanwhile (NAME-allocs.pprof), into `DIR`")
	fs.Parse(args)
	if *profileDir != "" {
		c.pprof = true
		if err := os.MkdirAll(*profileDir, 0o755); err != nil {
			return err
		}
	}
	if c.fsync {
		// The same phases without --fsync and with it, back to back
		// (publish.go).
		return fsyncBench{common: c, n: *n, conc: *conc, batchN: *batchN, batchSize: *batchSize, batchConc: *batchConc,
			size: *size, dests: *dests, lanes: *lanes, limit: *limit, keyed: *keyed}.run()
	}

	fmt.Fprintf(os.Stderr, "bench ingest: GOMAXPROCS=%d NumCPU=%d payload=%dB\n", runtime.GOMAXPROCS(0), runtime.NumCPU(), *size)
	d, err := c.startDev()
	defer d.stop()
	if err != nil {
		return err
	}
	ctx := context.Background()
	hc := c.httpClient(*conc)
	admin := rivorav1connect.NewAdminServiceClient(hc, d.url())
	ingest := rivorav1connect.NewIngestServiceClient(hc, d.url())

	// Destinations with an almost empty budget: the events stay pending, so
	// the measurement is ingest alone, not ingest plus delivery.
	p, err := partner.Start(partner.Options{CountOnly: true})
	if err != nil {
		return err
	}
	defer p.Close()
	destIDs := make([]string, *dests)
	for i := range destIDs {
		destIDs[i] = fmt.Sprintf("bench-%02d", i)
		if err := createDestination(ctx, admin, destIDs[i], p.URL(), &rivorav1.Limits{RatePerSecond: 0.001, Burst: 1}); err != nil {
			return err
		}
	}
	body := payload(*size, 1)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	req := func(i int) *rivorav1.PublishRequest {
		r := &rivorav1.PublishRequest{
			DestinationId: destIDs[i%len(destIDs)],
			CustomerId:    "bench",
			LaneKey:       "lane-" + strconv.Itoa(i%*lanes),
			Type:          "bench.event",
			Payload:       body,
		}
		if *keyed {
			r.IdempotencyKey = run + "-" + strconv.Itoa(i)
		}
		return r
	}

	nc, err := nats.Connect("nats://"+d.natsAddr, nats.Name("rivora-bench"))
	if err != nil {
		return fmt.Errorf("connect to embedded NATS %s: %w", d.natsAddr, err)
	}
	defer nc.Close()

	// The raw baseline runs first, on a quiet server.
	progress("raw JetStream async publish: %d messages of %d B, max pending %d", *rawN, *size, *rawPending)
	cpu0, client0 := d.cpu(), benchCPU()
	raw, err := rawPhase(ctx, nc, *rawN, *rawPending, *size, *limit, false)
	if err != nil {
		return fmt.Errorf("raw JetStream phase: %w", err)
	}
	raw.serverCPU, raw.clientCPU = d.cpu()-cpu0, benchCPU()-client0
	progress("raw JetStream: %.0f msgs/s", raw.rate())
	progress("raw JetStream async publish with Nats-Msg-Id (the baseline of batch_ratio_msgid)")
	cpu0, sys0, client0 := d.cpu(), d.systemCPU(), benchCPU()
	rawID, err := rawPhase(ctx, nc, *rawN, *rawPending, *size, *limit, true)
	if err != nil {
		return fmt.Errorf("raw JetStream phase with Nats-Msg-Id: %w", err)
	}
	rawID.serverCPU, rawID.serverSystemCPU, rawID.clientCPU = d.cpu()-cpu0, d.systemCPU()-sys0, benchCPU()-client0
	progress("raw JetStream with Nats-Msg-Id: %.0f msgs/s", rawID.rate())
	// Event i goes to destination i mod dests, lane i mod lanes: the
	// lanes in use are lcm(dests, lanes) pairs.
	laneSubjects := *dests / gcd(*dests, *lanes) * *lanes
	progress("raw JetStream async publish with Nats-Msg-Id over %d subjects (as many as the Rivora phases' lanes)", laneSubjects)
	cpu0, client0 = d.cpu(), benchCPU()
	profiled := phaseProfile(ctx, d, *profileDir, "raw-msgid-lanes", 1)
	rawLanes, err := rawPhaseOver(ctx, nc, *rawN, *rawPending, *size, *limit, true, laneSubjects)
	if err != nil {
		return fmt.Errorf("raw JetStream phase over %d subjects: %w", laneSubjects, err)
	}
	rawLanes.serverCPU, rawLanes.clientCPU = d.cpu()-cpu0, benchCPU()-client0
	if err := profiled(); err != nil {
		return err
	}
	progress("raw JetStream with Nats-Msg-Id over %d subjects: %.0f msgs/s", laneSubjects, rawLanes.rate())
	if err := dropRawStreams(ctx, nc); err != nil {
		return err
	}

	// Warm up connections and the server.
	progress("warm-up: 2000 Publish calls")
	if _, err := publishPhase(ctx, ingest, 2000, *conc, *limit, func(i int) *rivorav1.PublishRequest { return req(i + 1<<30) }); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if err := waitIdle(nc, *limit); err != nil {
		return err
	}

	progress("Publish: %d events, %d concurrent", *n, *conc)
	cpu0, client0 = d.cpu(), benchCPU()
	profiled = phaseProfile(ctx, d, *profileDir, "publish", 4)
	pub, err := publishPhase(ctx, ingest, *n, *conc, *limit, req)
	if err != nil {
		return fmt.Errorf("publish phase: %w", err)
	}
	pub.serverCPU, pub.clientCPU = d.cpu()-cpu0, benchCPU()-client0
	if err := profiled(); err != nil {
		return err
	}
	progress("Publish: %.0f events/s, p50 %.2f ms, p99 %.2f ms", pub.rate(), ms(pub.p50), ms(pub.p99))
	if err := waitIdle(nc, *limit); err != nil {
		return err
	}

	paced, err := pacedPhases(ctx, d, hc, nc, ingest, *pacedN, *pacedRate, *limit, *profileDir, req)
	if err != nil {
		return err
	}

	progress("PublishBatch: %d events in batches of %d, %d concurrent", *batchN, *batchSize, *batchConc)
	cpu0, sys0, client0 = d.cpu(), d.systemCPU(), benchCPU()
	profiled = phaseProfile(ctx, d, *profileDir, "batch", 4)
	bat, err := batchPhase(ctx, ingest, *batchN, *batchSize, *batchConc, *limit, req)
	if err != nil {
		return fmt.Errorf("PublishBatch phase: %w", err)
	}
	bat.serverCPU, bat.serverSystemCPU, bat.clientCPU = d.cpu()-cpu0, d.systemCPU()-sys0, benchCPU()-client0
	if err := profiled(); err != nil {
		return err
	}
	progress("PublishBatch: %.0f events/s, batch p50 %.2f ms, p99 %.2f ms", bat.rate(), ms(bat.p50), ms(bat.p99))

	return reportIngest(ingestRows{pub: pub, paced: paced, bat: bat, raw: raw, rawID: rawID, rawLanes: rawLanes}, *pacedRate)
}

// gcCyclesSeries counts the server's completed GC cycles (/metrics).
const gcCyclesSeries = "go_gc_duration_seconds_count"

// ingestRows are the phases of `bench ingest`, for its report.
type ingestRows struct {
	pub, bat, raw, rawID, rawLanes row
	paced                          pacedRows
}

// pacedRows are the open-loop phases: Rivora and the Connect floor, each
// called by the generated Connect client (the Go SDK's) and by the lean
// caller (leanclient.go).
type pacedRows struct {
	sdk, lean, floor, floorLean row
	// gc, gcLean: the server's completed GC cycles during each Rivora
	// phase.
	gc, gcLean float64
}

// pacedPhases offers n Publish calls at rate per second to Rivora, open
// loop, first with the generated Connect client, then with the lean
// caller; then the same two to the Connect floor (floor.go): this
// machine's limit for one Publish per call.
func pacedPhases(ctx context.Context, d *dev, hc *http.Client, nc *nats.Conn, ingest rivorav1connect.IngestServiceClient, n int, rate float64, limit time.Duration, profileDir string, req func(int) *rivorav1.PublishRequest) (pacedRows, error) {
	var out pacedRows
	lean, err := leanCaller(d.url(), 512)
	if err != nil {
		return out, err
	}
	// The Connect client's connections are warm (the phases before);
	// the lean caller's are opened as the warm-up's were (2000 calls, 64
	// at a time), its events past both open loops'.
	if _, err := publishPhaseBy(ctx, lean, 2000, 64, limit, func(i int) *rivorav1.PublishRequest { return req(i + 1<<28 + 2*n) }); err != nil {
		return out, fmt.Errorf("lean caller's warm-up: %w", err)
	}
	phases := []struct {
		name    string
		caller  publishCaller
		offset  int
		profile string
		row     *row
		gc      *float64
	}{
		{"the Connect client", connectCaller(ingest), 1 << 28, "paced", &out.sdk, &out.gc},
		{"the lean caller", lean, 1<<28 + n, "paced-lean", &out.lean, &out.gcLean},
	}
	for _, ph := range phases {
		progress("Publish at %.0f/s offered by %s: %d events, open loop", rate, ph.name, n)
		cpu0, client0 := d.cpu(), benchCPU()
		gc0, err := devMetric(ctx, hc, d.url(), gcCyclesSeries)
		if err != nil {
			return out, err
		}
		profiled := phaseProfile(ctx, d, profileDir, ph.profile, 2)
		r, err := pacedPublishPhase(ctx, ph.caller, n, rate, 512, limit, func(i int) *rivorav1.PublishRequest { return req(i + ph.offset) })
		if err != nil {
			return out, fmt.Errorf("paced publish phase (%s): %w", ph.name, err)
		}
		r.serverCPU, r.clientCPU = d.cpu()-cpu0, benchCPU()-client0
		gc1, err := devMetric(ctx, hc, d.url(), gcCyclesSeries)
		if err != nil {
			return out, err
		}
		*ph.gc = gc1 - gc0
		if err := profiled(); err != nil {
			return out, err
		}
		r.name += " by " + ph.name
		*ph.row = r
		progress("Publish at %.0f/s offered by %s: %.0f events/s, p50 %.2f ms, p99 %.2f ms; %d of %d windows of %s stalled (median above %s), %.0f server GC cycles",
			rate, ph.name, r.rate(), ms(r.p50), ms(r.p99), r.slowWindows, r.windows, stallWindow, stallMedian, *ph.gc)
		if err := waitIdle(nc, limit); err != nil {
			return out, err
		}
	}
	for _, byLean := range []bool{false, true} {
		progress("Connect floor: Publish at %.0f/s offered to a no-op Connect server in this process (lean caller: %v)", rate, byLean)
		floor, err := floorPhase(ctx, hc, byLean, n, rate, 512, limit, func(i int) *rivorav1.PublishRequest { return req(i + 1<<27) })
		if err != nil {
			return out, fmt.Errorf("connect floor phase: %w", err)
		}
		progress("Connect floor: %.0f calls/s, p99 %.2f ms, %.1f µs CPU per call", floor.rate(), ms(floor.p99), floor.clientCPUPerEvent())
		if byLean {
			floor.name += " by the lean caller"
			out.floorLean = floor
		} else {
			floor.name += " by the Connect client"
			out.floor = floor
		}
	}
	return out, nil
}

// reportIngest prints the ingest table, the phases' notes and, last, the
// JSON line.
func reportIngest(r ingestRows, pacedRate float64) error {
	pub, bat, raw, rawID, rawLanes := r.pub, r.bat, r.raw, r.rawID, r.rawLanes
	paced, lean, floor, floorLean := r.paced.sdk, r.paced.lean, r.paced.floor, r.paced.floorLean
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tevents\tseconds\tevents/s\tp50 ms\tp99 ms\tserver CPU µs/event\tbench client CPU µs/event\t")
	for _, r := range []row{pub, paced, lean, floor, floorLean, bat, raw, rawID, rawLanes} {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%.2f\t%.2f\t%.1f\t%.1f\t\n", r.name, r.events, r.elapsed.Seconds(), r.rate(), ms(r.p50), ms(r.p99), r.cpuPerEvent(), r.clientCPUPerEvent())
	}
	tw.Flush()
	for _, r := range []row{pub, paced, lean, floor, floorLean, bat, raw, rawID, rawLanes} {
		if r.note != "" {
			fmt.Printf("  %s: %s\n", r.name, r.note)
		}
	}
	out := map[string]float64{
		"publish_per_s":   round(pub.rate(), 0),
		"batch_per_s":     round(bat.rate(), 0),
		"raw_async_per_s": round(raw.rate(), 0),
		"batch_ratio":     round(bat.rate()/raw.rate(), 3),
		"publish_p99_ms":  round(ms(pub.p99), 2),
		// The baseline the target is set against: raw async
		// publish with a Nats-Msg-Id per message, as Rivora's writes.
		"raw_msgid_per_s":   round(rawID.rate(), 0),
		"batch_ratio_msgid": round(bat.rate()/rawID.rate(), 3),
		// Publish latency at a given offered rate (open loop).
		"paced_rate_per_s":       round(pacedRate, 0),
		"publish_p99_ms_at_rate": round(ms(paced.p99), 2),
		"paced_achieved_per_s":   round(paced.rate(), 0),
		// CPU per event of the server and of the bench's callers: what
		// an offered rate costs the machine's cores.
		"publish_server_cpu_us":   round(pub.cpuPerEvent(), 1),
		"publish_client_cpu_us":   round(pub.clientCPUPerEvent(), 1),
		"batch_server_cpu_us":     round(bat.cpuPerEvent(), 1),
		"batch_client_cpu_us":     round(bat.clientCPUPerEvent(), 1),
		"raw_msgid_server_cpu_us": round(rawID.cpuPerEvent(), 1),
		"raw_msgid_client_cpu_us": round(rawID.clientCPUPerEvent(), 1),
		// The kernel's part of the server's CPU per event (system
		// time: the stores' writes, page faults), which moves the most
		// between runs on a shared machine.
		"batch_server_sys_cpu_us":     round(bat.systemCPUPerEvent(), 1),
		"raw_msgid_server_sys_cpu_us": round(rawID.systemCPUPerEvent(), 1),
		// The same raw publish over as many subjects as the Rivora
		// phases' lanes (the server's per-subject state included).
		"raw_msgid_lanes_per_s":         round(rawLanes.rate(), 0),
		"batch_ratio_msgid_lanes":       round(bat.rate()/rawLanes.rate(), 3),
		"raw_msgid_lanes_server_cpu_us": round(rawLanes.cpuPerEvent(), 1),
		// The paced phase against a no-op Connect server (floor.go):
		// what the offered rate costs with no server work at all.
		"paced_client_cpu_us":  round(paced.clientCPUPerEvent(), 1),
		"paced_server_cpu_us":  round(paced.cpuPerEvent(), 1),
		"floor_p99_ms_at_rate": round(ms(floor.p99), 2),
		"floor_achieved_per_s": round(floor.rate(), 0),
		"floor_cpu_us":         round(floor.clientCPUPerEvent(), 1),
		// What sets the paced p99: the share of the phase's windows in
		// which the median call stalled, and the server's GC cycles
		// meanwhile (the same share for the floor, for comparison).
		"paced_stalled_window_share": round(paced.stalledShare(), 3),
		"paced_server_gc_cycles":     r.paced.gc,
		"floor_stalled_window_share": round(floor.stalledShare(), 3),
		// The same open loop by the lean caller (leanclient.go), which
		// leaves the server the cores the Connect client takes, and the
		// floor by it.
		"publish_p99_ms_at_rate_lean":     round(ms(lean.p99), 2),
		"paced_lean_achieved_per_s":       round(lean.rate(), 0),
		"paced_lean_server_cpu_us":        round(lean.cpuPerEvent(), 1),
		"paced_lean_client_cpu_us":        round(lean.clientCPUPerEvent(), 1),
		"paced_lean_stalled_window_share": round(lean.stalledShare(), 3),
		"paced_lean_server_gc_cycles":     r.paced.gcLean,
		"floor_p99_ms_at_rate_lean":       round(ms(floorLean.p99), 2),
		"floor_lean_achieved_per_s":       round(floorLean.rate(), 0),
		"floor_lean_cpu_us":               round(floorLean.clientCPUPerEvent(), 1),
		"floor_lean_stalled_window_share": round(floorLean.stalledShare(), 3),
	}
	return printJSON(out, []string{"publish_per_s", "batch_per_s", "raw_async_per_s", "batch_ratio", "publish_p99_ms", "raw_msgid_per_s", "batch_ratio_msgid", "paced_rate_per_s", "publish_p99_ms_at_rate", "paced_achieved_per_s",
		"publish_server_cpu_us", "publish_client_cpu_us", "batch_server_cpu_us", "batch_client_cpu_us", "raw_msgid_server_cpu_us", "raw_msgid_client_cpu_us",
		"batch_server_sys_cpu_us", "raw_msgid_server_sys_cpu_us",
		"raw_msgid_lanes_per_s", "batch_ratio_msgid_lanes", "raw_msgid_lanes_server_cpu_us",
		"paced_client_cpu_us", "paced_server_cpu_us", "floor_p99_ms_at_rate", "floor_achieved_per_s", "floor_cpu_us",
		"paced_stalled_window_share", "paced_server_gc_cycles", "floor_stalled_window_share",
		"publish_p99_ms_at_rate_lean", "paced_lean_achieved_per_s", "paced_lean_server_cpu_us", "paced_lean_client_cpu_us",
		"paced_lean_stalled_window_share", "paced_lean_server_gc_cycles", "floor_p99_ms_at_rate_lean", "floor_lean_achieved_per_s",
		"floor_lean_cpu_us", "floor_lean_stalled_window_share"})
}

func printJSON(m map[string]float64, order []string) error {
	var b strings.Builder
	b.WriteString("{")
	for i, k := range order {
		if i > 0 {
			b.WriteString(", ")
		}
		v, err := json.Marshal(m[k])
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%q: %s", k, v)
	}
	b.WriteString("}")
	fmt.Println(b.String())
	return nil
}

func publishPhase(ctx context.Context, ingest rivorav1connect.IngestServiceClient, n, conc int, limit time.Duration, req func(int) *rivorav1.PublishRequest) (row, error) {
	return publishPhaseBy(ctx, connectCaller(ingest), n, conc, limit, req)
}

// publishPhaseBy is publishPhase with any Publish caller.
func publishPhaseBy(ctx context.Context, publish publishCaller, n, conc int, limit time.Duration, req func(int) *rivorav1.PublishRequest) (row, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	lat := make([][]time.Duration, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				if err := publish(ctx, req(i)); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("event %d: %w", i, err); cancel() })
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return row{}, firstErr
	}
	all := slices.Concat(lat...)
	if len(all) != n {
		return row{}, fmt.Errorf("only %d of %d events acked within %s", len(all), n, limit)
	}
	slices.Sort(all)
	return row{name: "rivora Publish", events: n, elapsed: elapsed, p50: percentile(all, 0.5), p99: percentile(all, 0.99),
		note: fmt.Sprintf("%d concurrent calls; latency is per event ack", conc)}, nil
}

func batchPhase(ctx context.Context, ingest rivorav1connect.IngestServiceClient, n, size, conc int, limit time.Duration, req func(int) *rivorav1.PublishRequest) (row, error) {
	return batchPhaseChecked(ctx, ingest, n, size, conc, limit, req, func(resp *rivorav1.PublishBatchResponse, events int) error {
		if len(resp.GetEventIds()) != events {
			return fmt.Errorf("%d ids for %d events", len(resp.GetEventIds()), events)
		}
		return nil
	})
}

// batchPhaseChecked is batchPhase with its own check of each answer.
func batchPhaseChecked(ctx context.Context, ingest rivorav1connect.IngestServiceClient, n, size, conc int, limit time.Duration, req func(int) *rivorav1.PublishRequest, check func(resp *rivorav1.PublishBatchResponse, events int) error) (row, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	batches := (n + size - 1) / size
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var acked atomic.Int64
	lat := make([][]time.Duration, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b := int(next.Add(1)) - 1
				if b >= batches || ctx.Err() != nil {
					return
				}
				lo, hi := b*size, min((b+1)*size, n)
				events := make([]*rivorav1.PublishRequest, 0, hi-lo)
				for i := lo; i < hi; i++ {
					// Offset so these are new events, not repeats of phase 1.
					events = append(events, req(i+1<<29))
				}
				t0 := time.Now()
				resp, err := ingest.PublishBatch(ctx, connect.NewRequest(&rivorav1.PublishBatchRequest{Events: events}))
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("batch %d: %w", b, err); cancel() })
					return
				}
				if err := check(resp.Msg, len(events)); err != nil {
					errOnce.Do(func() {
						firstErr = fmt.Errorf("batch %d: %w", b, err)
						cancel()
					})
					return
				}
				acked.Add(int64(len(events)))
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return row{}, firstErr
	}
	if int(acked.Load()) != n {
		return row{}, fmt.Errorf("only %d of %d events acked within %s", acked.Load(), n, limit)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	return row{name: "rivora PublishBatch", events: n, elapsed: elapsed, p50: percentile(all, 0.5), p99: percentile(all, 0.99),
		note: fmt.Sprintf("batches of %d, %d concurrent; latency is per batch ack", size, conc)}, nil
}

// rawPhase publishes to a separate stream (file storage, R1) on the same
// embedded server, over its TCP port, with no Rivora code in the path.
// With msgID each message carries a unique Nats-Msg-Id (JetStream dedup),
// as Rivora's do: the baseline of batch_ratio_msgid (the target).
func rawPhase(ctx context.Context, nc *nats.Conn, n, maxPending, size int, limit time.Duration, msgID bool) (row, error) {
	return rawPhaseOver(ctx, nc, n, maxPending, size, limit, msgID, 64)
}

// dropRawStreams deletes the raw phases' streams once they are measured:
// their messages and, for two minutes, the dedup ids of their
// Nats-Msg-Ids would stay in the server's heap (hundreds of thousands of
// small objects every GC cycle of the rivora process marks) while the
// Rivora phases after them run.
func dropRawStreams(ctx context.Context, nc *nats.Conn) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	names := js.StreamNames(ctx)
	var raw []string
	for name := range names.Name() {
		if strings.HasPrefix(name, "BENCH_RAW") {
			raw = append(raw, name)
		}
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("list the raw streams: %w", err)
	}
	for _, name := range raw {
		if err := js.DeleteStream(ctx, name); err != nil {
			return fmt.Errorf("delete raw stream %s: %w", name, err)
		}
	}
	return nil
}

// rawPhaseOver is rawPhase with its messages spread round robin over
// subjects subjects (rawPhase: 64). Each of Rivora's lanes is a subject
// of its partition's stream, and the server keeps state per subject: with
// as many subjects as the Rivora phases' lanes, the raw publish pays that
// part of Rivora's store cost too.
func rawPhaseOver(ctx context.Context, nc *nats.Conn, n, maxPending, size int, limit time.Duration, msgID bool, subjects int) (row, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var acks, errs atomic.Int64
	var firstErr atomic.Value
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(maxPending),
		jetstream.WithPublishAsyncTimeout(limit),
		jetstream.WithPublishAsyncAckHandler(func(jetstream.JetStream, *nats.Msg, *jetstream.PubAck) { acks.Add(1) }),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			errs.Add(1)
			firstErr.CompareAndSwap(nil, err)
		}),
	)
	if err != nil {
		return row{}, err
	}
	stream, prefix := "BENCH_RAW", "benchraw"
	if msgID {
		stream, prefix = "BENCH_RAW_MSGID", "benchrawid"
	}
	if subjects != 64 {
		stream, prefix = stream+"_"+strconv.Itoa(subjects), prefix+strconv.Itoa(subjects)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     stream,
		Subjects: []string{prefix + ".>"},
		Storage:  jetstream.FileStorage,
		Replicas: 1,
	}); err != nil {
		return row{}, fmt.Errorf("create raw stream: %w", err)
	}
	body := payload(size, 2)
	// At max pending, block until an ack frees room (default: fail after
	// 200ms, which a loaded machine hits).
	stall := jetstream.WithStallWait(limit)
	// Warm-up, not timed.
	for i := range 2000 {
		if _, err := js.PublishMsgAsync(&nats.Msg{Subject: prefix + ".warm." + strconv.Itoa(i%64), Data: body}, stall); err != nil {
			return row{}, err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return row{}, errors.New("raw warm-up not acked in time")
	}
	acks.Store(0)

	start := time.Now()
	for i := range n {
		msg := &nats.Msg{Subject: prefix + ".p." + strconv.Itoa(i%subjects), Data: body}
		if msgID {
			msg.Header = nats.Header{jetstream.MsgIDHeader: []string{fmt.Sprintf("raw-%d-%d", start.UnixNano(), i)}}
		}
		if _, err := js.PublishMsgAsync(msg, stall); err != nil {
			return row{}, fmt.Errorf("publish %d: %w", i, err)
		}
		if ctx.Err() != nil {
			return row{}, fmt.Errorf("raw publish overran %s", limit)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return row{}, fmt.Errorf("raw publishes not all acked within %s (%d acked)", limit, acks.Load())
	}
	elapsed := time.Since(start)
	if e := errs.Load(); e > 0 {
		return row{}, fmt.Errorf("%d raw publishes failed, first: %v", e, firstErr.Load())
	}
	if a := acks.Load(); int(a) != n {
		return row{}, fmt.Errorf("raw: %d acks for %d messages", a, n)
	}
	name := "raw JetStream async"
	if msgID {
		name += " +Nats-Msg-Id"
	}
	if subjects != 64 {
		name += fmt.Sprintf(" over %d subjects", subjects)
	}
	return row{name: name, events: n, elapsed: elapsed,
		note: fmt.Sprintf("PublishMsgAsync, max %d pending, stream %s file/R1 on the same server, %d subjects", maxPending, stream, subjects)}, nil
}

// ---------------------------------------------------------------------------
// deliver

func runDeliver(args []string) error {
	fs := flag.NewFlagSet("deliver", flag.ExitOnError)
	var c common
	c.register(fs)
	n := fs.Int("n", 50000, "events to deliver")
	lanes := fs.Int("lanes", 5000, "lanes the events are spread over")
	conc := fs.Int("raw-c", 0, "raw HTTP loop goroutines (default: -workers)")
	maxInFlight := fs.Int("max-in-flight", 256, "destination max_in_flight during the drain")
	size := fs.Int("payload", 256, "payload bytes")
	limit := fs.Duration("phase-timeout", 120*time.Second, "fail when a phase takes longer")
	fs.Parse(args)
	if *conc == 0 {
		*conc = c.workers
	}

	fmt.Fprintf(os.Stderr, "bench deliver: GOMAXPROCS=%d NumCPU=%d n=%d lanes=%d payload=%dB\n", runtime.GOMAXPROCS(0), runtime.NumCPU(), *n, *lanes, *size)
	d, err := c.startDev()
	defer d.stop()
	if err != nil {
		return err
	}
	ctx := context.Background()
	hc := c.httpClient(16)
	admin := rivorav1connect.NewAdminServiceClient(hc, d.url())
	ingest := rivorav1connect.NewIngestServiceClient(hc, d.url())

	p, err := partner.Start(partner.Options{CountOnly: true})
	if err != nil {
		return err
	}
	defer p.Close()
	if err := createDestination(ctx, admin, "drain", p.URL(), &rivorav1.Limits{RatePerSecond: 0.001, Burst: 1}); err != nil {
		return err
	}

	// Fill the backlog: batches of 500, lanes round-robin.
	progress("publishing %d events over %d lanes (budget 0.001/s, so they stay pending)", *n, *lanes)
	body := payload(*size, 3)
	const batchSize = 500
	pubStart := time.Now()
	for lo := 0; lo < *n; lo += batchSize {
		hi := min(lo+batchSize, *n)
		events := make([]*rivorav1.PublishRequest, 0, hi-lo)
		for i := lo; i < hi; i++ {
			events = append(events, &rivorav1.PublishRequest{
				DestinationId: "drain", CustomerId: "bench", LaneKey: "lane-" + strconv.Itoa(i%*lanes),
				Type: "bench.event", Payload: body,
			})
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := ingest.PublishBatch(cctx, connect.NewRequest(&rivorav1.PublishBatchRequest{Events: events}))
		cancel()
		if err != nil {
			return fmt.Errorf("publish batch at %d: %w", lo, err)
		}
		if time.Since(pubStart) > *limit {
			return fmt.Errorf("publishing overran %s", *limit)
		}
	}
	progress("published %d events in %s", *n, time.Since(pubStart).Round(time.Millisecond))

	// Wait until they have left INGEST for the lane store, and the
	// destination counts them pending.
	nc, err := nats.Connect("nats://"+d.natsAddr, nats.Name("rivora-bench"))
	if err != nil {
		return fmt.Errorf("connect to embedded NATS %s: %w", d.natsAddr, err)
	}
	defer nc.Close()
	if err := waitIdle(nc, *limit); err != nil {
		return err
	}
	err = until(ctx, *limit, 100*time.Millisecond, "the backlog pending", func() error {
		resp, err := admin.GetDestination(ctx, connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "drain"}))
		if err != nil {
			return poll.GiveUp(fmt.Errorf("get destination: %w", err))
		}
		pending := resp.Msg.GetPending()
		if pending+int64(p.Delivered()) >= int64(*n) {
			progress("destination reports %d pending, %d delivered so far", pending, p.Delivered())
			return nil
		}
		return fmt.Errorf("destination reports only %d pending of %d after %s", pending, *n, *limit)
	})
	if err != nil {
		return err
	}

	progress("opening the budget: rate 1e6/s, burst 100000, max_in_flight %d", *maxInFlight)
	already := int64(p.Delivered())
	rate, burst, mif := 1e6, int32(100000), int32(*maxInFlight)
	cpu0 := d.cpu()
	start := time.Now()
	upd, err := admin.UpdateDestination(ctx, connect.NewRequest(&rivorav1.UpdateDestinationRequest{
		Id: "drain", RatePerSecond: &rate, Burst: &burst, MaxInFlight: &mif,
	}))
	if err != nil {
		return fmt.Errorf("update destination: %w", err)
	}
	// Part of the timed drain: the change has to reach the agent.
	if err := waitApplied(ctx, admin, upd.Msg.GetVersion()); err != nil {
		return err
	}
	lastLog := start
	err = untilTime(ctx, start.Add(*limit), 5*time.Millisecond, "the drain", func() error {
		if p.Delivered() >= *n {
			return nil
		}
		if time.Since(lastLog) >= 2*time.Second {
			lastLog = time.Now()
			progress("drain: %d/%d delivered (%d requests)", p.Delivered(), *n, p.Count())
		}
		return fmt.Errorf("partner saw %d of %d events %s after the budget opened", p.Delivered(), *n, *limit)
	})
	if err != nil {
		return err
	}
	drained := time.Since(start)
	delivered := int64(*n) - already
	dup := int64(p.Count()) - int64(p.Delivered())
	drainRow := row{name: "rivora drain", events: int(delivered), elapsed: drained, serverCPU: d.cpu() - cpu0,
		note: fmt.Sprintf("%d lanes, %d workers, max_in_flight %d; %d duplicate requests; %d delivered before the budget opened", *lanes, c.workers, *maxInFlight, dup, already)}
	progress("rivora: %d deliveries in %s = %.0f/s, server CPU %.1f µs/delivery", delivered, drained.Round(time.Millisecond), drainRow.rate(), drainRow.cpuPerEvent())

	// Raw loop: same partner code, same payload, same N, keep-alive client.
	progress("raw HTTP loop: %d POSTs, %d goroutines", *n, *conc)
	rp, err := partner.Start(partner.Options{CountOnly: true})
	if err != nil {
		return err
	}
	defer rp.Close()
	rawRow, err := rawHTTP(rp, *n, *conc, *size, *limit)
	if err != nil {
		return fmt.Errorf("raw HTTP loop: %w", err)
	}
	progress("raw HTTP: %.0f/s", rawRow.rate())

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tdeliveries\tseconds\tper s\t")
	for _, r := range []row{drainRow, rawRow} {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t\n", r.name, r.events, r.elapsed.Seconds(), r.rate())
	}
	tw.Flush()
	for _, r := range []row{drainRow, rawRow} {
		fmt.Printf("  %s: %s\n", r.name, r.note)
	}
	return printJSON(map[string]float64{
		"deliver_per_s":  round(drainRow.rate(), 0),
		"raw_http_per_s": round(rawRow.rate(), 0),
		"ratio":          round(drainRow.rate()/rawRow.rate(), 3),
		"server_cpu_us":  round(drainRow.cpuPerEvent(), 1),
	}, []string{"deliver_per_s", "raw_http_per_s", "ratio", "server_cpu_us"})
}

func rawHTTP(p *partner.Partner, n, conc, size int, limit time.Duration) (row, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = conc * 2
	t.MaxIdleConnsPerHost = conc * 2
	hc := &http.Client{Transport: withBearer(t), Timeout: 10 * time.Second}
	body := payload(size, 4)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL(), strings.NewReader(string(body)))
				if err == nil {
					req.Header.Set("content-type", "application/json")
					req.Header.Set("webhook-id", "raw-"+strconv.Itoa(i))
					var resp *http.Response
					resp, err = hc.Do(req)
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode/100 != 2 {
							err = fmt.Errorf("status %s", resp.Status)
						}
					}
				}
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("request %d: %w", i, err); cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return row{}, firstErr
	}
	if got := int64(p.Delivered()); got != int64(n) {
		return row{}, fmt.Errorf("partner saw %d of %d within %s", got, n, limit)
	}
	return row{name: "raw Go HTTP loop", events: n, elapsed: elapsed,
		note: fmt.Sprintf("%d goroutines, keep-alive, same partner handler and payload", conc)}, nil
}
