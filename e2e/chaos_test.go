package e2e

// The chaos run (issue 27): a fault run (faultrun_test.go) on a cell of
// two control planes and three agents, under steady traffic, through a
// random schedule of every fault the partition scenarios use and of the
// processes' own faults — kill -9, SIGSTOP/SIGCONT, a Consul restart,
// MinIO down, a full disk — one at a time, each healed before the next;
// then heal, drain, and the checker. `go run ./e2e/chaos` runs it for as
// long as asked (see e2e/chaos/main.go); `make test` runs it for five
// minutes with a fixed seed.
//
// The schedule draws the kinds of fault from a shuffled deck, so a short
// run still meets every kind once before any kind comes twice.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rivora/rivora/e2e/checker"
	"github.com/rivora/rivora/testkit/faultnet"
)

// Environment of TestChaos (e2e/chaos sets them).
const (
	envChaosDuration = "RIVORA_CHAOS_DURATION" // how long faults are injected; default 5m
	envChaosSeed     = "RIVORA_CHAOS_SEED"     // the schedule's seed; default 1
	envChaosReport   = "RIVORA_CHAOS_REPORT"   // a file to write the report (JSON) to
)

// chaosFault is one fault of the schedule, as reported.
type chaosFault struct {
	Kind   string    `json:"kind"`
	What   string    `json:"what"`
	At     time.Time `json:"at"`
	Healed time.Time `json:"healed"`
	// RecoveryS: from the heal until every lane that was waiting moved
	// again (checker.Recovery); Slowest is that lane, Stuck one that
	// never moved before the next fault's heal.
	RecoveryS float64 `json:"recovery_s"`
	Slowest   string  `json:"slowest_lane,omitempty"`
	Stuck     string  `json:"stuck_lane,omitempty"`
	// Settled: the cell owned every partition again with healthy agents
	// this long after the heal (-1: not within settleTimeout).
	SettledS float64 `json:"settled_s"`
}

// chaosReport is the run's last line.
type chaosReport struct {
	Seed                int64          `json:"seed"`
	DurationS           float64        `json:"duration_s"`
	Acked               int            `json:"acked"`
	Delivered           int            `json:"delivered"`
	Archived            int            `json:"archived"`
	Lost                int            `json:"lost"`
	ReorderedLanes      int            `json:"reordered_lanes"`
	Duplicates          int            `json:"duplicates"`
	DuplicatesExplained int            `json:"duplicates_explained"`
	OverlappingWriters  int            `json:"overlapping_writers"`
	StaleDeliveries     int            `json:"stale_deliveries"`
	Unarchived          int            `json:"unarchived"`
	Faults              int            `json:"faults"`
	FaultsByKind        map[string]int `json:"faults_by_kind"`
	WorstRecoveryS      float64        `json:"worst_recovery_s"`
	WorstRecoveryFault  string         `json:"worst_recovery_fault"`
	StuckAfterFaults    int            `json:"stuck_after_faults"`
	PublishP99MSFaults  float64        `json:"publish_p99_ms_during_faults"`
	PublishesFaults     int            `json:"publishes_during_faults"`
	PublishP99MS        float64        `json:"publish_p99_ms"`
	FailedPublishes     int            `json:"failed_publish_attempts"`
	MoverSkips          int            `json:"mover_skips"`
	OK                  bool           `json:"ok"`
}

// The cell's timers the schedule plays against: session TTL 10 s, lock
// delay 5 s, store stall timeout 15 s (cluster_test.go, agent flags). A
// fault is held 3–25 s, so some end before a partition must move and some
// after; the gap after a heal is 5–15 s once the cell settled.
const (
	chaosHoldMin  = 3 * time.Second
	chaosHoldMax  = 25 * time.Second
	chaosGapMin   = 5 * time.Second
	chaosGapMax   = 15 * time.Second
	settleTimeout = 2 * time.Minute
)

// chaosKinds are the kinds of fault the schedule draws from.
var chaosKinds = []string{"cut", "one-way", "latency", "flap", "isolate", "cp-cut",
	"kill-9", "sigstop", "consul-restart", "minio-down", "disk-full"}

// chaosDiskAgent is the agent whose --data-dir is a filesystem of its own
// (disk_test.go), so the schedule can fill it: 1 GiB, and 50 MiB more per
// minute of faults for the streams' growth (a tmpfs takes memory only as
// it fills).
const chaosDiskAgent = "a3"

func chaosDisk(duration time.Duration) int64 {
	return 1<<30 + int64(duration/time.Minute)*(50<<20)
}

