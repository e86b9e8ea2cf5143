package e2e

// Edges with real processes (issue 25's acceptance): a cell (`rivora dev
// --leaf-listen`, and the three-agent Consul cell) and a `rivora edge`
// joined through a WAN that is cut silently. While the link is cut the
// edge acknowledges every publish, survives a kill -9, and the control
// plane lists it disconnected; once the link is back every acknowledged
// event is delivered, none twice, every lane in publish order, and the
// edge's buffer is empty. Also: the cell restarted, and killed, while it
// takes the edge's events and while the edge holds more (each event
// delivered once), a full edge, and idempotency across a cut.

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// edgeCut is how long the acceptance cuts the link: at least 60 s.
const edgeCut = 62 * time.Second

// edgeWorld is a cell with one destination, and an edge joined to it
// through a WAN.
type edgeWorld struct {
	t     *testing.T
	r     *rig
	dev   *devProc // nil on the Consul cell
	p     *partner.Partner
	dest  string
	w     *wan
	e     *edgeProc
	name  string
	lanes []string
	pub   *published
	round int // the next round's number
}

// newDevEdgeWorld starts `rivora dev --leaf-listen`, a destination, and
// an edge joined through a WAN; it returns once the edge applied the
// cell's config and the control plane lists it connected.
func newDevEdgeWorld(t *testing.T, name string, opts edgeOptions) *edgeWorld {
	t.Helper()
	leaf := "127.0.0.1:" + strconv.Itoa(freePort(t))
	d := startDev(t, devOptions{Partitions: 4, Args: append([]string{"--leaf-listen", leaf}, cellArgs()...)})
	w := &edgeWorld{t: t, r: devRig(d), dev: d, dest: "orders", name: name, lanes: lanesNamed("lane", 20), pub: newPublished()}
	w.w = newWAN(t, []string{leaf}, []string{d.URL()})
	w.join(opts)
	return w
}

// newClusterEdgeWorld is newDevEdgeWorld on a three-agent Consul cell
// whose agents all open a leaf port; the edge is given all of them.
func newClusterEdgeWorld(t *testing.T, name string) *edgeWorld {
	t.Helper()
	leaves := map[string]string{}
	c := startClusterWith(t, clusterOptions{ControlPlanes: 1, Agents: 3, Partitions: 4, AgentArgs: func(agent string) []string {
		leaves[agent] = "127.0.0.1:" + strconv.Itoa(freePort(t))
		return []string{"--leaf-listen", leaves[agent]}
	}})
	w := &edgeWorld{t: t, r: c.rig("a1"), dest: "orders", name: name, lanes: lanesNamed("lane", 20), pub: newPublished()}
	w.w = newWAN(t, []string{leaves["a1"], leaves["a2"], leaves["a3"]}, []string{c.cp.URL()})
	w.join(edgeOptions{TLS: true})
	return w
}

// join creates the destination, a publisher token and the edge.
func (w *edgeWorld) join(opts edgeOptions) {
	t := w.t
	t.Helper()
	w.p = newPartner(t)
	// An open budget: the tests wait for deliveries, not for the default
	// 50/s.
	w.r.createDestination(t, w.dest, w.p, &rivorav1.Limits{RatePerSecond: 5000, Burst: 5000, MaxInFlight: 64})
	opts.Name, opts.WAN = w.name, w.w
	w.e = startEdge(t, opts, publisherToken(t, w.r, "edge-publisher"))
	waitEdgeApplied(t, w.r, w.name)
	waitEdgeListed(t, w.r.adminURL, w.name, "connected", 30*time.Second, func(e edgeJSON) bool { return e.Connected })
}

// publishRounds publishes n rounds through the edge, each acknowledged.
func (w *edgeWorld) publishRounds(n int) {
	w.t.Helper()
	for range n {
		if err := publishRound(ctxTimeout(w.t, 30*time.Second), w.e.SDK(), w.dest, "c1", w.lanes, w.round, w.pub); err != nil {
			w.t.Fatal(err)
		}
		w.round++
	}
}

