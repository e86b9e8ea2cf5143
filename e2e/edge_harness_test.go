package e2e

// The edge's harness: `rivora edge` as a process joined to a cell through
// a WAN that can be cut silently (testkit/cutproxy, one proxy per address
// the edge reaches: the cell's leaf ports and its control plane), the
// control plane's account of its edges (`rivoractl edges list -o json`,
// and the admin API for what the CLI does not show), and publishing in
// rounds while a cut lasts.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/e2e/creds"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/cutproxy"
	"github.com/rivora/rivora/testkit/poll"
)

// ---------------------------------------------------------------------------
// the WAN between an edge and its cell

// wan is every link from an edge to its cell, cut and restored together
// (a broken WAN severs the leaf connections and the control plane's API
// alike).
type wan struct {
	leaves []*cutproxy.Proxy // to each leaf port of the cell
	cps    []*cutproxy.Proxy // to each control plane
	tls    bool
}

// newWAN proxies leafAddrs (HOST:PORT of the cell's leaf ports) and
// cpURLs (the control planes' URLs; https when the cell serves TLS).
func newWAN(t testing.TB, leafAddrs []string, cpURLs []string) *wan {
	t.Helper()
	w := &wan{}
	for _, a := range leafAddrs {
		w.leaves = append(w.leaves, cutproxy.New(t, a))
	}
	for _, raw := range cpURLs {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("control plane URL %q: %v", raw, err)
		}
		w.tls = u.Scheme == "https"
		w.cps = append(w.cps, cutproxy.New(t, u.Host))
	}
	return w
}

// Cut stops every link silently.
func (w *wan) Cut() {
	for _, p := range append(append([]*cutproxy.Proxy(nil), w.leaves...), w.cps...) {
		p.Cut()
	}
}

// Restore lets every link flow again.
func (w *wan) Restore() {
	for _, p := range append(append([]*cutproxy.Proxy(nil), w.leaves...), w.cps...) {
		p.Restore()
	}
}

// LeafURLs are the --cell-leaf values that reach the cell through the WAN.
func (w *wan) LeafURLs() []string {
	var out []string
	for _, p := range w.leaves {
		out = append(out, "nats-leaf://"+p.Addr())
	}
	return out
}

// ControlPlaneURLs are the --controlplane values through the WAN.
func (w *wan) ControlPlaneURLs() []string {
	scheme := "http://"
	if w.tls {
		scheme = "https://"
	}
	var out []string
	for _, p := range w.cps {
		out = append(out, scheme+p.Addr())
	}
	return out
}

// ---------------------------------------------------------------------------
// rivora edge

// edgeOptions configure startEdge.
type edgeOptions struct {
	Name string
	WAN  *wan
	// MaxBuffer is --max-buffer in bytes (default 256 MiB).
	MaxBuffer int64
	// BufferMaxAge is --buffer-max-age (0: the edge's default).
	BufferMaxAge time.Duration
	// TLS puts the edge's listener on the run's certificate and makes it
	// trust the run's CA (the Consul cell serves TLS everywhere).
	TLS  bool
	Args []string // extra flags
}

// edgeProc is `rivora edge` on a free 127.0.0.1 port: restarts keep its
// data directory and address.
type edgeProc struct {
	*proc
	opts    edgeOptions
	dataDir string
}

// startEdge starts `rivora edge` and waits until /healthz answers 200;
// publishers reach it with token (registered for its address).
func startEdge(t testing.TB, opts edgeOptions, token string) *edgeProc {
	t.Helper()
	if opts.MaxBuffer == 0 {
		opts.MaxBuffer = 256 << 20
	}
	e := &edgeProc{opts: opts, dataDir: t.TempDir()}
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	e.proc = newProc(t, "rivora edge "+opts.Name, rivoraBin, addr, e.args(addr))
	e.logTail = 48 << 10
	creds.Register(token, e.URL())
	e.run()
	return e
}

func (e *edgeProc) args(addr string) []string {
	a := []string{"edge", "--name", e.opts.Name, "--listen", addr, "--data-dir", e.dataDir,
		"--max-buffer", strconv.FormatInt(e.opts.MaxBuffer, 10)}
	a = append(a, cellArgs()...)
	for _, l := range e.opts.WAN.LeafURLs() {
		a = append(a, "--cell-leaf", l)
	}
	for _, cp := range e.opts.WAN.ControlPlaneURLs() {
		a = append(a, "--controlplane", cp)
	}
	if e.opts.BufferMaxAge > 0 {
		a = append(a, "--buffer-max-age", e.opts.BufferMaxAge.String())
	}
	if e.opts.TLS {
		a = append(a, tlsArgs()...)
	}
	return append(a, e.opts.Args...)
}

func (e *edgeProc) run() {
	e.t.Helper()
	e.start()
	e.waitHealthy(60 * time.Second)
}