func TestChaos(t *testing.T) {
	duration := 5 * time.Minute
	if v := os.Getenv(envChaosDuration); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration such as 5m or 1h", envChaosDuration, v)
		}
		duration = d
	}
	seed := int64(1)
	if v := os.Getenv(envChaosSeed); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an integer", envChaosSeed, v)
		}
		seed = s
	}
	t.Logf("chaos: seed %d, faults for %s", seed, duration)

	r := startFaultRun(t, faultRunOptions{ControlPlanes: 2, ExpiringEvery: 20 * time.Second,
		CPArgs: []string{"--rejoin-delay", "5s"},
		DiskLimit: func(name string) int64 {
			if name == chaosDiskAgent {
				return chaosDisk(duration)
			}
			return 0
		}})
	s := &chaosSchedule{t: t, r: r, rng: rand.New(rand.NewPCG(uint64(seed), 0x5ca1ab1e))}
	r.waitFlowing(t, 500)

	began := time.Now()
	for time.Since(began) < duration {
		s.next()
	}
	t.Logf("chaos: %d faults in %s; draining", len(s.faults), time.Since(began).Round(time.Second))

	h, v := r.drain(t)
	rep := s.report(h, v, seed, time.Since(began))
	rep.MoverSkips = r.moverSkips(t)
	for _, f := range s.faults {
		if f.Stuck != "" {
			t.Errorf("after %s %s (healed %s), lane %s did not move again", f.Kind, f.What, f.Healed.Format("15:04:05"), f.Stuck)
		}
	}
	rep.OK = !t.Failed()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // "a1<->a2" as written
	enc.Encode(rep)
	b := bytes.TrimSpace(buf.Bytes())
	t.Logf("chaos network log:\n%s", faultnet.Describe(r.net.Faults()))
	t.Logf("chaos verdict %s", v.JSON())
	t.Logf("chaos report %s", b)
	if path := os.Getenv(envChaosReport); path != "" {
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Errorf("write the report to %s: %v", path, err)
		}
	}
}

// chaosSchedule draws and applies the faults of one run.
type chaosSchedule struct {
	t      *testing.T
	r      *faultRun
	rng    *rand.Rand
	deck   []string
	faults []chaosFault
}

// draw is the next kind of fault: the deck, reshuffled when empty.
func (s *chaosSchedule) draw() string {
	if len(s.deck) == 0 {
		s.deck = slices.Clone(chaosKinds)
		s.rng.Shuffle(len(s.deck), func(i, j int) { s.deck[i], s.deck[j] = s.deck[j], s.deck[i] })
	}
	k := s.deck[0]
	s.deck = s.deck[1:]
	return k
}

func (s *chaosSchedule) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)+1))
}

func (s *chaosSchedule) pick(from []string) string { return from[s.rng.IntN(len(from))] }

// next injects one fault, holds it, heals it, waits until the cell
// settled, then a gap.
func (s *chaosSchedule) next() {
	t, c := s.t, s.r.c
	kind := s.draw()
	hold := s.between(chaosHoldMin, chaosHoldMax)
	agent := s.pick(c.names)
	n := s.r.net
	var what string
	var heal func()
	switch kind {
	case "cut": // a silent drop both ways: agent–agent, agent–Consul or agent–MinIO
		peer := s.pick(append(c.others(agent), "consul", "minio"))
		what = agent + "<->" + peer
		n.Cut(agent, peer)
		heal = n.Heal
	case "one-way": // agent's packets arrive, answers are held
		peer := s.pick(append(c.others(agent), "consul"))
		what = agent + "->" + peer + " (answers held)"
		n.CutOneWay(agent, peer)
		heal = n.Heal
	case "latency":
		peer := s.pick(append(c.others(agent), "consul"))
		d := s.between(200*time.Millisecond, 2*time.Second).Round(100 * time.Millisecond)
		what = fmt.Sprintf("%s<->%s +%s", agent, peer, d)
		n.Delay(agent, peer, d)
		heal = n.Heal
	case "flap":
		peer := s.pick(append(c.others(agent), "consul"))
		hold = s.between(10*time.Second, 30*time.Second)
		what = fmt.Sprintf("%s<->%s 2s/2s for %s", agent, peer, hold.Round(time.Second))
		over := n.Flap(agent, peer, 2*time.Second, hold)
		heal = func() { <-over; n.Heal() }
	case "isolate":
		what = agent
		n.Isolate(agent)
		heal = n.Heal
	case "cp-cut": // a control plane from Consul, or from every agent
		cp := cpNode(s.rng.IntN(len(c.cps)))
		if s.rng.IntN(2) == 0 {
			what = cp + "<->consul"
			n.Cut(cp, "consul")
		} else {
			what = cp + "<->agents"
			for _, a := range c.names {
				n.Cut(cp, a)
			}
		}
		heal = n.Heal
	case "kill-9":
		what = agent
		p := c.agents[agent]
		p.kill9(10 * time.Second)
		heal = func() { p.start(); p.waitHealthy(2 * time.Minute) }
	case "sigstop":
		what = agent
		p := c.agents[agent]
		p.signal(syscall.SIGSTOP)
		heal = func() { p.signal(syscall.SIGCONT) }
	case "consul-restart":
		what = "consul"
		c.consul.Stop()
		heal = c.consul.Start
	case "minio-down":
		what = "minio"
		c.minio.Stop()
		heal = c.minio.Start
	case "disk-full": // the agent stops itself (its store is disabled); its supervisor restarts it at once
		filled := c.fillDisk(chaosDiskAgent)
		what = fmt.Sprintf("%s (%d MiB of filler)", chaosDiskAgent, filled>>20)
		c.startAgain(chaosDiskAgent)
		p := c.agents[chaosDiskAgent]
		heal = func() { c.freeDisk(chaosDiskAgent); p.waitHealthy(2 * time.Minute) }
	default:
		t.Fatalf("chaos: no fault %q", kind)
	}
	f := chaosFault{Kind: kind, What: what, At: time.Now()}
	t.Logf("chaos: %s %s %s, for %s", f.At.UTC().Format("15:04:05.000"), kind, what, hold.Round(100*time.Millisecond))
	if kind != "flap" {
		time.Sleep(hold) // the fault's length is the point: nothing to await
	}
	heal()
	f.Healed = time.Now()
	f.SettledS = -1
	if took, ok := s.settle(); ok {
		f.SettledS = took.Seconds()
	}
	t.Logf("chaos: %s healed %s; settled in %.1fs", f.Healed.UTC().Format("15:04:05.000"), what, f.SettledS)
	s.faults = append(s.faults, f)
	time.Sleep(s.between(chaosGapMin, chaosGapMax))
}

