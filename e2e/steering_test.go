package e2e

// Issue 4 acceptance: live steering — pause/resume, limits file plus audited
// overrides, customer weights, a malformed limits file refused — against
// `rivora dev` and against `rivora controlplane` + `rivora agent`.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

func TestSteeringPauseHoldsEveryAttempt(t *testing.T) {
	d := startDev(t, devOptions{})
	pauseScenario(t, devRig(d), "held")
}

func TestSteeringLimitsFileAndOverride(t *testing.T) {
	limits := filepath.Join(t.TempDir(), "limits.yaml")
	writeFileAtomic(t, limits, limitsYAML("paced", 4, 1))
	d := startDev(t, devOptions{Args: []string{"--limits", limits}})
	limitsScenario(t, devRig(d), limits, "paced")
}

// The same scenarios with the control plane and the agent as two
// processes; the agent is listed with every partition.
func TestCellPauseAndLimits(t *testing.T) {
	limits := filepath.Join(t.TempDir(), "limits.yaml")
	writeFileAtomic(t, limits, limitsYAML("cellpaced", 4, 1))
	c := startCell(t, cellOptions{Partitions: 4, Limits: limits, AgentName: "edge-1"})
	r := c.rig()

	type agentJSON struct {
		Name           string   `json:"name"`
		Address        string   `json:"address"`
		Healthy        bool     `json:"healthy"`
		AppliedVersion uint64   `json:"appliedVersion"`
		Partitions     []uint32 `json:"partitions"`
	}
	var a agentJSON
	var out string
	// The agent reports the partitions it owns once it has opened them.
	poll.True(t, "agents list shows edge-1 healthy, owning partitions 0-3", 10*time.Second, func() bool {
		out = r.ctl(t, "agents", "list", "-o", "json")
		var agents []agentJSON
		if err := json.Unmarshal([]byte(out), &agents); err != nil {
			t.Fatalf("agents list -o json: %v\n%s", err, out)
		}
		if len(agents) != 1 {
			t.Fatalf("agents list -o json lists %d agents, want 1:\n%s", len(agents), out)
		}
		a = agents[0]
		slices.Sort(a.Partitions)
		return a.Name == "edge-1" && a.Healthy && slices.Equal(a.Partitions, []uint32{0, 1, 2, 3})
	})
	if a.Address != c.agent.URL() {
		t.Errorf("agents list: address %q, want %q", a.Address, c.agent.URL())
	}

	t.Run("Pause", func(t *testing.T) { pauseScenario(t, r, "cellheld") })
	t.Run("Limits", func(t *testing.T) { limitsScenario(t, r, limits, "cellpaced") })

}