// startPublishing publishes a round every 250 ms until stopped.
func (w *edgeWorld) startPublishing() *roundPublisher {
	return startRounds(w.e.SDK(), w.dest, "c1", w.lanes, w.round, 250*time.Millisecond, w.pub)
}

func (w *edgeWorld) stopPublishing(rp *roundPublisher) {
	w.t.Helper()
	w.round = rp.Stop(w.t)
}

// waitForwarded waits until every acknowledged event was delivered and
// the control plane lists the edge connected with an empty buffer; then
// it checks that none was delivered twice and every lane in publish
// order.
func (w *edgeWorld) waitForwarded(timeout time.Duration) {
	t := w.t
	t.Helper()
	called := time.Now()
	ids := w.pub.all()
	if err := w.p.AwaitDelivered(ids, timeout); err != nil {
		st := waitEdgeListed(t, w.r.adminURL, w.name, "listed", 10*time.Second, func(edgeJSON) bool { return true })
		t.Fatalf("%v (edge: %s)", err, st)
	}
	w.e.waitMetrics("connected with an empty buffer", 30*time.Second, func(m edgeMetrics) bool { return m.Connected && m.Buffered == 0 })
	// A report made after this call: one from before a cut would show
	// the buffer as it was then.
	e := waitEdgeListed(t, w.r.adminURL, w.name, "reported connected with nothing buffered", 30*time.Second, func(e edgeJSON) bool {
		seen, err := time.Parse(time.RFC3339Nano, e.LastSeen)
		return err == nil && seen.After(called) && e.Connected && e.BufferedEvents == 0 && e.BufferedBytes == 0 && e.ForwardedTotal > 0
	})
	rep := checkLaneOrder(t, w.p, w.pub.ByLane, w.pub.Payloads, nil)
	if d := w.p.Duplicates(); d != 0 || rep.Duplicates != 0 {
		t.Errorf("%d events delivered twice (webhook-id repeated with a 2xx), lane check counted %d", d, rep.Duplicates)
	}
	t.Logf("%d events over %d lanes delivered once each, in lane order; edge: %s", rep.Events, rep.Lanes, e)
}

// heldDuringCut fails the test when an event published during the cut
// was delivered before the link returned (the cut did not hold).
func (w *edgeWorld) heldDuringCut(before int) {
	w.t.Helper()
	if got := w.p.Delivered(); got != before {
		w.t.Fatalf("the partner got %d events during the cut (%d before it): the cut did not cut", got-before, before)
	}
}

// cutKillRestart is the acceptance scenario: publish; cut the WAN for
// edgeCut while publishing (every publish acknowledged); the control
// plane lists the edge disconnected; kill -9 the edge during the cut and
// restart it on its data dir; publish more; restore; everything
// delivered once, in lane order, the edge's buffer empty.
func (w *edgeWorld) cutKillRestart() {
	t := w.t
	t.Helper()
	w.publishRounds(5)
	w.p.WaitDelivered(t, w.pub.all(), 60*time.Second)
	delivered := w.p.Delivered()

	cutAt := time.Now()
	w.w.Cut()
	rp := w.startPublishing()
	e := waitEdgeListed(t, w.r.adminURL, w.name, "disconnected during the cut", 30*time.Second, func(e edgeJSON) bool { return !e.Connected })
	t.Logf("%s after the cut: edges list shows %s", time.Since(cutAt).Round(time.Millisecond), e)
	w.e.waitMetrics("cut off from the cell, holding events", 30*time.Second, func(m edgeMetrics) bool { return !m.Connected && m.Buffered > 0 })
	t.Logf("%s after the cut: the edge's metrics show it cut off", time.Since(cutAt).Round(time.Millisecond))

	poll.True(t, "40 rounds published through the edge during the cut", 60*time.Second, func() bool { return rp.Rounds() >= w.round+40 })
	w.stopPublishing(rp)
	w.e.Kill9()
	w.e.Restart() // the control plane is out of reach: it starts on what it kept
	t.Logf("%s after the cut: the edge was killed and restarted on its data dir", time.Since(cutAt).Round(time.Millisecond))
	rp = w.startPublishing()
	<-time.After(time.Until(cutAt.Add(edgeCut))) // the cut's length is the scenario, not a wait for an event
	w.stopPublishing(rp)
	w.heldDuringCut(delivered)
	w.e.waitMetrics("cut off after its restart, holding events", 10*time.Second, func(m edgeMetrics) bool { return !m.Connected && m.Buffered > 0 })
	if e := waitEdgeListed(t, w.r.adminURL, w.name, "listed", 10*time.Second, func(edgeJSON) bool { return true }); e.Connected {
		t.Fatalf("edges list at the end of the cut: %s; want disconnected", e)
	}

	w.w.Restore()
	t.Logf("restored after %s: %d events published, %d delivered", time.Since(cutAt).Round(time.Millisecond), len(w.pub.all()), delivered)
	restoredAt := time.Now()
	w.e.waitMetrics("connected again", 3*time.Minute, func(m edgeMetrics) bool { return m.Connected })
	t.Logf("the edge's leaf connection is up %s after the restore", time.Since(restoredAt).Round(time.Millisecond))
	w.publishRounds(5)
	w.waitForwarded(3 * time.Minute)
	t.Logf("first delivery %s after the restore", firstAt(w.p.Requests(), func(r partner.Request) bool { return r.At.After(restoredAt) }).Sub(restoredAt).Round(time.Millisecond))
	t.Logf("everything delivered %s after the link returned", time.Since(restoredAt).Round(time.Millisecond))
}

