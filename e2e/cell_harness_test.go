package e2e

// Helpers for the budget and steering tests: a "rig" abstracts where the
// admin API (control plane) and the ingest API (agent) live, so the same
// scenario runs against `rivora dev` and against `rivora controlplane` +
// `rivora agent` as two processes (startCell). Also: rivoractl against any
// URL, publishing in rounds, and counting what a partner saw in a time
// window. Processes are procs (process_test.go), partners are
// partner_test.go's.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rivora/rivora/e2e/creds"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// ---------------------------------------------------------------------------
// processes: rivora controlplane and rivora agent

// startProc starts rivora with args (which must make it listen on addr)
// and waits until http://addr/healthz answers 200.
func startProc(t testing.TB, name, addr string, args []string) *proc {
	t.Helper()
	p := launchProc(t, name, addr, args)
	p.waitHealthy(60 * time.Second)
	return p
}

// launchProc starts rivora with args and returns at once (agents of a
// cell wait for each other before they are healthy).
func launchProc(t testing.TB, name, addr string, args []string) *proc {
	t.Helper()
	p := newProc(t, "rivora "+name, rivoraBin, addr, args)
	p.start()
	return p
}

// cellOptions configures startCell.
type cellOptions struct {
	Partitions int      // default 4
	Limits     string   // limits file path ("" = none)
	AgentName  string   // default "a1"
	CPArgs     []string // extra control plane flags
	AgentArgs  []string // extra agent flags
	// AgentGuard replaces the agent's --allow-destination-cidr (default
	// loopback, as the control plane's).
	AgentGuard []string
}

// cell is `rivora controlplane` plus one `rivora agent`, two processes.
type cell struct {
	cp, agent  *proc
	agentName  string
	partitions int
}

// startCell starts a control plane, then an agent following it, and waits
// until the agent has applied the control plane's config version.
func startCell(t testing.TB, opts cellOptions) *cell {
	t.Helper()
	if opts.Partitions == 0 {
		opts.Partitions = 4
	}
	if opts.AgentName == "" {
		opts.AgentName = "a1"
	}
	cpAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	stateDir := t.TempDir()
	cpArgs := append([]string{"controlplane", "--listen", cpAddr, "--state-dir", stateDir, "--partitions", strconv.Itoa(opts.Partitions)}, cellArgs()...)
	cpArgs = append(cpArgs, allowLoopback()...)
	if opts.Limits != "" {
		cpArgs = append(cpArgs, "--limits", opts.Limits)
	}
	cpArgs = append(cpArgs, opts.CPArgs...)
	c := &cell{agentName: opts.AgentName, partitions: opts.Partitions}
	c.cp = startProc(t, "controlplane", cpAddr, cpArgs)
	agAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	creds.Register(readAdminToken(t, stateDir), c.cp.URL(), "http://"+agAddr)
	agentGuard := allowLoopback()
	if opts.AgentGuard != nil {
		agentGuard = opts.AgentGuard
	}
	c.agent = startProc(t, "agent "+opts.AgentName, agAddr, append([]string{"agent", "--name", opts.AgentName, "--listen", agAddr,
		"--controlplane", c.cp.URL(), "--data-dir", t.TempDir(), "--allow-local-archive"}, append(append(cellArgs(), agentGuard...), opts.AgentArgs...)...)) // one agent: its archive may be local
	r := c.rig()
	st, err := r.Admin().GetConfigStatus(ctxTimeout(t, 5*time.Second), connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
	if err != nil {
		t.Fatalf("GetConfigStatus on the control plane: %v", err)
	}
	r.waitApplied(t, st.Msg.GetVersion())
	return c
}

// rig points tests at the control plane (admin) and the agent (ingest).
func (c *cell) rig() *rig {
	return &rig{name: "cell", adminURL: c.cp.URL(), ingestURL: c.agent.URL(), cpLog: c.cp.LogPath,
		died: func() error {
			if err := c.cp.diedErr(); err != nil {
				return err
			}
			return c.agent.diedErr()
		}}
}

// ---------------------------------------------------------------------------
// rig: where the APIs are

type rig struct {
	name      string
	adminURL  string // control plane: admin API, rivoractl for changes
	ingestURL string // agent: ingest, events
	cpLog     string // the control plane's log file
	dev       *devProc
	died      func() error
}

func devRig(d *devProc) *rig {
	return &rig{name: "dev", adminURL: d.URL(), ingestURL: d.URL(), cpLog: d.LogPath, dev: d, died: d.diedErr}
}

func (r *rig) Admin() rivorav1connect.AdminServiceClient {
	return rivorav1connect.NewAdminServiceClient(authedHTTP, r.adminURL)
}

func (r *rig) SDK() *sdk.Client { return sdk.New(r.ingestURL, sdk.WithHTTPClient(authedHTTP)) }

// createDestination registers id → p (server-generated secret) with the
// destination's own limits (nil: none) and waits until the agents have it.
func (r *rig) createDestination(t testing.TB, id string, p *partner.Partner, limits *rivorav1.Limits) {
	t.Helper()
	resp, err := r.Admin().CreateDestination(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.CreateDestinationRequest{
		Id: id, Url: p.URL(), Limits: limits, Author: "e2e",
	}))
	if err != nil {
		t.Fatalf("CreateDestination %s: %v", id, err)
	}
	if err := p.SetSecret(resp.Msg.GetDestination().GetSecret()); err != nil {
		t.Fatal(err)
	}
	if r.dev != nil {
		p.SetAlive(r.dev.diedErr)
	}
	r.waitApplied(t, resp.Msg.GetVersion())
}

