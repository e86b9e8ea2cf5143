// Package e2e holds black-box tests that build the real rivora and rivoractl
// binaries, start them as processes on 127.0.0.1 and point them at partner
// endpoints that verify every signature and can be made to fail on command.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/sdk/webhook"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Binaries built once by TestMain.
var (
	rivoraBin      string
	rivoractlBin   string
	rivoractlBuild error // a rivoractl build failure fails only the CLI test
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 2
	}
	dir, err := os.MkdirTemp("", "rivora-e2e-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 2
	}
	defer os.RemoveAll(dir)

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
	return m.Run()
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

type devProc struct {
	t       testing.TB
	opts    devOptions
	dataDir string
	addr    string
	logPath string
	runs    int

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	waitErr  error
	logFile  *os.File
	stopping bool  // the harness asked the process to end
	died     error // set when it ended without being asked
}

// startDev starts `rivora dev` on a free 127.0.0.1 port and waits until
// /healthz answers 200. The process is killed when the test ends; its output
// is printed when the test failed.
func startDev(t testing.TB, opts devOptions) *devProc {
	t.Helper()
	d := &devProc{t: t, opts: opts, dataDir: opts.DataDir}
	if d.dataDir == "" {
		d.dataDir = t.TempDir()
	}
	d.addr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	d.logPath = filepath.Join(t.TempDir(), "rivora-dev.log")
	t.Cleanup(func() {
		d.kill()
		if err := d.diedErr(); err != nil {
			t.Errorf("%v; a graceful \"shutting down\" in its log means it got SIGTERM/SIGINT from outside the test", err)
		}
		if t.Failed() {
			d.dumpLog()
		}
	})
	d.start()
	return d
}

func (d *devProc) URL() string     { return "http://" + d.addr }
func (d *devProc) DataDir() string { return d.dataDir }

func (d *devProc) args() []string {
	a := []string{"dev", "--listen", d.addr, "--data-dir", d.dataDir}
	if d.opts.Partitions > 0 {
		a = append(a, "--partitions", strconv.Itoa(d.opts.Partitions))
	}
	if d.opts.Workers > 0 {
		a = append(a, "--workers", strconv.Itoa(d.opts.Workers))
	}
	return append(a, d.opts.Args...)
}

func (d *devProc) start() {
	d.t.Helper()
	f, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		d.t.Fatalf("open dev log: %v", err)
	}
	d.runs++
	fmt.Fprintf(f, "==== run %d: rivora %s\n", d.runs, strings.Join(d.args(), " "))
	cmd := exec.Command(rivoraBin, d.args()...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		d.t.Fatalf("start rivora dev: %v", err)
	}
	done := make(chan struct{})
	d.mu.Lock()
	d.cmd, d.done, d.waitErr, d.logFile, d.stopping = cmd, done, nil, f, false
	d.mu.Unlock()
	run := d.runs
	go func() {
		err := cmd.Wait()
		d.mu.Lock()
		d.waitErr = err
		if !d.stopping && d.died == nil {
			d.died = fmt.Errorf("rivora dev (run %d) exited on its own while the test needed it: %v (ProcessState %v)", run, err, cmd.ProcessState)
		}
		d.mu.Unlock()
		f.Close()
		close(done)
	}()
	d.waitHealthy(60 * time.Second)
}

func (d *devProc) waitHealthy(timeout time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			d.t.Fatalf("rivora dev exited before it was healthy: %v", d.exitErr())
		default:
		}
		resp, err := client.Get(d.URL() + "/healthz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.t.Fatalf("rivora dev on %s not healthy after %s (last: %s)", d.addr, timeout, last)
}

// diedErr reports an exit the harness did not ask for.
func (d *devProc) diedErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.died
}

// markStopping records that the harness is ending the process.
func (d *devProc) markStopping() {
	d.mu.Lock()
	d.stopping = true
	d.mu.Unlock()
}

func (d *devProc) exitErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.waitErr
}

func (d *devProc) running() bool {
	d.mu.Lock()
	done := d.done
	d.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Kill9 kills the process with SIGKILL and waits for it to be gone.
func (d *devProc) Kill9() {
	d.t.Helper()
	if !d.running() {
		d.t.Fatalf("Kill9: rivora dev is not running")
	}
	d.markStopping()
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		d.t.Fatalf("kill -9: %v", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		d.t.Fatalf("rivora dev still alive 10s after SIGKILL")
	}
}

// Stop sends SIGTERM and waits for a graceful exit; it returns the exit
// error (nil for status 0).
func (d *devProc) Stop(timeout time.Duration) error {
	d.t.Helper()
	if !d.running() {
		d.t.Fatalf("Stop: rivora dev is not running")
	}
	d.markStopping()
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		d.t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-done:
		return d.exitErr()
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("no exit within %s of SIGTERM (killed)", timeout)
	}
}