// pauseScenario: heads failing (503) with retries scheduled; pause --wait;
// the partner recovers and more events are published; not one attempt
// reaches it in 5 s; resume; every event, including those accepted while
// paused, is delivered in lane order.
func pauseScenario(t *testing.T, r *rig, dest string) {
	p := newPartner(t)
	p.SetStatus(http.StatusServiceUnavailable)
	r.createDestination(t, dest, p, &rivorav1.Limits{MaxAttempts: 1000})
	c := r.SDK()
	ctx := ctxTimeout(t, 2*time.Minute)
	pub := newPublished()
	lanes := lanesNamed("acct", 10)
	if err := publishRounds(ctx, c, dest, "cust", lanes, 3, pub); err != nil {
		t.Fatal(err)
	}
	// Every lane's head failed at least twice: its retry is scheduled.
	poll.True(t, "every lane head attempted twice", 20*time.Second, func() bool {
		for _, lane := range lanes {
			if p.Sent(pub.ByLane["cust/"+lane][0]) < 2 {
				return false
			}
		}
		return true
	})
	if n := p.Delivered(); n != 0 {
		t.Fatalf("%d events delivered by a partner answering 503", n)
	}

	start := time.Now()
	out := r.ctl(t, "destinations", "pause", dest, "--reason", "e2e incident", "--wait")
	t.Logf("pause --wait: %s (%s)", strings.TrimSpace(out), time.Since(start).Round(time.Millisecond))
	if !strings.Contains(out, "applied by") {
		t.Errorf("pause --wait printed %q, want the wait report", out)
	}
	held := p.Count()
	pausedAt := time.Now()

	p.SetHealthy()
	if err := publishRounds(ctx, c, dest, "cust", lanes, 2, pub); err != nil {
		t.Fatalf("publish while paused: %v", err)
	}
	got, err := r.Admin().GetDestination(ctx, connect.NewRequest(&rivorav1.GetDestinationRequest{Id: dest}))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Msg.GetDestination().GetPaused() {
		t.Errorf("GetDestination: paused = false after pause --wait")
	}
	// Deliberate hold: zero attempts for 5 s while paused.
	for time.Since(pausedAt) < 5*time.Second {
		if n := p.Count(); n != held {
			t.Fatalf("%d attempts reached the paused destination %s after pause --wait returned", n-held, time.Since(pausedAt).Round(time.Millisecond))
		}
		if err := r.died(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := p.Count(); n != held {
		t.Fatalf("%d attempts reached the paused destination within 5 s", n-held)
	}

	resumed := time.Now()
	r.ctl(t, "destinations", "resume", dest, "--wait")
	ids := pub.all()
	if len(ids) != 50 {
		t.Fatalf("%d events acked, want 50", len(ids))
	}
	p.WaitDelivered(t, ids, 30*time.Second)
	t.Logf("after resume: 50 events delivered in %s", time.Since(resumed).Round(time.Millisecond))
	rep := checkLaneOrder(t, p, pub.ByLane, pub.Payloads, nil)
	if rep.Events != 50 || rep.Lanes != 10 {
		t.Errorf("checked %d events over %d lanes, want 50 over 10", rep.Events, rep.Lanes)
	}

	entries := r.auditJSON(t, "--destination", dest)
	for _, action := range []string{"destination.create", "destination.pause", "destination.resume"} {
		if findAudit(entries, action, dest) == nil {
			t.Errorf("audit for %s has no %s entry: %v", dest, action, auditActions(entries))
		}
	}
	if e := findAudit(entries, "destination.pause", dest); e != nil && e.GetReason() != "e2e incident" {
		t.Errorf("audit destination.pause reason %q, want %q", e.GetReason(), "e2e incident")
	}
}

func limitsYAML(dest string, rate float64, burst int) string {
	return fmt.Sprintf(`# reviewed limits
defaults:
  max_attempts: 20
  window: 1h
destinations:
  %s:
    rate_per_second: %g
    burst: %d
`, dest, rate, burst)
}

// limitsScenario: the file holds dest at 4/s; editing it to 40/s raises the
// observed rate within 3 s; an override to 10/s lowers it within 2.5 s; all
// three show in the audit log.
func limitsScenario(t *testing.T, r *rig, limitsPath, dest string) {
	p := newPartner(t)
	r.createDestination(t, dest, p, nil)
	// Events still pending when the scenario ends must not hit the closed
	// partner while later checks run (cleanups run last-in, first-out).
	t.Cleanup(func() { r.ctl(t, "destinations", "pause", dest, "--reason", "the scenario ended") })
	lim := r.limitsJSON(t, dest)
	if lim.GetEffective().GetRatePerSecond() != 4 || lim.GetEffective().GetBurst() != 1 || lim.GetSources()["rate_per_second"].GetSource() != "file" {
		t.Fatalf("limits get %s: effective %v, sources %v; want 4/s burst 1 from the file", dest, lim.GetEffective(), lim.GetSources())
	}
	ctx := ctxTimeout(t, 2*time.Minute)
	pub := newPublished()
	if err := publishRounds(ctx, r.SDK(), dest, "cust", lanesNamed("k", 60), 10, pub); err != nil {
		t.Fatal(err)
	}
	poll.True(t, "first delivery", 10*time.Second, func() bool { return p.Delivered() > 0 })
	first := firstAt(p.Requests(), nil)

	// 1. 4/s from the file (timed observation window of 4 s).
	time.Sleep(time.Until(first.Add(4 * time.Second)))
	n := count(p.Requests(), first, first.Add(4*time.Second), nil)
	t.Logf("at 4/s (file): %d requests in 4 s", n)
	if float64(n)/4 > 7 {
		t.Errorf("observed %.2f/s with the file at 4/s, want ≤ 7/s", float64(n)/4)
	}
	if n < 8 {
		t.Errorf("observed only %d requests in 4 s at 4/s: not flowing", n)
	}

	// 2. Edit the file to 40/s.
	edit := time.Now()
	writeFileAtomic(t, limitsPath, limitsYAML(dest, 40, 5))
	rise := waitRate(t, p, edit, 3*time.Second, func(n int) bool { return n >= 20 })
	t.Logf("file edited to 40/s: trailing-second rate ≥ 20 after %s", rise.Sub(edit).Round(time.Millisecond))
	// It stays up for 2 s (timed observation window).
	time.Sleep(time.Until(rise.Add(2 * time.Second)))
	if up := count(p.Requests(), rise, rise.Add(2*time.Second), nil); up < 40 {
		t.Errorf("with the file at 40/s: %d requests in 2 s, want ≥ 40 (20/s)", up)
	} else {
		t.Logf("with the file at 40/s: %.1f/s over 2 s", float64(up)/2)
	}

	// 3. Override to 10/s.
	set := time.Now()
	out := r.ctl(t, "limits", "set", dest, "--rate", "10", "--reason", "test")
	drop := waitRate(t, p, set.Add(time.Second), 1500*time.Millisecond, func(n int) bool { return n <= 13 })
	t.Logf("limits set --rate 10: trailing-second rate ≤ 13 after %s\n%s", drop.Sub(set).Round(time.Millisecond), out)
	// It holds for 2 more seconds (timed observation window).
	time.Sleep(time.Until(drop.Add(2 * time.Second)))
	held := count(p.Requests(), drop, drop.Add(2*time.Second), nil)
	if held > 26 {
		t.Errorf("after the override to 10/s: %d requests in 2 s, want ≤ 26", held)
	}
	t.Logf("per second since the first delivery:%s", perSecond(p.Requests(), first, int(time.Since(first).Seconds())))

	// Health comes from the agent (through the control plane in a cell):
	// the override is what the agent's budget runs. Asked while the
	// partner is still up.
	h, err := healthJSON(r.adminURL, dest)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("destinations health %s: state %s, rate %.4g of %.4g configured", dest, h.GetState(), h.GetCurrentRate(), h.GetConfiguredRate())
	if h.GetConfiguredRate() != 10 || h.GetCurrentRate() != 10 || h.GetState() != "healthy" {
		t.Errorf("destinations health %s: state %s, rate %v of %v configured; want healthy at the 10/s override", dest, h.GetState(), h.GetCurrentRate(), h.GetConfiguredRate())
	}

	lim = r.limitsJSON(t, dest)
	src := lim.GetSources()["rate_per_second"]
	if lim.GetEffective().GetRatePerSecond() != 10 || src.GetSource() != "override" || src.GetReason() != "test" || lim.GetFile().GetRatePerSecond() != 40 {
		t.Errorf("limits get after the override: effective %v, rate source %v, file %v; want 10/s from an override (reason test), file 40/s",
			lim.GetEffective(), src, lim.GetFile())
	}

	entries := r.auditJSON(t)
	t.Logf("audit: %v", auditActions(entries))
	if findAudit(entries, "destination.create", dest) == nil {
		t.Errorf("audit has no destination.create for %s: %v", dest, auditActions(entries))
	}
	if e := findAudit(entries, "limits.reload", ""); e == nil {
		t.Errorf("audit has no limits.reload entry after the file was edited: %v", auditActions(entries))
	}
	if e := findAudit(entries, "limits.override", dest); e == nil {
		t.Errorf("audit has no limits.override entry for %s: %v", dest, auditActions(entries))
	} else if e.GetReason() != "test" || e.GetAuthor() != "bootstrap" {
		t.Errorf("audit limits.override: reason %q author %q, want test / bootstrap (the token's name)", e.GetReason(), e.GetAuthor())
	}
	if errs := checkLanePrefix(p, pub.ByLane); len(errs) > 0 {
		t.Errorf("lane order violations: %v", errs[:min(len(errs), 5)])
	}
}

// waitRate polls until ok(requests in the trailing second) holds, looking
// only at trailing seconds that end after from; it fails the test when that
// has not happened within limit of from.
func waitRate(t *testing.T, p *partner.Partner, from time.Time, limit time.Duration, ok func(int) bool) time.Time {
	t.Helper()
	var last int
	var reached time.Time
	err := poll.Check(time.Until(from.Add(limit)), 25*time.Millisecond, func() error {
		now := time.Now()
		if !now.After(from) {
			return errNotYet
		}
		if last = count(p.Requests(), now.Add(-time.Second), now, nil); !ok(last) {
			return errNotYet
		}
		reached = now
		return nil
	})
	if err != nil {
		t.Fatalf("rate not reached within %s: last trailing-second count %d; per second:%s", limit, last,
			perSecond(p.Requests(), from.Add(-3*time.Second), 3+int(limit.Seconds())+1))
	}
	return reached
}

// Weights gold=5, bronze=1 on a 30/s destination: gold gets 70–95% of the
// deliveries; flipped live, bronze gets 70–95% within 5 s.
func TestSteeringWeightsShareAndFlip(t *testing.T) {
	d := startDev(t, devOptions{})
	r := devRig(d)
	p := newPartner(t)
	const dest = "tiers"
	r.createDestination(t, dest, p, &rivorav1.Limits{RatePerSecond: 30, Burst: 5})
	r.ctl(t, "priority", "set", dest, "--customer", "gold", "--weight", "5", "--wait")
	r.ctl(t, "priority", "set", dest, "--customer", "bronze", "--weight", "1", "--wait")

	ctx := ctxTimeout(t, 2*time.Minute)
	gold, bronze := newPublished(), newPublished()
	errc := make(chan error, 2)
	go func() { errc <- publishRounds(ctx, r.SDK(), dest, "gold", lanesNamed("g", 50), 10, gold) }()
	go func() { errc <- publishRounds(ctx, r.SDK(), dest, "bronze", lanesNamed("b", 50), 10, bronze) }()
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	pubDone := time.Now()

	share := func(from, to time.Time, c string) (float64, int) {
		reqs := p.Requests()
		all := count(reqs, from, to, is2xx)
		return float64(count(reqs, from, to, customerOK(c))) / float64(max(all, 1)), all
	}
	// Window: 1–5 s after both backlogs were published (timed window).
	from, to := pubDone.Add(time.Second), pubDone.Add(5*time.Second)
	time.Sleep(time.Until(to))
	g, n := share(from, to, "gold")
	t.Logf("gold=5 bronze=1: gold got %.1f%% of %d deliveries in 4 s", 100*g, n)
	if g < 0.70 || g > 0.95 {
		t.Errorf("gold=5 bronze=1: gold got %.1f%% of %d deliveries, want 70–95%%", 100*g, n)
	}
	if n < 100 {
		t.Errorf("only %d deliveries in 4 s on a 30/s destination", n)
	}

	flip := time.Now()
	r.ctl(t, "priority", "set", dest, "--customer", "bronze", "--weight", "5")
	r.ctl(t, "priority", "set", dest, "--customer", "gold", "--weight", "1")
	// Within 5 s the trailing second is bronze's.
	var flipped time.Time
	for {
		now := time.Now()
		if now.Sub(flip) >= time.Second {
			if b, _ := share(now.Add(-time.Second), now, "bronze"); b >= 0.70 && b <= 0.95 {
				flipped = now
				break
			}
		}
		if now.Sub(flip) > 5*time.Second {
			b, n := share(now.Add(-time.Second), now, "bronze")
			t.Fatalf("5 s after flipping the weights bronze has %.1f%% of the last second's %d deliveries, want 70–95%%", 100*b, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("flipped: bronze at 70–95%% of the trailing second %s after the change", flipped.Sub(flip).Round(time.Millisecond))
	// And it stays flipped for the next 3 s (timed window).
	time.Sleep(time.Until(flipped.Add(3 * time.Second)))
	b, n := share(flipped, flipped.Add(3*time.Second), "bronze")
	t.Logf("gold=1 bronze=5: bronze got %.1f%% of %d deliveries in 3 s", 100*b, n)
	if b < 0.70 || b > 0.95 {
		t.Errorf("gold=1 bronze=5: bronze got %.1f%% of %d deliveries, want 70–95%%", 100*b, n)
	}
	both := newPublished()
	for _, pb := range []*published{gold, bronze} {
		for lane, ids := range pb.ByLane {
			both.ByLane[lane] = ids
		}
	}
	if errs := checkLanePrefix(p, both.ByLane); len(errs) > 0 {
		t.Errorf("lane order violations: %v", errs[:min(len(errs), 5)])
	}
	entries := r.auditJSON(t, "--destination", dest)
	sets := 0
	for _, e := range entries {
		if e.GetAction() == "priority.set" {
			sets++
		}
	}
	if sets != 4 {
		t.Errorf("audit lists %d priority.set entries for %s, want 4: %v", sets, dest, auditActions(entries))
	}
}

// A malformed limits file is refused: the control plane logs the file and
// line, the audit log shows limits.reject, and the effective limits and the
// config version stay as they were; a corrected file is then applied.
func TestSteeringMalformedLimitsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	limits := filepath.Join(dir, "limits.yaml")
	writeFileAtomic(t, limits, limitsYAML("strict", 12, 3))
	d := startDev(t, devOptions{Args: []string{"--limits", limits}})
	r := devRig(d)
	r.createDestination(t, "strict", newPartner(t), nil)
	before := r.limitsJSON(t, "strict")
	if before.GetEffective().GetRatePerSecond() != 12 || before.GetEffective().GetBurst() != 3 {
		t.Fatalf("limits get strict: %v, want 12/s burst 3 from the file", before.GetEffective())
	}
	version := r.configVersion(t)

	bad := strings.Replace(limitsYAML("strict", 12, 3), "rate_per_second: 12", "rate_per_second: fast", 1)
	badLine := 0
	for i, l := range strings.Split(bad, "\n") {
		if strings.Contains(l, "fast") {
			badLine = i + 1
		}
	}
	writeFileAtomic(t, limits, bad)
	wantLoc := fmt.Sprintf("limits.yaml:%d", badLine)
	var reject *rivorav1.AuditEntry
	poll.True(t, "a limits.reject audit entry", 5*time.Second, func() bool {
		reject = findAudit(r.auditJSON(t), "limits.reject", "")
		return reject != nil
	})
	t.Logf("audit limits.reject: %s", reject.GetDetail())
	if !strings.Contains(reject.GetDetail(), wantLoc) {
		t.Errorf("limits.reject detail %q does not name %s", reject.GetDetail(), wantLoc)
	}
	var logLine string
	poll.True(t, "the control plane logging "+wantLoc, 5*time.Second, func() bool {
		b, _ := os.ReadFile(r.cpLog)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, wantLoc) {
				logLine = l
				return true
			}
		}
		return false
	})
	t.Logf("log: %s", logLine)

	after := r.limitsJSON(t, "strict")
	if after.GetEffective().GetRatePerSecond() != 12 || after.GetEffective().GetBurst() != 3 || after.GetSources()["rate_per_second"].GetSource() != "file" {
		t.Errorf("limits get strict after the bad file: %v (sources %v), want 12/s burst 3 from the file", after.GetEffective(), after.GetSources())
	}
	if v := r.configVersion(t); v != version {
		t.Errorf("config version moved from %d to %d on a refused file", version, v)
	}
	for _, e := range r.auditJSON(t) {
		if e.GetAction() == "limits.reload" {
			t.Errorf("audit shows a limits.reload after only a refused edit: %v", e)
		}
	}

	// The watcher still works: a corrected file is applied.
	writeFileAtomic(t, limits, limitsYAML("strict", 15, 3))
	poll.True(t, "the corrected file applied", 5*time.Second, func() bool {
		resp, err := r.Admin().GetLimits(context.Background(), connect.NewRequest(&rivorav1.GetLimitsRequest{DestinationId: "strict"}))
		return err == nil && resp.Msg.GetEffective().GetRatePerSecond() == 15
	})
}
