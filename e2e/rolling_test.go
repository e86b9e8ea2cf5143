package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/e2e/checker"
	"github.com/rivora/rivora/e2e/traffic"
	"github.com/rivora/rivora/lanes"
	"github.com/rivora/rivora/testkit/poll"
)

// rollRejoinDelay is the control plane's --rejoin-delay in the rolling
// restart. A restarted agent's old session ended (its own stop destroyed
// it) under the control plane's eyes, so the control plane gives it
// partitions again only after the delay: 30 s by default, which would
// add a minute and a half to the roll of three agents and show nothing
// more (docs/operations.md says what it costs a real roll).
const rollRejoinDelay = 5 * time.Second

// holdAtStop is how long the partners of a stopping agent's partitions
// hold their answers from just before its SIGTERM: a deploy stops an
// agent with attempts in flight, and its drain waits for them. It is
// longer than the second after which a control plane that no longer
// hears from an agent ends its session — unless the agent reported
// leaving, as a stopping agent does before its Watch ends.
const holdAtStop = 2 * time.Second

// TestClusterRollingRestart: a deploy of a cell restarts its agents one
// after the other — SIGTERM with attempts in flight, the process exits,
// it is started again on its data (the same binary here) — while
// customers keep publishing. For each agent in turn: it keeps its
// partitions' leases through its drain and hands them off (no lock-delay:
// it reports leaving, so the control plane assigns its partitions to the
// others at once and does not end its session under it); its partitions
// are owned and delivered by the others; it comes back healthy and owns
// partitions again; the load goes on being delivered; then the next. At
// the end every partition is owned and the checker's verdict is clean:
// nothing lost, no lane reordered, no overlapping writers, duplicates
// explained. The report line has what the roll cost (docs/operations.md:
// Upgrading a cell).
func TestClusterRollingRestart(t *testing.T) {
	r := startFaultRun(t, faultRunOptions{CPArgs: []string{"--rejoin-delay", rollRejoinDelay.String()}})
	r.c.waitOwned(t, 30*time.Second, nil)
	r.waitFlowing(t, 500)

	rollAt := time.Now()
	var steps []rollStep
	for _, name := range r.c.names {
		steps = append(steps, r.rollAgent(t, name))
	}
	doneAt := time.Now()
	r.c.waitOwned(t, 30*time.Second, nil)
	t.Logf("rolled %d agents in %s", len(steps), doneAt.Sub(rollAt).Round(100*time.Millisecond))
	r.waitFlowing(t, r.delivered()+500)

	failures := r.traffic.Failures(rollAt, doneAt)
	p99, during := r.traffic.P99(rollAt, doneAt)
	h, v := r.drain(t)
	took, slowest, stuck := checker.Recovery(h, doneAt, map[string]bool{r.expiring: true})
	if stuck != "" {
		t.Errorf("lane %s never moved after the roll", stuck)
	}
	rep := rollReport{Scenario: "rolling restart", RollS: seconds(doneAt.Sub(rollAt)), Steps: steps,
		FailedPublishes: len(failures), P99DuringMS: float64(p99.Microseconds()) / 1000, PublishesDuring: during,
		RecoveryS: seconds(took), SlowestLane: slowest, ErrorLines: r.errorLines(t, rollAt)}
	if len(failures) > 0 {
		rep.LastError = failures[len(failures)-1].Err.Error()
	}
	r.logFailures(t, failures)
	b, _ := json.Marshal(rep)
	t.Logf("verdict %s", v.JSON())
	t.Logf("report %s", b)
}