// Restart starts the process again on the same data dir and address. It must
// have been stopped or killed first.
func (d *devProc) Restart() {
	d.t.Helper()
	if d.running() {
		d.t.Fatalf("Restart: rivora dev is still running")
	}
	d.start()
}

func (d *devProc) kill() {
	d.markStopping()
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	cmd.Process.Kill()
	<-done
}

func (d *devProc) dumpLog() {
	b, err := os.ReadFile(d.logPath)
	if err != nil {
		d.t.Logf("read dev log: %v", err)
		return
	}
	const max = 48 << 10
	if len(b) > max {
		b = append([]byte("…(truncated)…\n"), b[len(b)-max:]...)
	}
	d.t.Logf("---- rivora dev output (%s) ----\n%s\n---- end of rivora dev output ----", d.logPath, b)
}

// Clients. Connect over HTTP/1.1 with the binary codec.
func (d *devProc) Admin() rivorav1connect.AdminServiceClient {
	return rivorav1connect.NewAdminServiceClient(http.DefaultClient, d.URL())
}

func (d *devProc) Events() rivorav1connect.EventServiceClient {
	return rivorav1connect.NewEventServiceClient(http.DefaultClient, d.URL())
}

func (d *devProc) Ingest() rivorav1connect.IngestServiceClient {
	return rivorav1connect.NewIngestServiceClient(http.DefaultClient, d.URL())
}

func (d *devProc) SDK() *sdk.Client { return sdk.New(d.URL()) }

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// createDestination registers a destination pointing at p and hands p the
// secret it must verify with. An empty secret lets the server generate one.
func createDestination(t testing.TB, d *devProc, id string, p *partner, secret string, limits *rivorav1.Limits) *rivorav1.Destination {
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
	p.SetSecret(t, dst.GetSecret())
	p.mu.Lock()
	p.dev = d
	p.mu.Unlock()
	waitConfigApplied(t, d, resp.Msg.GetVersion())
	return dst
}

// waitConfigApplied waits until every connected agent has applied config
// version v (changes reach agents asynchronously, as `rivoractl --wait`
// waits for).
func waitConfigApplied(t testing.TB, d *devProc, v uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last string
	for {
		resp, err := d.Admin().GetConfigStatus(ctxTimeout(t, 5*time.Second), connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
		if err != nil {
			last = err.Error()
		} else {
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
				return
			}
			last = fmt.Sprintf("version %d, %d agents connected, %d behind", resp.Msg.GetVersion(), connected, behind)
		}
		if time.Now().After(deadline) {
			t.Fatalf("config version %d not applied by the agents within 10s (%s)", v, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------
// partner endpoint

// delivery is one request a partner received.
type delivery struct {
	ID       string
	Lane     string // customer + "/" + lane key
	Customer string
	LaneKey  string
	Attempt  int
	Status   int // what the partner answered
	Payload  []byte
	At       time.Time
	Agent    string // user-agent: rivora/<version> (<agent name>)
}

type partner struct {
	srv *httptest.Server

	mu       sync.Mutex
	verifier *webhook.Verifier
	status   int           // answered status; 200 when healthy
	delay    time.Duration // before answering
	reqs     []delivery    // every request, in arrival order
	ok       map[string]int
	attempts map[string]int
	problems []string // bad signatures or headers
	dev      *devProc // the server delivering here, to fail fast if it dies
}

// newPartner starts a partner HTTP server on 127.0.0.1. Every request must
// carry a valid Standard Webhooks signature for the secret given with
// SetSecret and Rivora's headers; anything else is recorded as a problem and
// fails the test at cleanup.
func newPartner(t testing.TB) *partner {
	t.Helper()
	p := &partner{status: http.StatusOK, ok: map[string]int{}, attempts: map[string]int{}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(p.serve))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("partner listen: %v", err)
	}
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	p.srv = srv
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.problems) > 0 {
			n := min(len(p.problems), 10)
			t.Errorf("partner %s saw %d bad requests, first: %s", p.URL(), len(p.problems), strings.Join(p.problems[:n], "; "))
		}
	})
	return p
}