// settle waits until every partition is owned by a healthy agent, as a
// control plane answering `agents list` sees it, and returns how long
// that took (false: not within settleTimeout).
func (s *chaosSchedule) settle() (time.Duration, bool) {
	from := time.Now()
	for time.Since(from) < settleTimeout {
		if s.settled() {
			return time.Since(from), true
		}
		time.Sleep(250 * time.Millisecond) // polling an outside view: nothing to await
	}
	return 0, false
}

func (s *chaosSchedule) settled() bool {
	c := s.r.c
	for _, cp := range c.cps {
		out, _, err := runCtl(cp.URL(), "agents", "list", "-o", "json")
		if err != nil {
			continue
		}
		var agents []agentJSON
		if json.Unmarshal([]byte(out), &agents) != nil {
			continue
		}
		owned := map[uint32]bool{}
		healthy := 0
		for _, a := range agents {
			if !a.Healthy {
				continue
			}
			healthy++
			for _, p := range a.Partitions {
				owned[p] = true
			}
		}
		return healthy == len(c.names) && len(owned) == c.partitions
	}
	return false
}

// report is the run's figures: the checker's, each fault's recovery
// (heal → every waiting lane moving again), and the publish latency
// within the faults.
func (s *chaosSchedule) report(h checker.History, v checker.Verdict, seed int64, took time.Duration) chaosReport {
	rep := chaosReport{Seed: seed, DurationS: took.Round(time.Second).Seconds(), Acked: v.Acked, Delivered: v.Delivered,
		Archived: v.Archived, Lost: v.Lost, ReorderedLanes: v.ReorderedLanes, Duplicates: v.Duplicates,
		DuplicatesExplained: v.DuplicatesExplained, OverlappingWriters: v.OverlappingWriters,
		StaleDeliveries: v.StaleDeliveries, Unarchived: v.Unarchived, Faults: len(s.faults), FaultsByKind: map[string]int{}}
	skip := map[string]bool{s.r.expiring: true}
	for i := range s.faults {
		f := &s.faults[i]
		rep.FaultsByKind[f.Kind]++
		took, slowest, stuck := checker.Recovery(h, f.Healed, skip)
		f.RecoveryS, f.Slowest, f.Stuck = took.Seconds(), slowest, stuck
		if stuck != "" {
			rep.StuckAfterFaults++
		}
		if f.RecoveryS > rep.WorstRecoveryS {
			rep.WorstRecoveryS = f.RecoveryS
			rep.WorstRecoveryFault = f.Kind + " " + f.What
		}
	}
	inFault := func(at time.Time) bool {
		i := sort.Search(len(s.faults), func(i int) bool { return !s.faults[i].Healed.Before(at) })
		return i < len(s.faults) && !at.Before(s.faults[i].At)
	}
	p99, during := s.r.traffic.P99Where(inFault)
	rep.PublishP99MSFaults, rep.PublishesFaults = float64(p99.Microseconds())/1000, during
	all, _ := s.r.traffic.P99Where(func(time.Time) bool { return true })
	rep.PublishP99MS = float64(all.Microseconds()) / 1000
	rep.FailedPublishes, _ = s.r.traffic.Errors()
	var lines []string
	for _, f := range s.faults {
		lane := f.Slowest
		if f.Stuck != "" {
			lane = "STUCK " + f.Stuck
		}
		lines = append(lines, fmt.Sprintf("%s %-14s %-34s healed %s settled %5.1fs recovery %5.1fs (%s)",
			f.At.UTC().Format("15:04:05"), f.Kind, f.What, f.Healed.UTC().Format("15:04:05"), f.SettledS, f.RecoveryS, lane))
	}
	s.t.Logf("chaos faults:\n%s", strings.Join(lines, "\n"))
	return rep
}