// rollStep is what one agent's restart cost.
type rollStep struct {
	Agent      string   `json:"agent"`
	Partitions []uint32 `json:"partitions"` // owned when it got SIGTERM
	// From the SIGTERM: the process exited; every partition owned by the
	// others; each of its partitions delivered by another (the latest).
	ExitS    float64 `json:"sigterm_to_exit_s"`
	MovedS   float64 `json:"sigterm_to_owned_by_others_s"`
	StalledS float64 `json:"sigterm_to_delivered_elsewhere_s"`
	// From the start again: /healthz answers 200; it owns partitions
	// (the rejoin delay included).
	HealthyS float64 `json:"start_to_healthy_s"`
	OwningS  float64 `json:"start_to_owning_s"`
	// Failed publish attempts from the SIGTERM to owning again.
	FailedPublishes int `json:"failed_publishes"`
}

// rollReport is the rolling restart's report line.
type rollReport struct {
	Scenario        string     `json:"scenario"`
	RollS           float64    `json:"roll_s"`
	Steps           []rollStep `json:"steps"`
	FailedPublishes int        `json:"failed_publishes_during_roll"`
	LastError       string     `json:"last_publish_error,omitempty"`
	P99DuringMS     float64    `json:"publish_p99_ms_during_roll"`
	PublishesDuring int        `json:"publishes_during_roll"`
	RecoveryS       float64    `json:"recovery_s"`
	SlowestLane     string     `json:"slowest_lane"`
	ErrorLines      int        `json:"agent_error_lines"`
}

// rollAgent restarts agent name as a deploy does: SIGTERM with attempts
// in flight, wait for the exit and for its partitions to be owned and
// delivered by the others, start it again with its data, wait until it
// is healthy and owns partitions, and see the load delivered after that.
func (r *faultRun) rollAgent(t *testing.T, name string) rollStep {
	t.Helper()
	owners := r.c.waitOwned(t, 30*time.Second, nil)
	s := rollStep{Agent: name, Partitions: partitionsOf(owners, name)}
	p := r.c.agents[name]

	restore := r.holdAttempts(t, s.Partitions, holdAtStop)
	stopAt := time.Now()
	p.stop(60 * time.Second)
	exitAt := time.Now()
	s.ExitS = seconds(exitAt.Sub(stopAt))
	restore()
	moved := r.c.waitOwned(t, 60*time.Second, []string{name})
	s.MovedS = seconds(time.Since(stopAt))
	if busy := r.deliveringPartitions(s.Partitions); len(busy) > 0 {
		firsts := r.waitFirstDeliveredElsewhere(t, busy, name, stopAt, 60*time.Second)
		for _, at := range firsts {
			s.StalledS = max(s.StalledS, seconds(at.Sub(stopAt)))
		}
	}
	t.Logf("%s: SIGTERM, exited after %.1fs; its partitions %v owned by others after %.1fs (%v), delivered by them after %.1fs",
		name, s.ExitS, s.Partitions, s.MovedS, moved, s.StalledS)
	r.checkHandedOff(t, name, stopAt, exitAt)

	startAt := time.Now()
	p.start()
	p.waitHealthy(90 * time.Second)
	s.HealthyS = seconds(time.Since(startAt))
	r.waitRejoined(t, name, rollRejoinDelay+60*time.Second)
	s.OwningS = seconds(time.Since(startAt))
	s.FailedPublishes = len(r.traffic.Failures(stopAt, time.Now()))
	t.Logf("%s: started again, healthy after %.1fs, owns partitions after %.1fs; %d failed publish attempts since its SIGTERM",
		name, s.HealthyS, s.OwningS, s.FailedPublishes)
	// The load goes on being delivered with the agent back.
	r.waitFlowing(t, r.delivered()+250)
	return s
}