// Kill9 kills the edge with SIGKILL and waits for it to be gone.
func (e *edgeProc) Kill9() {
	e.t.Helper()
	e.kill9(10 * time.Second)
}

// Restart starts the edge again on its data dir and address (it must
// have been killed or stopped).
func (e *edgeProc) Restart() {
	e.t.Helper()
	if e.running() {
		e.t.Fatal("Restart: rivora edge is still running")
	}
	e.run()
}

func (e *edgeProc) SDK() *sdk.Client { return sdk.New(e.URL(), sdk.WithHTTPClient(authedHTTP)) }

func (e *edgeProc) Ingest() rivorav1connect.IngestServiceClient {
	return rivorav1connect.NewIngestServiceClient(authedHTTP, e.URL())
}

// metric reads one unlabelled sample of the edge's /metrics (0 when the
// series is not exported).
func (e *edgeProc) metric(series string) (float64, error) {
	resp, err := authedHTTP.Get(e.URL() + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, nil
}

// edgeMetrics is the edge's account of its link and buffer, from its
// /metrics (sampled by the edge every second).
type edgeMetrics struct {
	Connected bool    // rivora_edge_cell_connected
	Buffered  float64 // rivora_edge_buffered_events
	Forwarded float64 // rivora_edge_forwarded_total
}

// waitMetrics polls the edge's /metrics until cond holds.
func (e *edgeProc) waitMetrics(what string, timeout time.Duration, cond func(edgeMetrics) bool) {
	e.t.Helper()
	var m edgeMetrics
	err := poll.Check(timeout, 100*time.Millisecond, func() error {
		connected, err := e.metric("rivora_edge_cell_connected")
		if err != nil {
			return err
		}
		if m.Buffered, err = e.metric("rivora_edge_buffered_events"); err != nil {
			return err
		}
		if m.Forwarded, err = e.metric("rivora_edge_forwarded_total"); err != nil {
			return err
		}
		m.Connected = connected == 1
		if !cond(m) {
			return fmt.Errorf("%+v", m)
		}
		return nil
	})
	if err != nil {
		e.t.Fatalf("edge /metrics: not %s within %s (last: %v)", what, timeout, err)
	}
}

// ---------------------------------------------------------------------------
// what the control plane knows of its edges

// edgeJSON is one entry of `rivoractl edges list -o json`. Counts are
// read whether the CLI writes them as numbers or (as protojson writes
// 64-bit integers) as strings.
type edgeJSON struct {
	Name              string          `json:"name"`
	Connected         bool            `json:"connected"`
	LastSeen          string          `json:"lastSeen"`
	BufferedEvents    flexInt         `json:"bufferedEvents"`
	BufferedBytes     flexInt         `json:"bufferedBytes"`
	OldestBufferedAge json.RawMessage `json:"oldestBufferedAge"`
	ForwardedTotal    flexInt         `json:"forwardedTotal"`
}

func (e edgeJSON) String() string {
	return fmt.Sprintf("%s connected=%v lastSeen=%s buffered=%d events/%d B oldest=%s forwarded=%d",
		e.Name, e.Connected, e.LastSeen, e.BufferedEvents, e.BufferedBytes, e.OldestBufferedAge, e.ForwardedTotal)
}

// flexInt is a JSON integer, bare or quoted.
type flexInt int64

func (n *flexInt) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		*n = 0
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%s is not an integer", b)
	}
	*n = flexInt(v)
	return nil
}

// edgesList runs `rivoractl edges list -o json` against server; every
// entry must carry every key the issue names.
func edgesList(server string) ([]edgeJSON, error) {
	out, errOut, err := runCtl(server, "edges", "list", "-o", "json")
	if err != nil {
		return nil, fmt.Errorf("rivoractl edges list: %v: %s", err, strings.TrimSpace(errOut))
	}
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		return nil, fmt.Errorf("edges list -o json is not a JSON array of objects: %v\n%s", err, out)
	}
	for _, r := range raw {
		for _, k := range []string{"name", "connected", "lastSeen", "bufferedEvents", "bufferedBytes", "oldestBufferedAge", "forwardedTotal"} {
			if _, ok := r[k]; !ok {
				return nil, fmt.Errorf("edges list -o json: an entry has no %q key:\n%s", k, out)
			}
		}
	}
	var list []edgeJSON
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("edges list -o json: %v\n%s", err, out)
	}
	return list, nil
}

// waitEdgeListed polls `edges list` until edge name's entry satisfies
// cond, and returns it.
func waitEdgeListed(t testing.TB, server, name, what string, timeout time.Duration, cond func(edgeJSON) bool) edgeJSON {
	t.Helper()
	var got edgeJSON
	err := poll.Check(timeout, 250*time.Millisecond, func() error {
		list, err := edgesList(server)
		if err != nil {
			return err
		}
		for _, e := range list {
			if e.Name == name {
				got = e
				if cond(e) {
					return nil
				}
				return fmt.Errorf("listed as %s", e)
			}
		}
		return fmt.Errorf("edge %s not listed (%d edges)", name, len(list))
	})
	if err != nil {
		t.Fatalf("edges list: edge %s not %s within %s (last: %v)", name, what, timeout, err)
	}
	return got
}

