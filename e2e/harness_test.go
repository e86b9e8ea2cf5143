// Package e2e holds black-box tests that build the real rivora and rivoractl
// binaries, start them as processes on 127.0.0.1 and point them at partner
// endpoints that verify every signature and can be made to fail on command.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/partner"

	"github.com/rivora/rivora/e2e/creds"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/ports"
)

// Binaries built once by TestMain, in runDir.
var (
	rivoraBin      string
	rivoractlBin   string
	rivoractlBuild error // a rivoractl build failure fails only the CLI test
)

// runDir holds what the whole run shares (the binaries, the run's TLS
// files and cell token); TestMain removes it when the run ends.
var runDir string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Getenv(holdEnv) != "" || os.Getenv(tricklerEnv) != "" {
		// A child run of a helper test (startChild): it only dials,
		// so it builds nothing.
		return m.Run()
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 2
	}
	dir, err := os.MkdirTemp("", "rivora-e2e-run-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 2
	}
	defer os.RemoveAll(dir)
	runDir = dir

	rivoraBin = filepath.Join(dir, "rivora")
	if out, err := goBuild(root, rivoraBin, "./cmd/rivora"); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: FATAL: go build ./cmd/rivora failed: %v\n%s\n", err, out)
		return 2
	}
	rivoractlBin = filepath.Join(dir, "rivoractl")
	if out, err := goBuild(root, rivoractlBin, "./cmd/rivoractl"); err != nil {
		rivoractlBuild = fmt.Errorf("go build ./cmd/rivoractl: %v\n%s", err, out)
		fmt.Fprintf(os.Stderr, "e2e: %v\n", rivoractlBuild)
	}
	rc, err := startRecap()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 2
	}
	code := m.Run()
	rc.finish()
	return code
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the rivora module")
	}
	return filepath.Dir(gomod), nil
}

func goBuild(root, out, pkg string) ([]byte, error) {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	return cmd.CombinedOutput()
}

// ---------------------------------------------------------------------------
// rivora dev process

type devOptions struct {
	// DataDir is reused when set (restarts); a fresh t.TempDir otherwise.
	DataDir    string
	Partitions int
	Workers    int
	Args       []string // extra flags
}

// devProc is `rivora dev` on a free 127.0.0.1 port: a proc whose
// restarts keep its data directory and address.
type devProc struct {
	*proc
	opts    devOptions
	dataDir string
}

// startDev starts `rivora dev` on a free 127.0.0.1 port and waits until
// /healthz answers 200. The process is killed when the test ends; its output
// is printed when the test failed.
func startDev(t testing.TB, opts devOptions) *devProc {
	t.Helper()
	d := &devProc{opts: opts, dataDir: opts.DataDir}
	if d.dataDir == "" {
		d.dataDir = t.TempDir()
	}
	d.proc = newProc(t, "rivora dev", rivoraBin, "127.0.0.1:"+strconv.Itoa(freePort(t)), nil)
	d.logTail = 48 << 10
	d.Args = d.devArgs()
	d.run()
	return d
}

func (d *devProc) DataDir() string { return d.dataDir }

func (d *devProc) devArgs() []string {
	a := []string{"dev", "--listen", d.Addr, "--data-dir", d.dataDir}
	if d.opts.Partitions > 0 {
		a = append(a, "--partitions", strconv.Itoa(d.opts.Partitions))
	}
	if d.opts.Workers > 0 {
		a = append(a, "--workers", strconv.Itoa(d.opts.Workers))
	}
	return append(a, d.opts.Args...)
}

// run starts the process and waits until it is healthy.
func (d *devProc) run() {
	d.t.Helper()
	d.start()
	d.waitHealthy(60 * time.Second)
	creds.Register(readAdminToken(d.t, d.dataDir), d.URL())
}

// Kill9 kills the process with SIGKILL and waits for it to be gone.
func (d *devProc) Kill9() {
	d.t.Helper()
	d.kill9(10 * time.Second)
}

// Stop sends SIGTERM and waits for a graceful exit; it returns the exit
// error (nil for status 0).
func (d *devProc) Stop(timeout time.Duration) error {
	d.t.Helper()
	if !d.running() {
		d.t.Fatalf("Stop: rivora dev is not running")
	}
	err, exited := d.terminate(timeout)
	if !exited {
		return fmt.Errorf("no exit within %s of SIGTERM (killed)", timeout)
	}
	return err
}

