package e2e

// A fault run: a cell on a faultnet.Net under steady traffic (hundreds of
// lanes over destinations that are fast, slow, flaky or failing), and the
// checker's verdict once the faults healed and the backlog drained. The
// partition scenarios (partition_*_test.go) are a fault schedule between
// startFaultRun and finish.

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/e2e/checker"
	"github.com/rivora/rivora/e2e/traffic"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/faultnet"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// faultRunOptions shape startFaultRun; zero values take the defaults.
type faultRunOptions struct {
	ControlPlanes int     // default 1
	Partitions    int     // default 8
	Rate          float64 // events per second over all lanes, default 250
	CPArgs        []string
	AgentArgs     func(name string) []string
	// DiskLimit: clusterOptions.DiskLimit.
	DiskLimit func(name string) int64
	// ExpiringEvery, when set, makes the expiring destination's lanes a
	// trickle for the whole run (one event per lane every ExpiringEvery)
	// instead of eventsExpiring at the start: the chaos run archives
	// throughout its faults.
	ExpiringEvery time.Duration
}

// The destinations of a fault run: fast ones spread over the partitions,
// one slow, one flaky (a 503 to the first request of one event in 20), and one that
// fails everything with a short window, so its events expire and must be
// archived.
const (
	fastDestinations = 6
	lanesPerFast     = 30
	lanesSlow        = 20
	lanesFlaky       = 4
	lanesExpiring    = 2
	eventsExpiring   = 4 // per expiring lane
	expiringWindow   = 15 * time.Second
)

type faultRun struct {
	c        *clusterCell
	net      *faultnet.Net
	partners map[string]*partner.Partner // destination → its partner
	lanes    []traffic.Lane
	expiring string
	traffic  *traffic.Traffic
	started  time.Time
}

func startFaultRun(t *testing.T, o faultRunOptions) *faultRun {
	t.Helper()
	if o.ControlPlanes == 0 {
		o.ControlPlanes = 1
	}
	if o.Partitions == 0 {
		o.Partitions = 8
	}
	if o.Rate == 0 {
		o.Rate = 250
	}
	n := newFaultNet(t)
	c := startClusterWith(t, clusterOptions{ControlPlanes: o.ControlPlanes, Agents: 3, Partitions: o.Partitions,
		CPArgs: o.CPArgs, AgentArgs: o.AgentArgs, Net: n, DiskLimit: o.DiskLimit})
	r := &faultRun{c: c, net: n, partners: map[string]*partner.Partner{}, expiring: "expiring"}
	rg := c.rig(c.names[0])
	add := func(id string, lanesOf int, max int, limits *rivorav1.Limits, shape func(*partner.Partner)) {
		every := time.Duration(0)
		if id == r.expiring && o.ExpiringEvery > 0 {
			max, every = 0, o.ExpiringEvery
		}
		p := newPartner(t)
		p.SetDelay(5 * time.Millisecond)
		if shape != nil {
			shape(p)
		}
		rg.createDestination(t, id, p, limits)
		r.partners[id] = p
		for k := range lanesOf {
			customer := fmt.Sprintf("c%d", k%3)
			r.lanes = append(r.lanes, traffic.Lane{Destination: id, Customer: customer, Key: fmt.Sprintf("u%03d", k),
				Partition: lanes.Partition(id, o.Partitions), Max: max, Every: every})
		}
	}
	for i := range fastDestinations {
		add(fmt.Sprintf("fast%d", i), lanesPerFast, 0, nil, nil)
	}
	add("slow", lanesSlow, 0, nil, func(p *partner.Partner) { p.SetDelay(250 * time.Millisecond) })
	add("flaky", lanesFlaky, 0, nil, func(p *partner.Partner) {
		p.SetAnswer(func(rq partner.Request) int {
			if rq.Sent == 1 && hashOf(rq.ID)%20 == 0 {
				return http.StatusServiceUnavailable
			}
			return 0
		})
	})
	add(r.expiring, lanesExpiring, eventsExpiring, &rivorav1.Limits{Window: durationpb.New(expiringWindow)},
		func(p *partner.Partner) { p.SetStatus(http.StatusInternalServerError) })

	var clients []*sdk.Client
	for _, name := range c.names {
		clients = append(clients, sdk.New(c.agents[name].URL(), sdk.WithHTTPClient(authedHTTP)))
	}
	r.started = time.Now()
	r.traffic = traffic.Start(t.Context(), traffic.Config{Clients: clients, Lanes: r.lanes, Rate: o.Rate})
	t.Cleanup(r.traffic.Stop)
	return r
}