// holdAttempts makes the partners of the destinations in parts hold
// their answers for d, and returns once one of them holds a request (an
// attempt is in flight); the returned func gives them their own delay
// back.
func (r *faultRun) holdAttempts(t *testing.T, parts []uint32, d time.Duration) (restore func()) {
	t.Helper()
	from := time.Now()
	own := map[string]time.Duration{}
	for dest, p := range r.partners {
		if dest != r.expiring && slices.Contains(parts, uint32(lanes.Partition(dest, r.c.partitions))) {
			own[dest] = p.Delay()
			p.SetDelay(d)
		}
	}
	restore = func() {
		for dest, d := range own {
			r.partners[dest].SetDelay(d)
		}
	}
	if len(own) == 0 {
		return restore
	}
	poll.True(t, fmt.Sprintf("a request held by a partner of partitions %v", parts), 30*time.Second, func() bool {
		for dest := range own {
			reqs := r.partners[dest].Requests()
			if len(reqs) > 0 && reqs[len(reqs)-1].At.After(from) {
				return true
			}
		}
		return false
	})
	return restore
}

// checkHandedOff fails the test when agent name's stop since stopAt (it
// exited at exitAt) did not hand its partitions off itself: it did not
// tell the control plane it was leaving, it lost their leases while it
// drained, or the control plane ended its session (its locks then freed
// only after the lock-delay, its attempts' outcomes lost).
func (r *faultRun) checkHandedOff(t *testing.T, name string, stopAt, exitAt time.Time) {
	t.Helper()
	log := r.logOf(t, name, stopAt)
	if strings.Contains(log, "partition ownership lost") {
		t.Errorf("%s lost its partitions' leases while it drained after SIGTERM:\n%s", name, grepLines(log, "ownership lost"))
	}
	if !strings.Contains(log, "told the control plane this agent is leaving") {
		t.Errorf("%s did not tell the control plane it was leaving:\n%s", name, grepLines(log, "leaving"))
	}
	// A control plane destroys the session of an agent whose Watch ended
	// a second (its dead-after) later: one that missed the leaving report
	// may do so after a short drain's exit. So the logs are read until
	// checkGoneFor after the exit, failing at the first destroy.
	gone := regexp.MustCompile(`agent gone: destroying.* agent=` + name + `\b`)
	for {
		for _, cp := range r.c.cps {
			if log := logSince(t, cp.LogPath, stopAt); gone.MatchString(log) {
				t.Errorf("the control plane ended %s's session after its SIGTERM:\n%s", name, grepLines(log, "agent gone"))
				return
			}
		}
		if time.Since(exitAt) > checkGoneFor {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkGoneFor is how long after a stopped agent's exit checkHandedOff
// looks for its session destroyed by a control plane: past the control
// plane's dead-after (1 s) with room for a loaded machine.
const checkGoneFor = 3 * time.Second

// grepLines are the lines of log that hold s.
func grepLines(log, s string) string {
	var out []string
	for line := range strings.Lines(log) {
		if strings.Contains(line, s) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "\n")
}

// logFailures logs the failed publish attempts, counted by the agent
// they went to and their error, first and last seen.
func (r *faultRun) logFailures(t *testing.T, failures []traffic.Failure) {
	t.Helper()
	type seen struct {
		n           int
		first, last time.Time
	}
	by := map[string]*seen{}
	var keys []string
	for _, f := range failures {
		k := fmt.Sprintf("%s: %v", r.c.names[f.Client], f.Err)
		if by[k] == nil {
			by[k] = &seen{first: f.At}
			keys = append(keys, k)
		}
		by[k].n++
		by[k].last = f.At
	}
	for _, k := range keys {
		s := by[k]
		t.Logf("failed publish attempts: %d× %s (%s–%s)", s.n, k, s.first.Format("15:04:05.000"), s.last.Format("15:04:05.000"))
	}
}

// errorLines logs the agents' ERROR lines since from and counts them.
func (r *faultRun) errorLines(t *testing.T, from time.Time) int {
	t.Helper()
	n := 0
	for _, name := range r.c.names {
		for line := range strings.Lines(r.logOf(t, name, from)) {
			if strings.Contains(line, " level=ERROR ") {
				n++
				t.Logf("%s ERROR: %s", name, strings.TrimSpace(line[:min(len(line), 600)]))
			}
		}
	}
	return n
}

func seconds(d time.Duration) float64 { return d.Round(100 * time.Millisecond).Seconds() }