// Restart starts the process again on the same data dir and address. It must
// have been stopped or killed first.
func (d *devProc) Restart() {
	d.t.Helper()
	if d.running() {
		d.t.Fatalf("Restart: rivora dev is still running")
	}
	d.run()
}

// Clients. Connect over HTTP/1.1 with the binary codec.
func (d *devProc) Admin() rivorav1connect.AdminServiceClient {
	return rivorav1connect.NewAdminServiceClient(authedHTTP, d.URL())
}

func (d *devProc) Events() rivorav1connect.EventServiceClient {
	return rivorav1connect.NewEventServiceClient(authedHTTP, d.URL())
}

func (d *devProc) Ingest() rivorav1connect.IngestServiceClient {
	return rivorav1connect.NewIngestServiceClient(authedHTTP, d.URL())
}

func (d *devProc) SDK() *sdk.Client { return sdk.New(d.URL(), sdk.WithHTTPClient(authedHTTP)) }

// freePort is a 127.0.0.1 port for a process to bind later: free now,
// outside the kernel's ephemeral range, not returned before in this run
// (testkit/ports says why).
func freePort(t testing.TB) int {
	t.Helper()
	p, err := ports.Free()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// createDestination registers a destination pointing at p and hands p the
// secret it must verify with. An empty secret lets the server generate one.
func createDestination(t testing.TB, d *devProc, id string, p *partner.Partner, secret string, limits *rivorav1.Limits) *rivorav1.Destination {
	t.Helper()
	resp, err := d.Admin().CreateDestination(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.CreateDestinationRequest{
		Id: id, Url: p.URL(), Secret: secret, Limits: limits,
	}))
	if err != nil {
		t.Fatalf("CreateDestination %s: %v", id, err)
	}
	dst := resp.Msg.GetDestination()
	if dst.GetId() != id || dst.GetUrl() != p.URL() {
		t.Fatalf("CreateDestination %s answered id=%q url=%q", id, dst.GetId(), dst.GetUrl())
	}
	if secret != "" && dst.GetSecret() != secret {
		t.Fatalf("CreateDestination %s: secret in answer differs from the one given", id)
	}
	if err := p.SetSecret(dst.GetSecret()); err != nil {
		t.Fatal(err)
	}
	p.SetAlive(d.diedErr)
	waitConfigApplied(t, d, resp.Msg.GetVersion())
	return dst
}

// waitConfigApplied waits until every connected agent has applied config
// version v (changes reach agents asynchronously, as `rivoractl --wait`
// waits for).
func waitConfigApplied(t testing.TB, d *devProc, v uint64) {
	t.Helper()
	devRig(d).waitApplied(t, v)
}

// laneReport is what checkLaneOrder found.
type laneReport struct {
	Lanes      int
	Events     int
	Duplicates int // 2xx answers for events already delivered
}