func TestEdgeDevCutKillRestart(t *testing.T) {
	w := newDevEdgeWorld(t, "edge-dev", edgeOptions{})
	w.cutKillRestart()
}

func TestEdgeClusterCutKillRestart(t *testing.T) {
	w := newClusterEdgeWorld(t, "edge-cluster")
	w.cutKillRestart()
}

// The cell restarted (SIGTERM), not the edge, after it took and
// delivered events the edge still counts as unforwarded, and while the
// edge holds more: forwarding resumes by itself, nothing lost or
// doubled. (Stopped cleanly, the cell's JetStream writes down how far it
// took each source, and skips what the edge sends again by itself: the
// forward marks see none of it.)
func TestEdgeCellRestart(t *testing.T) {
	w := newDevEdgeWorld(t, "edge-restart", edgeOptions{})
	held := w.cellDownWhileForwarding(func() {
		if err := w.dev.Stop(30 * time.Second); err != nil {
			t.Fatalf("rivora dev did not stop cleanly: %v", err)
		}
	})
	w.waitForwarded(2 * time.Minute)
	t.Logf("of the %d delivered events the edge held, the restarted cell's forward marks dropped %.0f (rivora_edge_reforwarded_events_total)",
		held, w.reforwarded())
}

// The same with the cell killed (kill -9). The killed cell's JetStream
// lost how far it took the edge's buffer, so the edge forwards the burst
// again and the cell's forward marks must drop every event of it: each
// is delivered once, and the cell counts them all.
func TestEdgeCellKill9(t *testing.T) {
	w := newDevEdgeWorld(t, "edge-kill9", edgeOptions{})
	held := w.cellDownWhileForwarding(w.dev.Kill9)
	w.waitForwarded(2 * time.Minute)
	if n := w.reforwarded(); int(n) != held {
		t.Errorf("the restarted cell dropped %.0f events it had stored already (rivora_edge_reforwarded_events_total); the edge held %d such events, and forwarded them again", n, held)
	} else {
		t.Logf("the restarted cell was handed again the %d events it had delivered before the kill, and dropped them all", held)
	}
}