// waitApplied waits until every connected agent applied config version v.
func (r *rig) waitApplied(t testing.TB, v uint64) {
	t.Helper()
	err := poll.Check(10*time.Second, 10*time.Millisecond, func() error {
		resp, err := r.Admin().GetConfigStatus(ctxTimeout(t, 5*time.Second), connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
		if err != nil {
			return err
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
		return fmt.Errorf("version %d, %d agents connected, %d behind", resp.Msg.GetVersion(), connected, behind)
	})
	if err != nil {
		t.Fatalf("%s: config version %d not applied by the agents within 10s (%v)", r.name, v, err)
	}
}

func (r *rig) configVersion(t testing.TB) uint64 {
	t.Helper()
	resp, err := r.Admin().GetConfigStatus(ctxTimeout(t, 5*time.Second), connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
	if err != nil {
		t.Fatalf("GetConfigStatus: %v", err)
	}
	return resp.Msg.GetVersion()
}

// ctl runs rivoractl against the control plane and returns stdout; a
// non-zero exit fails the test.
func (r *rig) ctl(t testing.TB, args ...string) string {
	t.Helper()
	return ctlAt(t, r.adminURL, args...)
}

// ctlAt runs rivoractl against server and returns stdout; a non-zero exit
// fails the test.
func ctlAt(t testing.TB, server string, args ...string) string {
	t.Helper()
	if rivoractlBuild != nil {
		t.Fatalf("rivoractl did not build: %v", rivoractlBuild)
	}
	out, errOut, err := runCtl(server, args...)
	if err != nil {
		t.Fatalf("rivoractl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// runCtl runs rivoractl against server (safe off the test goroutine).
func runCtl(server string, args ...string) (string, string, error) {
	cmd := exec.Command(rivoractlBin, args...)
	// The server flag comes last: global flags may appear anywhere.
	cmd.Args = append(cmd.Args, "--server", server)
	cmd.Env = append(os.Environ(), "RIVORA_SERVER=http://127.0.0.1:1", "RIVORA_TOKEN="+creds.For(server), "RIVORA_CA_FILE="+runPKI().caFile)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return "", "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return stdout.String(), stderr.String(), err
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		return stdout.String(), stderr.String(), errTimeout
	}
}

type timeoutError struct{}

func (timeoutError) Error() string { return "rivoractl did not exit within 30s" }

var errTimeout error = timeoutError{}

// healthJSON runs `rivoractl destinations health ID -o json`.
func healthJSON(server, id string) (*rivorav1.DestinationHealth, error) {
	out, errOut, err := runCtl(server, "destinations", "health", id, "-o", "json")
	if err != nil {
		return nil, fmt.Errorf("rivoractl destinations health %s: %v: %s", id, err, errOut)
	}
	var arr []json.RawMessage
	if err := json.Unmarshal([]byte(out), &arr); err != nil {
		return nil, fmt.Errorf("destinations health -o json is not a JSON array: %v\n%s", err, out)
	}
	for _, raw := range arr {
		h := &rivorav1.DestinationHealth{}
		if err := protojson.Unmarshal(raw, h); err != nil {
			return nil, fmt.Errorf("destinations health -o json element: %v\n%s", err, raw)
		}
		if h.GetDestinationId() == id {
			return h, nil
		}
	}
	return nil, fmt.Errorf("destinations health -o json has no entry for %s:\n%s", id, out)
}

// auditJSON runs `rivoractl audit -o json`.
func (r *rig) auditJSON(t testing.TB, extra ...string) []*rivorav1.AuditEntry {
	t.Helper()
	out := r.ctl(t, append([]string{"audit", "-o", "json", "--limit", "1000"}, extra...)...)
	var arr []json.RawMessage
	if err := json.Unmarshal([]byte(out), &arr); err != nil {
		t.Fatalf("audit -o json is not a JSON array: %v\n%s", err, out)
	}
	entries := make([]*rivorav1.AuditEntry, 0, len(arr))
	for _, raw := range arr {
		e := &rivorav1.AuditEntry{}
		if err := protojson.Unmarshal(raw, e); err != nil {
			t.Fatalf("audit -o json element: %v\n%s", err, raw)
		}
		entries = append(entries, e)
	}
	return entries
}

// limitsJSON runs `rivoractl limits get ID -o json`.
func (r *rig) limitsJSON(t testing.TB, id string) *rivorav1.GetLimitsResponse {
	t.Helper()
	out := r.ctl(t, "limits", "get", id, "-o", "json")
	resp := &rivorav1.GetLimitsResponse{}
	if err := protojson.Unmarshal([]byte(out), resp); err != nil {
		t.Fatalf("limits get -o json is not a GetLimitsResponse: %v\n%s", err, out)
	}
	return resp
}

func auditActions(entries []*rivorav1.AuditEntry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.GetAction() + "(" + e.GetDestinationId() + ")"
	}
	return out
}

func findAudit(entries []*rivorav1.AuditEntry, action, dest string) *rivorav1.AuditEntry {
	for _, e := range entries {
		if e.GetAction() == action && (dest == "" || e.GetDestinationId() == dest) {
			return e
		}
	}
	return nil
}

// writeFileAtomic replaces path's content in one rename, so the control
// plane never reads a half-written file.
func writeFileAtomic(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// ---------------------------------------------------------------------------
// publishing and counting

// publishRounds publishes rounds × len(lanes) events for customer: round r
// is one batch per 100 lanes holding event r of each lane, so the order
// within a lane is the round order. Safe off the test goroutine.
func publishRounds(ctx context.Context, c *sdk.Client, dest, customer string, lanes []string, rounds int, into *published) error {
	for r := range rounds {
		for lo := 0; lo < len(lanes); lo += 100 {
			chunk := lanes[lo:min(lo+100, len(lanes))]
			batch := make([]sdk.Event, len(chunk))
			for i, lane := range chunk {
				batch[i] = sdk.Event{Destination: dest, Customer: customer, Lane: lane, Type: "test.event",
					Payload: payloadFor(dest, lane, r, 96), ContentType: "application/json"}
			}
			ids, err := c.PublishBatch(ctx, batch)
			if err != nil {
				return fmt.Errorf("publish %s/%s round %d: %w", dest, customer, r, err)
			}
			for i, id := range ids {
				if id == "" {
					return fmt.Errorf("publish %s/%s round %d: empty id at %d", dest, customer, r, i)
				}
				into.add(customer+"/"+chunk[i], id, batch[i].Payload)
			}
		}
	}
	return nil
}

// count reports the requests in [from, to) that match keep (nil: all).
func count(reqs []partner.Request, from, to time.Time, keep func(partner.Request) bool) int {
	n := 0
	for _, r := range reqs {
		if !r.At.Before(from) && r.At.Before(to) && (keep == nil || keep(r)) {
			n++
		}
	}
	return n
}

func is2xx(r partner.Request) bool { return r.Status/100 == 2 }

func customerOK(c string) func(partner.Request) bool {
	return func(r partner.Request) bool { return r.Customer == c && r.Status/100 == 2 }
}

// maxPerWindow is the largest number of requests matching keep within any
// window of length w.
func maxPerWindow(reqs []partner.Request, w time.Duration, keep func(partner.Request) bool) (int, time.Time) {
	var at []time.Time
	for _, r := range reqs {
		if keep == nil || keep(r) {
			at = append(at, r.At)
		}
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	best, bestAt, lo := 0, time.Time{}, 0
	for hi := range at {
		for at[hi].Sub(at[lo]) >= w {
			lo++
		}
		if hi-lo+1 > best {
			best, bestAt = hi-lo+1, at[lo]
		}
	}
	return best, bestAt
}

// firstAt is the arrival of the first request matching keep (zero: none).
func firstAt(reqs []partner.Request, keep func(partner.Request) bool) time.Time {
	for _, r := range reqs {
		if keep == nil || keep(r) {
			return r.At
		}
	}
	return time.Time{}
}

// perSecond renders per-second counts of 2xx and other answers since t0,
// for logs.
func perSecond(reqs []partner.Request, t0 time.Time, secs int) string {
	var b strings.Builder
	for s := range secs {
		from := t0.Add(time.Duration(s) * time.Second)
		to := from.Add(time.Second)
		ok := count(reqs, from, to, is2xx)
		all := count(reqs, from, to, nil)
		fmt.Fprintf(&b, " %d:%d/%d", s, ok, all-ok)
	}
	return b.String()
}

// checkLanePrefix is checkLaneOrder for a destination that has not drained:
// within every lane, a request for an event arrives only after every
// earlier event of the lane was answered 2xx. It returns the violations.
func checkLanePrefix(p *partner.Partner, byLane map[string][]string) []string {
	reqs := p.Requests()
	index := map[string]int{}
	laneOf := map[string]string{}
	for lane, ids := range byLane {
		for i, id := range ids {
			index[id], laneOf[id] = i, lane
		}
	}
	frontier := map[string]int{}
	var errs []string
	for _, r := range reqs {
		i, ok := index[r.ID]
		if !ok || laneOf[r.ID] != r.Lane {
			errs = append(errs, fmt.Sprintf("unexpected event %s on lane %q", r.ID, r.Lane))
			continue
		}
		f := frontier[r.Lane]
		switch {
		case i > f:
			errs = append(errs, fmt.Sprintf("lane %q: event #%d sent while #%d was not yet delivered", r.Lane, i, f))
		case i == f && r.Status/100 == 2:
			frontier[r.Lane] = f + 1
		}
	}
	return errs
}