// checkLaneOrder checks, for every lane in published (lane → event ids in
// publish order), that the partner saw them FIFO with only the head in
// flight: a request for the i-th event arrives only after every earlier event
// of the lane was answered 2xx (or is listed in skip: dead letters, or a
// lane's last event whose publish failed). Repeated deliveries of an already
// delivered event are counted, not failed. Every published event must have
// been delivered (or be in skip) and payloads must match.
func checkLaneOrder(t testing.TB, p *partner.Partner, published map[string][]string, payloads map[string][]byte, skip map[string]bool) laneReport {
	t.Helper()
	reqs := p.Requests()
	byLane := map[string][]partner.Request{}
	for _, r := range reqs {
		byLane[r.Lane] = append(byLane[r.Lane], r)
	}
	rep := laneReport{Lanes: len(published)}
	var errs []string
	fail := func(format string, args ...any) {
		if len(errs) < 20 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	lanes := make([]string, 0, len(published))
	for l := range published {
		lanes = append(lanes, l)
	}
	sort.Strings(lanes)
	for _, lane := range lanes {
		ids := published[lane]
		rep.Events += len(ids)
		index := map[string]int{}
		for i, id := range ids {
			index[id] = i
		}
		// frontier: every event before it is settled (delivered or dead).
		frontier := 0
		advance := func() {
			for frontier < len(ids) && skip[ids[frontier]] {
				frontier++
			}
		}
		advance()
		delivered := map[string]bool{}
		for _, r := range byLane[lane] {
			i, ok := index[r.ID]
			if !ok {
				fail("lane %q: unexpected event %s", lane, r.ID)
				continue
			}
			if want := payloads[r.ID]; want != nil && !bytes.Equal(want, r.Payload) {
				fail("lane %q event %s: payload %q, published %q", lane, r.ID, r.Payload, want)
			}
			switch {
			case i < frontier:
				if r.Status/100 == 2 && delivered[r.ID] {
					rep.Duplicates++
				}
			case i == frontier:
				if r.Status/100 == 2 {
					delivered[r.ID] = true
					frontier++
					advance()
				}
			default:
				fail("lane %q: event #%d (%s) sent while #%d (%s) was not yet delivered", lane, i, r.ID, frontier, ids[frontier])
			}
			if r.Status/100 == 2 {
				delivered[r.ID] = true
			}
		}
		if frontier < len(ids) {
			fail("lane %q: only %d of %d events delivered in order", lane, frontier, len(ids))
		}
	}
	if len(errs) > 0 {
		t.Errorf("lane order violations (%d shown):\n  %s", len(errs), strings.Join(errs, "\n  "))
	}
	return rep
}

// ---------------------------------------------------------------------------
// publishing

// plan is what publishLanes sends: PerLane events in each of Lanes.
type plan struct {
	Destination string
	Customer    string
	Lanes       []string
	PerLane     int
	PayloadSize int
}

// published records acked events: lane ("customer/lane key") → ids in
// publish order, id → payload, and all ids.
type published struct {
	mu       sync.Mutex
	ByLane   map[string][]string
	Payloads map[string][]byte
	IDs      []string
}

func newPublished() *published {
	return &published{ByLane: map[string][]string{}, Payloads: map[string][]byte{}}
}

func (pb *published) add(lane, id string, payload []byte) {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	pb.ByLane[lane] = append(pb.ByLane[lane], id)
	pb.Payloads[id] = payload
	pb.IDs = append(pb.IDs, id)
}

func (pb *published) all() []string {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	return append([]string(nil), pb.IDs...)
}

func payloadFor(dest, lane string, i, size int) []byte {
	b := fmt.Appendf(nil, `{"dest":%q,"lane":%q,"seq":%d,"pad":"`, dest, lane, i)
	for len(b) < size-2 {
		b = append(b, 'x')
	}
	return append(b, '"', '}')
}

// publishLanes publishes pl through the SDK, each lane sequentially, lanes in
// parallel. It fails the test on the first error.
func publishLanes(t testing.TB, c *sdk.Client, pl plan, into *published) {
	t.Helper()
	if err := publishLanesErr(ctxTimeout(t, 2*time.Minute), c, pl, into); err != nil {
		t.Fatal(err)
	}
}

// publishLanesErr is publishLanes for use off the test goroutine.
func publishLanesErr(ctx context.Context, c *sdk.Client, pl plan, into *published) error {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	errc := make(chan error, len(pl.Lanes))
	for _, lane := range pl.Lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			for i := range pl.PerLane {
				payload := payloadFor(pl.Destination, lane, i, max(pl.PayloadSize, 64))
				id, err := c.Publish(ctx, sdk.Event{
					Destination: pl.Destination,
					Customer:    pl.Customer,
					Lane:        lane,
					Type:        "test.event",
					Payload:     payload,
					ContentType: "application/json",
				})
				if err != nil {
					errc <- fmt.Errorf("publish %s/%s/%s #%d: %w", pl.Destination, pl.Customer, lane, i, err)
					return
				}
				if id == "" {
					errc <- fmt.Errorf("publish %s/%s #%d: empty event id", pl.Destination, lane, i)
					return
				}
				into.add(pl.Customer+"/"+lane, id, payload)
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc // nil when closed without errors
}

func lanesNamed(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

func getDestination(t testing.TB, d *devProc, id string) *rivorav1.Destination {
	t.Helper()
	resp, err := d.Admin().GetDestination(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.GetDestinationRequest{Id: id}))
	if err != nil {
		t.Fatalf("GetDestination %s: %v", id, err)
	}
	return resp.Msg.GetDestination()
}