func hashOf(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// busiestByLanes is the agent owning the partitions with the most lanes
// of traffic (ties: the lower name).
func (r *faultRun) busiestByLanes(owners map[uint32]string) string {
	count := map[string]int{}
	for _, l := range r.lanes {
		count[owners[uint32(l.Partition)]]++
	}
	best := ""
	for _, name := range r.c.names {
		if best == "" || count[name] > count[best] {
			best = name
		}
	}
	return best
}

// waitFlowing waits until n events were delivered since the start.
func (r *faultRun) waitFlowing(t *testing.T, n int) {
	t.Helper()
	err := poll.Check(90*time.Second, 50*time.Millisecond, func() error {
		if got := r.delivered(); got < n {
			return fmt.Errorf("%d delivered", got)
		}
		return nil
	})
	if err != nil {
		errs, last := r.traffic.Errors()
		t.Fatalf("%d events not delivered within 90s: %v; %d acknowledged, %d failed publish attempts (last: %v)", n, err, len(r.traffic.Acked()), errs, last)
	}
}

// faultReport is what a scenario logs beside the verdict.
type faultReport struct {
	Scenario     string  `json:"scenario"`
	RecoveryS    float64 `json:"recovery_s"`
	SlowestLane  string  `json:"slowest_lane"`
	P99DuringMS  float64 `json:"publish_p99_ms_during_faults"`
	PublishesDur int     `json:"publishes_during_faults"`
	Faults       int     `json:"faults"`
	// MoverSkips is how many times an agent found a partition's INGEST
	// consumer had skipped an event and restarted the partition to move
	// it in order (owner.mover.firstInOrder): a nats-server defect made
	// visible, 0 in a healthy run.
	MoverSkips int `json:"mover_skips"`
}

// finish stops the traffic, waits until every acknowledged event is
// delivered (or, for the expiring destination, archived), runs the
// checker and fails the test on its verdict. heal is when the last fault
// healed, faultFrom when the first began.
func (r *faultRun) finish(t *testing.T, scenario string, faultFrom, heal time.Time) checker.Verdict {
	t.Helper()
	h, v := r.drain(t)
	took, slowest, stuck := checker.Recovery(h, heal, map[string]bool{r.expiring: true})
	if stuck != "" {
		t.Errorf("lane %s never moved after the heal", stuck)
	}
	p99, during := r.traffic.P99(faultFrom, heal)
	rep := faultReport{Scenario: scenario, RecoveryS: took.Seconds(), SlowestLane: slowest,
		P99DuringMS: float64(p99.Microseconds()) / 1000, PublishesDur: during, Faults: len(r.net.Faults()), MoverSkips: r.moverSkips(t)}
	b, _ := json.Marshal(rep)
	t.Logf("faults:\n%s", faultnet.Describe(r.net.Faults()))
	t.Logf("verdict %s", v.JSON())
	t.Logf("report %s", b)
	return v
}

// drain stops the traffic, waits until every acknowledged event is
// delivered (or, for the expiring destination, archived), and runs the
// checker: a verdict that is not clean fails the test, with the
// reordered lanes' requests logged.
func (r *faultRun) drain(t *testing.T) (checker.History, checker.Verdict) {
	t.Helper()
	r.traffic.Stop()
	acked := r.traffic.Acked()
	errs, lastErr := r.traffic.Errors()
	t.Logf("traffic stopped: %d acknowledged, %d failed publish attempts (last: %v)", len(acked), errs, lastErr)
	byDest := map[string][]string{}
	for _, p := range acked {
		byDest[p.Destination] = append(byDest[p.Destination], p.ID)
	}
	drainFrom := time.Now()
	for dest, ids := range byDest {
		if dest == r.expiring {
			continue
		}
		if err := r.awaitDrained(dest, ids); err != nil {
			t.Errorf("%s: %v", dest, err)
			r.explainMissing(t, dest, ids)
		}
	}
	t.Logf("backlog drained in %s", time.Since(drainFrom).Round(100*time.Millisecond))
	deadline := time.Now().Add(2 * time.Minute)
	// An expired event still missing from the archive after the wait is
	// the checker's to count (unarchived), with the run's other figures.
	var archived []string
	err := poll.Check(time.Until(deadline)+expiringWindow, 500*time.Millisecond, func() error {
		archived = r.archived(t)
		have := map[string]bool{}
		for _, id := range archived {
			have[id] = true
		}
		for _, id := range byDest[r.expiring] {
			if !have[id] {
				return fmt.Errorf("%s not archived yet", id)
			}
		}
		return nil
	})
	if err != nil {
		t.Logf("the expiring destination's events archived: %v", err)
	}
	h := r.history(t, acked, archived, byDest[r.expiring])
	v := checker.Check(h)
	if err := v.OK(); err != nil {
		t.Errorf("checker: %v", err)
		r.explainReorders(t, v, acked)
	}
	return h, v
}

// Draining after the faults: the backlog may take as long as it keeps
// moving — a wait fails once drainStill passes without one of the
// destination's missing events delivered, or after drainMax in all.
const (
	drainStill = time.Minute
	drainMax   = 10 * time.Minute
)

// awaitDrained waits until every id was delivered to dest's partner.
func (r *faultRun) awaitDrained(dest string, ids []string) error {
	p := r.partners[dest]
	from := time.Now()
	missing := len(p.Missing(ids))
	for {
		err := p.AwaitDelivered(ids, drainStill)
		if err == nil {
			return nil
		}
		now := len(p.Missing(ids))
		if now == missing || time.Since(from) > drainMax {
			return fmt.Errorf("%w (%d still missing, %d delivered in the last %s)", err, now, missing-now, drainStill)
		}
		missing = now
	}
}

// explainReorders logs every request of the lanes the checker found
// reordered, with each event's place in its lane.
func (r *faultRun) explainReorders(t *testing.T, v checker.Verdict, acked []checker.Publish) {
	t.Helper()
	seq := map[string]int{}
	parts := map[int]bool{}
	for _, a := range acked {
		seq[a.ID] = a.Seq
	}
	for _, pr := range v.Problems {
		rest, ok := strings.CutPrefix(pr, "reordered: lane ")
		if !ok {
			continue
		}
		lane, _, _ := strings.Cut(rest, ":")
		dest, custLane, _ := strings.Cut(lane, "/")
		var lines []string
		for _, rq := range r.partners[dest].Requests() {
			if rq.Lane == custLane {
				s, known := seq[rq.ID]
				lines = append(lines, fmt.Sprintf("%s #%d(%v) %s attempt %d → %d by %s", rq.At.Format("15:04:05.000"), s, known, rq.ID[:8], rq.Attempt, rq.Status, rq.Agent))
			}
		}
		part := lanes.Partition(dest, r.c.partitions)
		t.Logf("lane %s (partition %d): %s", lane, part, strings.Join(lines, "; "))
		parts[part] = true
	}
	for _, part := range slices.Sorted(maps.Keys(parts)) {
		r.logPartition(t, part)
	}
}

// logPartition logs what each agent's log says about partition p (its
// terms, restarts, fast path), the last lines of each.
func (r *faultRun) logPartition(t *testing.T, p int) {
	t.Helper()
	const most, width = 60, 400
	mark := regexp.MustCompile(fmt.Sprintf(`\bpartition=%d\b`, p))
	for _, name := range r.c.names {
		b, err := os.ReadFile(r.c.agents[name].LogPath)
		if err != nil {
			t.Logf("%s's log: %v", name, err)
			continue
		}
		var lines []string
		for line := range strings.Lines(string(b)) {
			if mark.MatchString(line) {
				lines = append(lines, strings.ToValidUTF8(strings.TrimSpace(line[:min(len(line), width)]), ""))
			}
		}
		t.Logf("%s's log on partition %d (last %d of %d lines):\n%s", name, p, min(most, len(lines)), len(lines), strings.Join(lines[max(0, len(lines)-most):], "\n"))
	}
}

// moverSkips counts the agents' log lines saying a partition restarted
// because its INGEST consumer skipped an event (logged with the lines).
func (r *faultRun) moverSkips(t *testing.T) int {
	t.Helper()
	n := 0
	for _, name := range r.c.names {
		b, err := os.ReadFile(r.c.agents[name].LogPath)
		if err != nil {
			t.Logf("%s's log: %v", name, err)
			continue
		}
		for line := range strings.Lines(string(b)) {
			if strings.Contains(line, owner.SkipFound) {
				n++
				t.Logf("%s: %s", name, strings.TrimSpace(line))
			}
		}
	}
	return n
}

// archived lists the dead letters' event ids (the cell's archive).
func (r *faultRun) archived(t *testing.T) []string {
	t.Helper()
	// Any control plane that answers: the first may be cut off, or not
	// lead.
	var out string
	err := errors.New("no control plane")
	for _, cp := range r.c.cps {
		if out, _, err = runCtl(cp.URL(), "dlq", "list", "--destination", r.expiring, "-o", "json", "--limit", "1000"); err == nil {
			break
		}
	}
	if err != nil {
		return nil // poll again
	}
	var dls []struct {
		EventID string `json:"eventId"`
		// Unarchived: listed from a ledger (the archive not readable
		// then), not archived yet.
		Unarchived bool `json:"unarchived"`
	}
	if err := json.Unmarshal([]byte(out), &dls); err != nil {
		t.Fatalf("dlq list -o json: %v\n%s", err, out)
	}
	var ids []string
	for _, d := range dls {
		if !d.Unarchived {
			ids = append(ids, d.EventID)
		}
	}
	return ids
}

// history gathers what the checker judges: the partners' requests and
// the agents' ownership terms from their logs.
func (r *faultRun) history(t *testing.T, acked []checker.Publish, archived, expired []string) checker.History {
	t.Helper()
	h := checker.History{Acked: acked, Archived: archived, Expired: expired}
	for dest, p := range r.partners {
		part := lanes.Partition(dest, r.c.partitions)
		for _, rq := range p.Requests() {
			h.Deliveries = append(h.Deliveries, checker.Delivery{ID: rq.ID, Destination: dest, Partition: part, Agent: rq.Agent, Status: rq.Status, At: rq.At})
		}
	}
	for _, name := range r.c.names {
		f, err := os.Open(r.c.agents[name].LogPath)
		if err != nil {
			t.Fatal(err)
		}
		terms, err := checker.ParseTerms(name, f)
		f.Close()
		if err != nil {
			t.Fatalf("%s's log: %v", name, err)
		}
		h.Terms = append(h.Terms, terms...)
	}
	sort.Slice(h.Terms, func(i, j int) bool { return h.Terms[i].From.Before(h.Terms[j].From) })
	return h
}

// delivered is how many events were delivered so far.
func (r *faultRun) delivered() int {
	total := 0
	for _, p := range r.partners {
		total += p.Delivered()
	}
	return total
}

// waitDeliveredOn waits until agents other than exclude made n 2xx
// deliveries for destinations of the given partitions, counted from now.
func (r *faultRun) waitDeliveredOn(t *testing.T, parts []uint32, exclude []string, n int) {
	t.Helper()
	from := time.Now()
	in := map[int]bool{}
	for _, p := range parts {
		in[int(p)] = true
	}
	poll.True(t, fmt.Sprintf("%d deliveries on partitions %v by agents other than %v", n, parts, exclude), 90*time.Second, func() bool {
		got := 0
		for dest, p := range r.partners {
			if !in[lanes.Partition(dest, r.c.partitions)] {
				continue
			}
			for _, rq := range p.Requests() {
				if rq.At.After(from) && rq.Status/100 == 2 && !slices.Contains(exclude, rq.Agent) {
					got++
				}
			}
		}
		return got >= n
	})
}

// waitRejoined waits until name is healthy with a session and owns a
// partition again.
func (r *faultRun) waitRejoined(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	poll.True(t, name+" owns partitions again", timeout, func() bool {
		for _, a := range r.c.agentsList(t) {
			if a.Name == name && a.Healthy && a.Session != "" && len(a.Partitions) > 0 {
				return true
			}
		}
		return false
	})
}

// explainMissing logs, for a destination that did not drain, its health
// and the last requests of the lanes with undelivered events.
func (r *faultRun) explainMissing(t *testing.T, dest string, ids []string) {
	t.Helper()
	if h, err := healthJSON(r.c.cp.URL(), dest); err == nil {
		t.Logf("%s health: %v", dest, h)
	} else {
		t.Logf("%s health: %v", dest, err)
	}
	p := r.partners[dest]
	missing := map[string]bool{}
	for _, id := range p.Missing(ids) {
		missing[id] = true
	}
	lanesMissing := map[string]bool{}
	for _, a := range r.traffic.Acked() {
		if missing[a.ID] {
			lanesMissing[a.Customer+"/"+a.Lane] = true
		}
	}
	reqs := p.Requests()
	for lane := range lanesMissing {
		var last []string
		for _, rq := range reqs {
			if rq.Lane == lane {
				last = append(last, fmt.Sprintf("%s %s attempt %d → %d by %s", rq.At.Format("15:04:05.000"), rq.ID[:8], rq.Attempt, rq.Status, rq.Agent))
			}
		}
		last = last[max(0, len(last)-4):]
		t.Logf("lane %s/%s: last requests %v", dest, lane, last)
	}
}