// cellDownWhileForwarding takes the cell down while the edge still
// counts as unforwarded a burst the cell has taken, stored and delivered
// — the case where a restarted cell is handed events again — and while
// the edge holds events the cell never saw. It returns how many events
// the edge held that the cell had delivered.
//
// The cell's source tells the edge what it took by flow control, which
// the edge asks for once its deliveries pause for a second (or about a
// megabyte is pending): the link is cut as soon as the burst is
// delivered, so that request waits in the cut. The cell
// goes down a second after the last of those deliveries: by then it has
// recorded them (every 200 ms), so a burst event delivered twice can only
// be the edge's copy stored again, not the cell's own at-least-once
// after a crash (docs/guarantees.md). Publishing through the edge goes
// on while the cell is down, and across its restart.
func (w *edgeWorld) cellDownWhileForwarding(down func()) (held int) {
	t := w.t
	t.Helper()
	w.publishRounds(5)
	w.p.WaitDelivered(t, w.pub.all(), 60*time.Second)
	total := float64(len(w.pub.all()))
	w.e.waitMetrics("emptied by the cell", 30*time.Second, func(m edgeMetrics) bool { return m.Buffered == 0 && m.Forwarded == total })

	before := len(w.pub.all())
	w.publishRounds(20)
	burst := w.pub.all()[before:]
	w.p.WaitDelivered(t, burst, time.Minute)
	w.w.Cut()
	var last time.Time
	for _, id := range burst {
		if at, _ := w.p.DeliveredAt(id); at.After(last) {
			last = at
		}
	}
	// The edge samples its buffer every second: a sample that counts
	// every event published so far.
	var m edgeMetrics
	stored := float64(len(w.pub.all()))
	w.e.waitMetrics("counting the burst", 10*time.Second, func(got edgeMetrics) bool { m = got; return got.Buffered+got.Forwarded == stored })
	if m.Buffered == 0 {
		t.Fatalf("the edge counts the %d events of the burst forwarded already (%+v): the cut did not hold the cell's flow-control answer, so the scenario would not hand the restarted cell any event again", len(burst), m)
	}
	held = int(m.Buffered)
	<-time.After(time.Until(last.Add(time.Second))) // the cell's deliveries recorded: the scenario's premise, not a wait for an event
	down()
	t.Logf("the cell went down %s after it delivered the last of a %d-event burst; the edge holds %d of them as unforwarded",
		time.Since(last).Round(time.Millisecond), len(burst), held)

	// The edge accepts while the cell is down, and holds what it accepts.
	rp := w.startPublishing()
	downAt := rp.Rounds()
	poll.True(t, "8 rounds published through the edge while the cell is down", time.Minute, func() bool { return rp.Rounds() >= downAt+8 })
	heldAtLeast := float64(held + 8*len(w.lanes))
	w.e.waitMetrics("holding what it accepted while the cell is down", 10*time.Second, func(m edgeMetrics) bool { return m.Buffered >= heldAtLeast })
	w.w.Restore() // the link is up, the cell is not
	w.dev.Restart()
	upAt := rp.Rounds()
	poll.True(t, "8 rounds published through the edge after the cell's restart", time.Minute, func() bool { return rp.Rounds() >= upAt+8 })
	w.stopPublishing(rp)
	return held
}

// reforwarded is how many of the edge's events the cell dropped for it
// had stored them already (counted since its last start).
func (w *edgeWorld) reforwarded() float64 {
	w.t.Helper()
	return metricValue(w.t, w.dev, "rivora_edge_reforwarded_events_total")
}