// edgeStatus is the control plane's EdgeStatus of name (nil: not known).
func edgeStatus(ctx context.Context, admin rivorav1connect.AdminServiceClient, name string) (*rivorav1.EdgeStatus, error) {
	resp, err := admin.GetConfigStatus(ctx, connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
	if err != nil {
		return nil, err
	}
	for _, e := range resp.Msg.GetEdges() {
		if e.GetName() == name {
			return e, nil
		}
	}
	return nil, nil
}

// waitEdgeApplied waits until edge name reports it applied the control
// plane's current config version (destinations and tokens it accepts
// publishes by).
func waitEdgeApplied(t testing.TB, r *rig, name string) {
	t.Helper()
	v := r.configVersion(t)
	err := poll.Check(30*time.Second, 50*time.Millisecond, func() error {
		st, err := edgeStatus(ctxTimeout(t, 5*time.Second), r.Admin(), name)
		switch {
		case err != nil:
			return err
		case st == nil:
			return fmt.Errorf("edge %s not registered", name)
		case st.GetBuffer().GetAppliedVersion() < v:
			return fmt.Errorf("edge %s reports version %d applied", name, st.GetBuffer().GetAppliedVersion())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("edge %s did not apply config version %d within 30s: %v", name, v, err)
	}
}

// publisherToken mints a publisher token on the control plane at
// adminURL (called with the admin token registered for it).
func publisherToken(t testing.TB, r *rig, name string) string {
	t.Helper()
	tokens := rivorav1connect.NewTokenServiceClient(authedHTTP, r.adminURL)
	resp, err := tokens.CreateToken(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.CreateTokenRequest{Name: name, Role: rivorav1.Role_ROLE_PUBLISHER, Customers: []string{"*"}}))
	if err != nil {
		t.Fatalf("create publisher token %s: %v", name, err)
	}
	return resp.Msg.GetToken()
}

// ---------------------------------------------------------------------------
// publishing while a cut lasts

// publishRound publishes event #round of every lane in one batch per 100
// lanes, recording the acknowledged ones. Safe off the test goroutine.
func publishRound(ctx context.Context, c *sdk.Client, dest, customer string, lanes []string, round int, into *published) error {
	for lo := 0; lo < len(lanes); lo += 100 {
		chunk := lanes[lo:min(lo+100, len(lanes))]
		batch := make([]sdk.Event, len(chunk))
		for i, lane := range chunk {
			batch[i] = sdk.Event{Destination: dest, Customer: customer, Lane: lane, Type: "test.event",
				Payload: payloadFor(dest, lane, round, 96), ContentType: "application/json"}
		}
		ids, err := c.PublishBatch(ctx, batch)
		if err != nil {
			return fmt.Errorf("publish %s/%s round %d: %w", dest, customer, round, err)
		}
		if len(ids) != len(batch) {
			return fmt.Errorf("publish %s/%s round %d: %d ids for %d events", dest, customer, round, len(ids), len(batch))
		}
		for i, id := range ids {
			if id == "" {
				return fmt.Errorf("publish %s/%s round %d: empty id at %d", dest, customer, round, i)
			}
			into.add(customer+"/"+chunk[i], id, batch[i].Payload)
		}
	}
	return nil
}

// roundPublisher publishes a round every interval until stopped; every
// publish must be acknowledged.
type roundPublisher struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	next   int // the next round's number
	err    error
}

// startRounds starts publishing from round first on.
func startRounds(c *sdk.Client, dest, customer string, lanes []string, first int, every time.Duration, into *published) *roundPublisher {
	ctx, cancel := context.WithCancel(context.Background())
	rp := &roundPublisher{cancel: cancel, done: make(chan struct{}), next: first}
	go func() {
		defer close(rp.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			rp.mu.Lock()
			round := rp.next
			rp.mu.Unlock()
			// A publish under way when Stop is called completes: its
			// answer decides whether it counts.
			pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := publishRound(pctx, c, dest, customer, lanes, round, into)
			pcancel()
			rp.mu.Lock()
			if err != nil {
				rp.err = err
				rp.mu.Unlock()
				return
			}
			rp.next++
			rp.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return rp
}

// Rounds is how many rounds were acknowledged so far.
func (rp *roundPublisher) Rounds() int {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.next
}

// Stop ends publishing and returns the next round's number; a publish
// that was not acknowledged fails the test.
func (rp *roundPublisher) Stop(t testing.TB) int {
	t.Helper()
	rp.cancel()
	<-rp.done
	if rp.err != nil {
		t.Fatalf("a publish through the edge was not acknowledged: %v", rp.err)
	}
	return rp.next
}