func (p *partner) URL() string { return p.srv.URL + "/hook" }

func (p *partner) SetSecret(t testing.TB, secret string) {
	t.Helper()
	v, err := webhook.NewVerifier(secret)
	if err != nil {
		t.Fatalf("partner secret %q: %v", secret, err)
	}
	p.mu.Lock()
	p.verifier = v
	p.mu.Unlock()
}

// SetStatus makes the partner answer every request with code (200: healthy).
func (p *partner) SetStatus(code int) {
	p.mu.Lock()
	p.status = code
	p.mu.Unlock()
}

func (p *partner) SetHealthy() { p.SetStatus(http.StatusOK) }

// SetDelay makes the partner wait d before answering.
func (p *partner) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

func (p *partner) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	h := r.Header
	dv := delivery{
		ID:       h.Get(webhook.HeaderID),
		Customer: h.Get("rivora-customer"),
		LaneKey:  h.Get("rivora-lane"),
		Payload:  body,
		At:       time.Now(),
		Agent:    h.Get("user-agent"),
	}
	dv.Lane = dv.Customer + "/" + dv.LaneKey
	attempt, aerr := strconv.Atoi(h.Get("rivora-attempt"))
	dv.Attempt = attempt

	p.mu.Lock()
	var problem string
	switch {
	case r.Method != http.MethodPost:
		problem = "method " + r.Method
	case p.verifier == nil:
		problem = "request before the secret was known"
	case aerr != nil || attempt < 1:
		problem = fmt.Sprintf("rivora-attempt %q", h.Get("rivora-attempt"))
	case dv.Customer == "" || dv.LaneKey == "":
		problem = "missing rivora-customer or rivora-lane"
	case h.Get("content-type") == "":
		problem = "missing content-type"
	default:
		if err := p.verifier.Verify(h, body); err != nil {
			problem = "signature: " + err.Error()
		}
	}
	if problem != "" {
		p.problems = append(p.problems, fmt.Sprintf("%s (webhook-id %q)", problem, dv.ID))
		p.mu.Unlock()
		http.Error(w, problem, http.StatusUnauthorized)
		return
	}
	dv.Status = p.status
	delay := p.delay
	p.reqs = append(p.reqs, dv)
	p.attempts[dv.ID]++
	if dv.Status/100 == 2 {
		p.ok[dv.ID]++
	}
	p.mu.Unlock()

	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
		}
	}
	w.WriteHeader(dv.Status)
}

// Delivered reports how many distinct events were answered 2xx.
func (p *partner) Delivered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ok)
}

// Requests reports how many requests arrived in total.
func (p *partner) Requests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.reqs)
}

func (p *partner) AttemptsOf(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attempts[id]
}

func (p *partner) OKCount(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ok[id]
}

func (p *partner) Snapshot() []delivery {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]delivery(nil), p.reqs...)
}

// Duplicates counts 2xx answers beyond the first per event.
func (p *partner) Duplicates() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.ok {
		n += c - 1
	}
	return n
}

// missing returns the ids not yet answered 2xx.
func (p *partner) missing(ids []string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, id := range ids {
		if p.ok[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

// WaitDelivered polls until every id was answered 2xx, failing the test at
// the deadline with what is missing.
func (p *partner) WaitDelivered(t testing.TB, ids []string, timeout time.Duration) {
	t.Helper()
	if err := p.waitDelivered(ids, timeout); err != nil {
		t.Fatal(err)
	}
}

func (p *partner) waitDelivered(ids []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		miss := p.missing(ids)
		if len(miss) == 0 {
			return nil
		}
		p.mu.Lock()
		dev := p.dev
		p.mu.Unlock()
		if dev != nil {
			if err := dev.diedErr(); err != nil {
				return fmt.Errorf("partner %s: %d of %d events not delivered: %w", p.URL(), len(miss), len(ids), err)
			}
		}
		if time.Now().After(deadline) {
			n := min(len(miss), 5)
			return fmt.Errorf("partner %s: %d of %d events not delivered within %s (requests seen: %d), e.g. %v",
				p.URL(), len(miss), len(ids), timeout, p.Requests(), miss[:n])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
func checkLaneOrder(t testing.TB, p *partner, published map[string][]string, payloads map[string][]byte, skip map[string]bool) laneReport {
	t.Helper()
	reqs := p.Snapshot()
	byLane := map[string][]delivery{}
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