// A full edge refuses with resource_exhausted, naming its buffer, how
// much is unforwarded and since when the cell is out of reach; every
// event it acknowledged is delivered once the link returns, and it
// accepts again.
func TestEdgeFullBufferRefuses(t *testing.T) {
	w := newDevEdgeWorld(t, "edge-full", edgeOptions{MaxBuffer: 1 << 20})
	w.publishRounds(1)
	w.p.WaitDelivered(t, w.pub.all(), 60*time.Second)

	w.w.Cut()
	// The refusal says since when the cell is unreachable once the edge
	// knows it is (its leaf pings fail).
	w.e.waitMetrics("cut off", 60*time.Second, func(m edgeMetrics) bool { return !m.Connected })
	var refusal error
	for round := 0; refusal == nil; round++ {
		if round > 1000 {
			t.Fatalf("the edge acknowledged %d events with --max-buffer 1 MiB and never refused", len(w.pub.all()))
		}
		for _, lane := range w.lanes {
			payload := payloadFor(w.dest, lane, w.round, 1024)
			resp, err := w.e.Ingest().Publish(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.PublishRequest{
				DestinationId: w.dest, CustomerId: "c1", LaneKey: lane, Type: "test.event", Payload: payload,
				IdempotencyKey: "full-" + strconv.Itoa(w.round) + "-" + lane,
			}))
			if err != nil {
				refusal = err
				break
			}
			w.pub.add("c1/"+lane, resp.Msg.GetEventId(), payload)
		}
		w.round++
	}
	if connect.CodeOf(refusal) != connect.CodeResourceExhausted {
		t.Fatalf("a publish to a full edge: %v; want resource_exhausted", refusal)
	}
	msg := refusal.Error()
	for _, want := range []string{"EDGE_BUFFER", w.name, "events", "bytes", "forwarded", "since"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the full edge's refusal %q does not mention %q", msg, want)
		}
	}
	t.Logf("after %d acknowledged events the edge refused: %v", len(w.pub.all()), refusal)

	w.w.Restore()
	w.waitForwarded(2 * time.Minute)
	w.publishRounds(2) // room again
	w.waitForwarded(time.Minute)
}

// Idempotency across a cut: a client that published through the edge
// and, the edge being cut off, again through the cell with the same key
// gets one event; the same key with another payload, which only the cell
// can detect once the link is back, becomes a dead letter with a clear
// reason, never silently dropped.
func TestEdgeIdempotencyAcrossACut(t *testing.T) {
	w := newDevEdgeWorld(t, "edge-idem", edgeOptions{})
	w.publishRounds(1)
	w.p.WaitDelivered(t, w.pub.all(), 60*time.Second)

	w.w.Cut()
	publish := func(via string, key string, payload string) string {
		t.Helper()
		ingest := w.e.Ingest()
		if via == "cell" {
			ingest = w.dev.Ingest()
		}
		resp, err := ingest.Publish(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.PublishRequest{
			DestinationId: w.dest, CustomerId: "c1", LaneKey: "failover", Type: "test.event",
			Payload: []byte(payload), ContentType: "application/json", IdempotencyKey: key,
		}))
		if err != nil {
			t.Fatalf("publish %s through the %s: %v", key, via, err)
		}
		return resp.Msg.GetEventId()
	}
	same := publish("edge", "k-same", `{"n":1}`)
	if again := publish("cell", "k-same", `{"n":1}`); again != same {
		t.Fatalf("k-same: the edge answered %s, the cell %s; one key names one event", same, again)
	}
	reused := publish("edge", "k-reused", `{"n":2,"via":"edge"}`)
	if again := publish("cell", "k-reused", `{"n":2,"via":"cell"}`); again != reused {
		t.Fatalf("k-reused: the edge answered %s, the cell %s", reused, again)
	}
	sentinel := publish("edge", "k-after", `{"n":3}`)
	w.w.Restore()

	w.p.WaitDelivered(t, []string{same, reused, sentinel}, 2*time.Minute)
	for id, want := range map[string]string{same: `{"n":1}`, reused: `{"n":2,"via":"cell"}`, sentinel: `{"n":3}`} {
		reqs := requestsFor(w.p, id)
		if len(reqs) != 1 || string(reqs[0].Payload) != want {
			t.Errorf("event %s: %d deliveries (%v); want one with %s", id, len(reqs), payloadsOf(reqs), want)
		}
	}
	dead := waitDLQ(t, w.dev, w.dest, 1, time.Minute)
	if dead[0].EventID != reused || !strings.Contains(strings.ToLower(dead[0].Reason), "idempotency") {
		t.Fatalf("dead letter %+v; want event %s with a reason naming the idempotency key reused for another payload", dead[0], reused)
	}
	t.Logf("the reused key's edge copy is a dead letter: %q", dead[0].Reason)
	waitEdgeListed(t, w.r.adminURL, w.name, "connected with nothing buffered", 30*time.Second, func(e edgeJSON) bool {
		return e.Connected && e.BufferedEvents == 0
	})
}

func payloadsOf(reqs []partner.Request) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = string(r.Payload)
	}
	return out
}
