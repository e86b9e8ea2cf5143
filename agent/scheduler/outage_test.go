package scheduler

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/agent/limits"
	"github.com/rivora/rivora/lanes"
)

// An outage, with the fake clock: a destination whose partner is down.

var outageLimits = limits.Limits{RatePerSecond: 50, Burst: 50, MaxInFlight: 100}

// failHeld reports a's failure the way the owner does while the
// destination is not otherwise healthy: the destination's fault, no
// attempt charged, held until windowEnd at the latest.
func failHeld(t *testing.T, s *Scheduler, a *Attempt, windowEnd time.Time) {
	t.Helper()
	now := s.clock.Now()
	s.Observe(a, 503, true, 0, "HTTP 503")
	if s.OtherwiseHealthy(a) {
		t.Fatalf("%s failed at +%s with no 2xx from its destination: otherwise healthy, want not", a.Lane.ID, now.Sub(t0))
	}
	h := a.Head
	h.HeldByDestination, h.LastStatus, h.LastAttemptAt = true, 503, now
	// As retry.Policy.Hold: never past the window end.
	h.NotBefore, h.WindowEnd = now.Add(time.Second), windowEnd
	if h.NotBefore.After(windowEnd) {
		h.NotBefore = windowEnd
	}
	s.Retry(a, h)
}

// outage fails every attempt handed out, every 100 ms of fake time, until
// the destination is parked and every lane is held (waiting); it returns
// the attempts made. windowEnd gives each lane's window end.
func outage(t *testing.T, s *Scheduler, dest string, windowEnd func(lanes.ID) time.Time) []*Attempt {
	t.Helper()
	clk := s.clock.(interface{ Advance(time.Duration) })
	var made []*Attempt
	for range 600 {
		for {
			a, _ := step(s)
			if a == nil {
				break
			}
			made = append(made, a)
			failHeld(t, s, a, windowEnd(a.Lane.ID))
		}
		snap := s.Snapshot(dest)[0]
		if snap.State == budget.Parked && !slices.ContainsFunc(snap.Customers, func(c CustomerSnapshot) bool { return c.DueLanes > 0 }) && snap.InFlight == 0 {
			checkInvariants(t, s)
			return made
		}
		clk.Advance(100 * time.Millisecond)
	}
	t.Fatalf("destination %s never parked with every lane held", dest)
	return nil
}

func laneIDs(dest string, n int) []lanes.ID {
	out := make([]lanes.ID, n)
	for i := range out {
		out[i] = lid(dest, "c", string(rune('a'+i)))
	}
	return out
}

// While parked, held lanes are not attempted when their own retry time
// comes: one probe a second, from the lane whose window closes first, and
// no attempt is charged (the owner asks OtherwiseHealthy, false
// throughout). The probe's success releases every held lane at once,
// oldest head first.
func TestParkedDestinationHoldsLanesAndRecoveryReleasesInOrder(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d", 0, outageLimits)
	ids := laneIDs("d", 4)
	for i, id := range ids {
		appendTo(s, 0, id, ev(uint64(i+1)), ev(uint64(i+11)))
	}
	end := func(id lanes.ID) time.Time { return t0.Add(time.Hour + time.Duration(id.Key[0]-'a')*time.Second) }
	outage(t, s, "d", end)

	// 10 s parked: exactly one probe a second, always lane a (its window
	// closes first), each taken early (its head's retry time has long
	// passed, but it is held).
	probes := 0
	for range 100 {
		clk.Advance(100 * time.Millisecond)
		a, _ := step(s)
		if a == nil {
			continue
		}
		probes++
		if !a.EarlyProbe || a.Lane.ID != ids[0] || a.Number != 1 {
			t.Fatalf("parked: attempt %s number %d early %v, want an early probe of %s, attempt 1 (none charged)", a.Lane.ID, a.Number, a.EarlyProbe, ids[0])
		}
		failHeld(t, s, a, end(a.Lane.ID))
	}
	if probes < 9 || probes > 11 {
		t.Fatalf("parked for 10 s: %d probes, want one a second", probes)
	}

	// Recovery: the next probe answers 2xx.
	clk.Advance(time.Second)
	probe := mustPick(t, s)
	s.Observe(probe, 200, false, 0, "")
	s.Succeeded(probe)
	checkInvariants(t, s)
	if snap := s.Snapshot("d")[0]; snap.Customers[0].DueLanes != 4 || snap.Customers[0].WaitingLanes != 0 {
		t.Fatalf("after recovery: %+v, want every lane due at once", snap.Customers[0])
	}
	var order []uint64
	for range 200 {
		if a, _ := step(s); a != nil {
			order = append(order, a.Entry.Seq)
			s.Succeeded(a)
		}
		if len(order) == 4 {
			break
		}
		clk.Advance(10 * time.Millisecond)
	}
	if want := []uint64{2, 3, 4, 11}; !equalSeqs(order, want) {
		t.Fatalf("after recovery the lanes went in order %v, want %v (held heads oldest first, then the probe lane's next)", order, want)
	}
}

func equalSeqs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A held lane whose window closes while its destination is parked is
// handed out at its window end (not before), without a token, marked
// Expired, even though no probe succeeded; a paused destination keeps it
// until resumed. The event behind it, whose window closed too, follows at
// once.
func TestWindowClosesWhileParked(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d", 0, outageLimits)
	ids := laneIDs("d", 3)
	for i, id := range ids {
		appendTo(s, 0, id, ev(uint64(i+1)), ev(uint64(i+11)))
	}
	ends := map[lanes.ID]time.Time{}
	for i, id := range ids {
		ends[id] = t0.Add(40*time.Second + time.Duration(i)*time.Millisecond)
	}
	end := func(id lanes.ID) time.Time { return ends[id] }
	outage(t, s, "d", end)

	// Probes (failing) until just before the first window end.
	for clk.Now().Before(ends[ids[0]].Add(-100 * time.Millisecond)) {
		clk.Advance(100 * time.Millisecond)
		if a, _ := step(s); a != nil {
			if a.Expired {
				t.Fatalf("lane %s expired at +%s, before its window end +%s", a.Lane.ID, clk.Now().Sub(t0), ends[a.Lane.ID].Sub(t0))
			}
			failHeld(t, s, a, end(a.Lane.ID))
		}
	}
	s.SetPaused("d", 0, true)
	clk.Advance(time.Second)
	if a, _ := step(s); a != nil {
		t.Fatalf("paused: attempt %s (expired %v) handed out", a.Lane.ID, a.Expired)
	}
	s.SetPaused("d", 0, false)
	var got []lanes.ID
	for {
		a, _ := step(s)
		if a == nil {
			break
		}
		if !a.Expired || a.EarlyProbe {
			t.Fatalf("after the window end: attempt %s expired %v early %v, want expired", a.Lane.ID, a.Expired, a.EarlyProbe)
		}
		got = append(got, a.Lane.ID)
		s.Dead(a)
	}
	if want := append(ids, ids...); !slices.Equal(got, want) {
		t.Fatalf("expired at once, without tokens: %v, want %v (heads in window order, then the events behind them)", got, want)
	}
	checkInvariants(t, s)
	if n := s.Pending("d"); n != 0 {
		t.Fatalf("pending after the expired heads died: %d", n)
	}
}

// OtherwiseHealthy, the rule that decides whether a failure that is the
// destination's counts against the event.
func TestOtherwiseHealthy(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d", 0, outageLimits)
	x, y, z := lid("d", "c", "x"), lid("d", "c", "y"), lid("d", "c", "z")
	appendTo(s, 0, x, ev(1))
	appendTo(s, 0, y, ev(2), ev(3), ev(4), ev(5))
	appendTo(s, 0, z, ev(6))
	byLane := func() map[lanes.ID]*Attempt {
		out := map[lanes.ID]*Attempt{}
		for {
			a, _ := step(s)
			if a == nil {
				return out
			}
			out[a.Lane.ID] = a
		}
	}
	retry := func(a *Attempt) {
		h := a.Head
		h.LastAttemptAt, h.NotBefore, h.HeldByDestination = clk.Now(), clk.Now(), true
		s.Retry(a, h)
	}

	// First attempts: x's 503 arrives before y's 2xx: no evidence the
	// destination works.
	as := byLane()
	clk.Advance(10 * time.Millisecond)
	s.Observe(as[x], 503, true, 0, "HTTP 503")
	if s.OtherwiseHealthy(as[x]) {
		t.Fatal("x's first 503, no 2xx yet: otherwise healthy, want not")
	}
	retry(as[x])
	clk.Advance(10 * time.Millisecond)
	s.Observe(as[y], 200, false, 0, "")
	s.Succeeded(as[y])
	s.Observe(as[z], 200, false, 0, "")
	s.Succeeded(as[z])

	// x again, after y's 2xx and no other lane's failure: one payload the
	// partner refuses while it accepts the rest.
	clk.Advance(time.Second)
	as = byLane()
	clk.Advance(10 * time.Millisecond)
	s.Observe(as[x], 503, true, 0, "HTTP 503")
	if !s.OtherwiseHealthy(as[x]) {
		t.Fatal("x's 503 after y's 2xx, no other lane failing: not otherwise healthy, want healthy (the attempt counts)")
	}
	retry(as[x])
	s.Observe(as[y], 200, false, 0, "")
	s.Succeeded(as[y])

	// x again, but y also got a 429 since x's previous attempt: the
	// destination throttles more than this payload.
	clk.Advance(time.Second)
	as = byLane()
	clk.Advance(10 * time.Millisecond)
	s.Observe(as[y], 429, true, 0, "HTTP 429")
	retry(as[y])
	s.Observe(as[x], 503, true, 0, "HTTP 503")
	if s.OtherwiseHealthy(as[x]) {
		t.Fatal("x's 503 while y got a 429: otherwise healthy, want not")
	}
	retry(as[x])

	// x again with only its own failures since, but no 2xx since its
	// previous attempt: down, or no evidence otherwise.
	clk.Advance(time.Second)
	as = byLane()
	s.Observe(as[x], 503, true, 0, "HTTP 503")
	if s.OtherwiseHealthy(as[x]) {
		t.Fatal("x's 503 with no 2xx since its previous attempt: otherwise healthy, want not")
	}
	checkInvariants(t, s)
}

// A held head that is due but starved of tokens (a degraded destination
// at its floor) also dies on time: at its window end it is handed out as
// expired, without a token; not before.
func TestWindowClosesWhileDueWithoutTokens(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d", 0, limits.Limits{RatePerSecond: 1000, Burst: 1000, MaxInFlight: 100})
	ids := laneIDs("d", 5)
	for i, id := range ids {
		appendTo(s, 0, id, ev(uint64(i+1)))
	}
	end := t0.Add(10 * time.Second)
	fail := func(a *Attempt) {
		s.Observe(a, 503, true, 0, "HTTP 503")
		h := a.Head
		h.HeldByDestination, h.LastStatus, h.LastAttemptAt = true, 503, clk.Now()
		h.NotBefore, h.WindowEnd = clk.Now(), end // due again at once
		s.Retry(a, h)
	}
	for range ids {
		fail(mustPick(t, s))
	}
	s.SetLimits("d", 0, limits.Limits{RatePerSecond: 0.001, Burst: 1, MaxInFlight: 100})
	for {
		a, _ := step(s)
		if a == nil {
			break
		}
		fail(a)
	}
	if snap := s.Snapshot("d")[0]; snap.Customers[0].DueLanes != 5 {
		t.Fatalf("setup: %+v, want 5 due lanes starved of tokens", snap.Customers[0])
	}
	clk.Advance(10*time.Second - time.Millisecond)
	if a, wait := step(s); a != nil || wait != time.Millisecond {
		t.Fatalf("just before the window end: attempt %v, wait %s; want none, and a wake-up at the window end", a, wait)
	}
	clk.Advance(time.Millisecond)
	n := 0
	for {
		a, _ := step(s)
		if a == nil {
			break
		}
		if !a.Expired {
			t.Fatalf("at the window end: attempt %s not expired", a.Lane.ID)
		}
		n++
		s.Dead(a)
		checkInvariants(t, s)
	}
	if n != 5 || s.Pending("d") != 0 {
		t.Fatalf("at the window end %d heads expired (pending %d), want all 5 at once", n, s.Pending("d"))
	}
}

// holdBehindRetryAfter hands out the head of every lane of ids once and
// answers each with a 429 and an hour's Retry-After: the destination is
// held, each head due again a second later by its own back-off.
func holdBehindRetryAfter(t *testing.T, s *Scheduler, ids []lanes.ID) {
	t.Helper()
	var first []*Attempt
	for range ids {
		a, _ := step(s)
		if a == nil {
			t.Fatal("no attempt handed out")
		}
		first = append(first, a)
	}
	for _, a := range first {
		now := s.clock.Now()
		s.Observe(a, 429, true, time.Hour, "HTTP 429")
		h := a.Head
		h.HeldByDestination, h.LastStatus, h.LastAttemptAt = true, 429, now
		h.NotBefore, h.WindowEnd = now.Add(time.Second), now.Add(72*time.Hour)
		s.Retry(a, h)
	}
}

// A pause and a resume close together may reach an agent as one config
// change in which the destination never looks paused: the resume's time
// (its config's latest pause interval's end) still ends the hold. The
// first resume time noted only records it (a restart is no resume).
func TestAResumeSeenOnlyInItsTimeEndsAHold(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d", 0, outageLimits)
	s.NoteResume("d", 0, t0.Add(-time.Hour)) // the config's, at start
	ids := laneIDs("d", 2)
	for i, id := range ids {
		appendTo(s, 0, id, ev(uint64(i+1)))
	}
	holdBehindRetryAfter(t, s, ids)
	clk.Advance(time.Minute)
	s.NoteResume("d", 0, t0.Add(-time.Hour)) // the same config again
	if a, _ := step(s); a != nil {
		t.Fatalf("attempt %s during the hold, with no new resume", a.Lane.ID)
	}
	s.NoteResume("d", 0, clk.Now()) // paused and resumed meanwhile
	var got []lanes.ID
	for a, _ := step(s); a != nil; a, _ = step(s) {
		got = append(got, a.Lane.ID)
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("after the resume: attempts on %v, want %v", got, ids)
	}
	checkInvariants(t, s)
}

// A partner's long Retry-After holds its destination and its lanes; an
// operator's resume (pause, then resume) ends the hold and makes the held
// lanes due at once, oldest head first (a probe found no way out but
// skipping the heads, which reordered the lanes).
func TestResumeEndsARetryAfterHold(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d", 0, outageLimits)
	ids := laneIDs("d", 2)
	for i, id := range ids {
		appendTo(s, 0, id, ev(uint64(i+1)))
	}
	holdBehindRetryAfter(t, s, ids)
	clk.Advance(time.Minute)
	if a, _ := step(s); a != nil {
		t.Fatalf("attempt %s during the Retry-After hold", a.Lane.ID)
	}
	// lanes list says when the hold lets them go.
	holdEnd := t0.Add(time.Hour)
	for _, ls := range s.ListLanes("d", LaneFilter{Limit: 10}).Lanes {
		if !ls.NextAttemptAt.Equal(holdEnd) {
			t.Fatalf("lane %s: next attempt %v, want the hold's end %v", ls.ID, ls.NextAttemptAt, holdEnd)
		}
	}
	s.SetPaused("d", 0, true)
	s.SetPaused("d", 0, false)
	var got []lanes.ID
	for a, _ := step(s); a != nil; a, _ = step(s) {
		got = append(got, a.Lane.ID)
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("after the resume: attempts on %v, want %v (every held lane, oldest head first)", got, ids)
	}
	if hold := s.Snapshot("d")[0].HoldUntil; !hold.IsZero() {
		t.Fatalf("hold until %v after the resume, want none", hold)
	}
	checkInvariants(t, s)
}

// A destination shared by customers keeps its budget when its failures
// are one customer's alone, over however many lanes, while another
// customer's attempts go through: those failures are charged to that
// customer's events. A destination serving one customer, failing over
// several lanes, is cut as before: its partner may be overloaded.
func TestOneCustomersFailuresKeepASharedBudget(t *testing.T) {
	s, clk := newSched()
	for _, d := range []string{"shared", "own"} {
		s.SetLimits(d, 0, outageLimits)
	}
	const failing = 10
	for i := range failing {
		appendTo(s, 0, lid("shared", "acme", fmt.Sprint("bad", i)), ev(uint64(i+1)))
		appendTo(s, 0, lid("own", "acme", fmt.Sprint("l", i)), ev(uint64(100+i)))
	}
	appendTo(s, 0, lid("shared", "beta", "ok"), ev(50))
	appendTo(s, 0, lid("own", "acme", "ok"), ev(150))
	var picked []*Attempt
	for {
		a, _ := step(s)
		if a == nil {
			break
		}
		picked = append(picked, a)
	}
	if len(picked) != 2*failing+2 {
		t.Fatalf("picked %d attempts, want %d", len(picked), 2*failing+2)
	}
	clk.Advance(10 * time.Millisecond)
	// The working lane of each destination answers first.
	for _, a := range picked {
		if a.Lane.ID.Key == "ok" {
			s.Observe(a, 200, false, 0, "")
			s.Succeeded(a)
		}
	}
	clk.Advance(10 * time.Millisecond)
	charged := map[string]int{}
	for _, a := range picked {
		if a.Lane.ID.Key == "ok" {
			continue
		}
		if s.Observe(a, 503, true, 0, "HTTP 503").OtherwiseHealthy {
			charged[a.Lane.ID.Destination]++
		}
		h := a.Head
		h.LastAttemptAt, h.NotBefore = clk.Now(), clk.Now().Add(time.Minute)
		s.Retry(a, h)
	}
	// Of its own destination's, only the first failing lane is charged
	// (one payload the partner refuses): the others see it failing too.
	if charged["shared"] != failing || charged["own"] != 1 {
		t.Errorf("failures charged to the events: %v, want all %d of shared's and the first of own's", charged, failing)
	}
	for _, snap := range s.Snapshot("") {
		cut := snap.CurrentRate < snap.ConfiguredRate
		if want := snap.ID == "own"; cut != want {
			t.Errorf("%s after %d failing lanes of one customer: rate %v of %v (%s), want cut %v", snap.ID, failing, snap.CurrentRate, snap.ConfiguredRate, snap.State, want)
		}
	}
	checkInvariants(t, s)
}

// A 429 to one lane while the others get 2xx (a partner throttling one
// user) is charged to the event, as a 5xx to one payload is: the
// destination is otherwise healthy. It still cuts the budget: a 429 is
// the partner's word on the whole destination's rate (operations.md,
// guarantees.md).
func TestA429ToOneLaneOfAHealthyDestinationIsCharged(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d", 0, outageLimits)
	appendTo(s, 0, lid("d", "c", "throttled"), ev(1))
	appendTo(s, 0, lid("d", "c", "ok1"), ev(2))
	appendTo(s, 0, lid("d", "c", "ok2"), ev(3))
	var throttled *Attempt
	for a, _ := step(s); a != nil; a, _ = step(s) {
		if a.Lane.ID.Key == "throttled" {
			throttled = a
			continue
		}
		clk.Advance(10 * time.Millisecond)
		s.Observe(a, 200, false, 0, "")
		s.Succeeded(a)
	}
	clk.Advance(10 * time.Millisecond)
	if obs := s.Observe(throttled, 429, true, 0, "HTTP 429"); !obs.OtherwiseHealthy {
		t.Fatal("a 429 to one lane while the others got 2xx: not otherwise healthy, want healthy (the attempt counts)")
	}
	if snap := s.Snapshot("d")[0]; snap.State != budget.Degraded || snap.CurrentRate >= snap.ConfiguredRate {
		t.Fatalf("after a 429: %s at %v of %v, want the budget cut", snap.State, snap.CurrentRate, snap.ConfiguredRate)
	}
	checkInvariants(t, s)
}

// What is not one customer's alone on a shared destination: timeouts
// after the partner stopped answering everyone (the other customer's
// last success came before), and a 429 (the partner's word on the whole
// destination). Both cut the budget as on any destination, and the
// timeouts are not charged to the events.
func TestASharedDestinationsOutageIsNotOneCustomers(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		after  time.Duration // from the other customer's last success to the failures
	}{
		{"timeouts after the partner stopped answering", 0, 10 * time.Second},
		{"a 429 right after another customer's success", 429, 100 * time.Millisecond},
	} {
		s, clk := newSched()
		s.SetLimits("shared", 0, outageLimits)
		const failing = 5
		for i := range failing {
			appendTo(s, 0, lid("shared", "acme", fmt.Sprint("l", i)), ev(uint64(i+1)))
		}
		appendTo(s, 0, lid("shared", "beta", "ok"), ev(50))
		var acme []*Attempt
		for {
			a, _ := step(s)
			if a == nil {
				break
			}
			if a.Lane.ID.Customer == "beta" {
				clk.Advance(10 * time.Millisecond)
				s.Observe(a, 200, false, 0, "")
				s.Succeeded(a)
				continue
			}
			acme = append(acme, a)
		}
		clk.Advance(c.after)
		charged := 0
		for _, a := range acme {
			if s.Observe(a, c.status, true, 0, "fails").OtherwiseHealthy {
				charged++
			}
			h := a.Head
			h.LastAttemptAt, h.NotBefore = clk.Now(), clk.Now().Add(time.Minute)
			s.Retry(a, h)
		}
		snap := s.Snapshot("shared")[0]
		if snap.CurrentRate >= snap.ConfiguredRate {
			t.Errorf("%s: rate %v of %v, want the budget cut", c.name, snap.CurrentRate, snap.ConfiguredRate)
		}
		if c.status == 0 && charged > 1 {
			t.Errorf("%s: %d of %d charged to their events, want at most the first", c.name, charged, failing)
		}
	}
}

// A partner that refuses one customer's payloads at once (in a
// millisecond) is as shared as one that takes its time: another
// customer's success in the last second, before the failing attempt
// started, keeps the budget whole. It was judged only by successes
// while the attempt was out, so one customer's batch of fast refusals
// cut a shared destination to its floor for everyone.
func TestOneCustomersFastRefusalsKeepASharedBudget(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("shared", 0, outageLimits)
	appendTo(s, 0, lid("shared", "beta", "ok"), ev(50))
	a, _ := step(s)
	clk.Advance(5 * time.Millisecond)
	s.Observe(a, 200, false, 0, "")
	s.Succeeded(a)
	clk.Advance(100 * time.Millisecond)
	const failing = 10
	for i := range failing {
		appendTo(s, 0, lid("shared", "acme", fmt.Sprint("bad", i)), ev(uint64(i+1)))
	}
	charged := 0
	for {
		a, _ := step(s)
		if a == nil {
			break
		}
		clk.Advance(time.Millisecond)
		if s.Observe(a, 500, true, 0, "HTTP 500").OtherwiseHealthy {
			charged++
		}
		h := a.Head
		h.LastAttemptAt, h.NotBefore = clk.Now(), clk.Now().Add(time.Minute)
		s.Retry(a, h)
	}
	if charged != failing {
		t.Errorf("%d of %d fast refusals charged to their events, want all (the destination answers beta)", charged, failing)
	}
	if snap := s.Snapshot("shared")[0]; snap.CurrentRate < snap.ConfiguredRate {
		t.Errorf("after %d fast refusals of acme's: rate %v of %v (%s), want the budget whole", failing, snap.CurrentRate, snap.ConfiguredRate, snap.State)
	}
	checkInvariants(t, s)
}

// A parked destination shared by customers is probed by each customer in
// turn (by customer id), each time from that customer's held lane whose
// window closes first: a customer whose events the partner refuses does
// not decide alone whether the destination is back. acme's lanes close
// first, so taking the held lane that would retry first probed acme's
// every time.
func TestParkedProbesRotateOverCustomers(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d", 0, outageLimits)
	customers := []string{"acme", "beta", "gamma"}
	ends := map[lanes.ID]time.Time{}
	seq := uint64(0)
	for ci, c := range customers {
		for k := range 3 {
			id := lid("d", c, fmt.Sprint("l", k))
			seq++
			appendTo(s, 0, id, ev(seq))
			// acme's close first; within a customer, l2 closes first.
			ends[id] = t0.Add(time.Hour + time.Duration(ci)*time.Minute - time.Duration(k)*time.Second)
		}
	}
	end := func(id lanes.ID) time.Time { return ends[id] }
	outage(t, s, "d", end)

	var got []lanes.ID
	for range 100 {
		clk.Advance(100 * time.Millisecond)
		a, _ := step(s)
		if a == nil {
			continue
		}
		if !a.EarlyProbe {
			t.Fatalf("parked: attempt %s not an early probe", a.Lane.ID)
		}
		got = append(got, a.Lane.ID)
		failHeld(t, s, a, end(a.Lane.ID))
		checkInvariants(t, s)
	}
	if len(got) < 9 {
		t.Fatalf("parked for 10 s: %d probes, want one a second", len(got))
	}
	for i, id := range got {
		if want := lid("d", customers[i%len(customers)], "l2"); id != want {
			t.Fatalf("probe %d on %s, want %s (probes %v: customers in turn, each its lane closing first)", i, id, want, got)
		}
	}
}

// A parked destination has one attempt out at a time: a probe that
// hangs until its timeout holds the next one back (each held a delivery
// worker: ten hanging probes per parked destination took most of them).
func TestAParkedDestinationProbesOneAtATime(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d", 0, outageLimits)
	ids := laneIDs("d", 4)
	for i, id := range ids {
		appendTo(s, 0, id, ev(uint64(i+1)))
	}
	outage(t, s, "d", func(lanes.ID) time.Time { return t0.Add(time.Hour) })
	clk.Advance(time.Second)
	hanging := mustPick(t, s)
	appendTo(s, 0, lid("d", "c", "new"), ev(99)) // a first attempt, due at once
	for range 50 {
		clk.Advance(100 * time.Millisecond)
		if a, _ := step(s); a != nil {
			t.Fatalf("%s handed out while the probe of %s hangs on the parked destination", a.Lane.ID, hanging.Lane.ID)
		}
	}
	failHeld(t, s, hanging, t0.Add(time.Hour))
	clk.Advance(time.Second)
	if a, _ := step(s); a == nil {
		t.Fatal("no attempt once the hanging probe ended")
	}
	checkInvariants(t, s)
}

// A 410 Gone on a destination shared by customers is its customer's
// alone, however many of its lanes get one, while another customer's
// attempt went through within GoneOthersLookback and no other customer
// got a 410 since: then it does not disable the destination (the verdict
// charges it to the event), and it never touches the budget. Another
// customer's 410 soon after, a 410 with no other customer's success
// within GoneOthersLookback, or one on a destination serving one
// customer, is not.
func TestOneCustomersGoneOnASharedDestination(t *testing.T) {
	s, clk := newSched()
	for _, d := range []string{"shared", "one"} {
		s.SetLimits(d, 0, outageLimits)
	}
	const refused = 5
	for i := range refused {
		appendTo(s, 0, lid("shared", "acme", fmt.Sprint("l", i)), ev(uint64(i+1)))
	}
	appendTo(s, 0, lid("shared", "beta", "ok"), ev(50))
	appendTo(s, 0, lid("shared", "gamma", "g"), ev(60))
	appendTo(s, 0, lid("one", "acme", "x"), ev(70))
	appendTo(s, 0, lid("one", "acme", "y"), ev(71))
	byLane := map[lanes.ID]*Attempt{}
	for a, _ := step(s); a != nil; a, _ = step(s) {
		byLane[a.Lane.ID] = a
	}
	retry := func(a *Attempt) {
		h := a.Head
		h.Attempts, h.LastStatus, h.LastAttemptAt, h.NotBefore = a.Number, 410, clk.Now(), clk.Now().Add(time.Second)
		s.Retry(a, h)
	}
	clk.Advance(10 * time.Millisecond)
	for _, id := range []lanes.ID{lid("shared", "beta", "ok"), lid("one", "acme", "x")} {
		s.Observe(byLane[id], 200, false, 0, "")
		s.Succeeded(byLane[id])
	}
	clk.Advance(10 * time.Millisecond)
	for i := range refused {
		a := byLane[lid("shared", "acme", fmt.Sprint("l", i))]
		if !s.Observe(a, 410, false, 0, "HTTP 410").GoneOnlyItsCustomers {
			t.Fatalf("acme's 410 on %s after beta's 2xx: not acme's alone, want acme's", a.Lane.ID)
		}
		retry(a)
	}
	if snap := s.Snapshot("shared")[0]; snap.State != budget.Healthy || snap.CurrentRate < snap.ConfiguredRate {
		t.Fatalf("after acme's 410s: %s, rate %v of %v; want healthy, the budget whole", snap.State, snap.CurrentRate, snap.ConfiguredRate)
	}
	clk.Advance(10 * time.Millisecond)
	if g := byLane[lid("shared", "gamma", "g")]; s.Observe(g, 410, false, 0, "HTTP 410").GoneOnlyItsCustomers {
		t.Fatal("gamma's 410 just after acme's: gamma's alone, want not (two customers refused)")
	}
	if y := byLane[lid("one", "acme", "y")]; s.Observe(y, 410, false, 0, "HTTP 410").GoneOnlyItsCustomers {
		t.Fatal("a 410 on a destination serving one customer: its customer's alone, want not")
	}

	// No other customer's success within GoneOthersLookback: Rivora
	// cannot tell a partner that refuses acme from one that is gone.
	clk.Advance(GoneOthersLookback)
	a, _ := step(s)
	if a == nil || a.Lane.ID.Customer != "acme" {
		t.Fatalf("attempt %v, want one of acme's retries", a)
	}
	if s.Observe(a, 410, false, 0, "HTTP 410").GoneOnlyItsCustomers {
		t.Fatalf("acme's 410 %s after beta's last success: acme's alone, want not", GoneOthersLookback)
	}
}

// Sparse traffic on a shared destination: another customer's success
// 30 s before, and no other customer's 410, make a customer's 410 its
// own (a second of lookback disabled the destination for everyone
// whenever the others' traffic was sparse); a third customer's 410
// seconds later is everyone's, though the success is still within the
// minute (a partner gone for all costs one charged attempt); once another
// customer's webhook is taken again, a fourth customer's 410 is its own.
func TestOneCustomersGoneInSparseTraffic(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("shared", 0, outageLimits)
	appendTo(s, 0, lid("shared", "beta", "b"), ev(1))
	a, _ := step(s)
	if a == nil || a.Lane.ID.Customer != "beta" {
		t.Fatalf("attempt %v, want beta's", a)
	}
	s.Observe(a, 200, false, 0, "")
	s.Succeeded(a)
	clk.Advance(30 * time.Second)
	appendTo(s, 0, lid("shared", "acme", "a"), ev(2))
	acme, _ := step(s)
	if acme == nil || acme.Lane.ID.Customer != "acme" {
		t.Fatalf("attempt %v, want acme's", acme)
	}
	if !s.Observe(acme, 410, false, 0, "HTTP 410").GoneOnlyItsCustomers {
		t.Fatal("acme's first 410, 30 s after beta's success: not acme's alone, want acme's")
	}
	clk.Advance(5 * time.Second)
	appendTo(s, 0, lid("shared", "gamma", "g"), ev(3))
	gamma, _ := step(s)
	if gamma == nil || gamma.Lane.ID.Customer != "gamma" {
		t.Fatalf("attempt %v, want gamma's", gamma)
	}
	if s.Observe(gamma, 410, false, 0, "HTTP 410").GoneOnlyItsCustomers {
		t.Fatal("gamma's first 410, 5 s after acme's: gamma's alone, want everyone's (two customers refused)")
	}
	retryAt := func(a *Attempt) {
		h := a.Head
		h.Attempts, h.LastStatus, h.LastAttemptAt, h.NotBefore = a.Number, 410, clk.Now(), clk.Now().Add(time.Hour)
		s.Retry(a, h)
	}
	retryAt(acme)
	retryAt(gamma)

	// Beta's webhooks taken again after both 410s: the partner refuses
	// acme and gamma alone, and a third customer's 410 40 s later is its
	// own too.
	appendTo(s, 0, lid("shared", "beta", "b2"), ev(4))
	b, _ := step(s)
	if b == nil || b.Lane.ID.Customer != "beta" {
		t.Fatalf("attempt %v, want beta's", b)
	}
	s.Observe(b, 200, false, 0, "")
	s.Succeeded(b)
	clk.Advance(40 * time.Second)
	appendTo(s, 0, lid("shared", "delta", "d"), ev(5))
	delta, _ := step(s)
	if delta == nil || delta.Lane.ID.Customer != "delta" {
		t.Fatalf("attempt %v, want delta's", delta)
	}
	if !s.Observe(delta, 410, false, 0, "HTTP 410").GoneOnlyItsCustomers {
		t.Fatal("delta's 410 after beta's webhook was taken since the others' 410s: not delta's alone, want delta's")
	}
}

// While a shared destination is parked (down for everyone), a 410 to one
// customer's probe is that customer's as long as another customer has
// held lanes to probe and none of theirs got a 410 within
// ParkedGoneLookback; the next customer's 410 is everyone's. With one
// customer's lanes alone, its 410 is everyone's.
func TestAParkedDestinationsGoneIsOneCustomersUntilAnotherIsGone(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("shared", 0, outageLimits)
	appendTo(s, 0, lid("shared", "acme", "a"), ev(1))
	appendTo(s, 0, lid("shared", "beta", "b"), ev(2))
	outage(t, s, "shared", func(lanes.ID) time.Time { return t0.Add(time.Hour) })
	probe := func() *Attempt {
		t.Helper()
		clk.Advance(time.Second)
		a := mustPick(t, s)
		if !a.EarlyProbe {
			t.Fatalf("attempt %s while parked is not a probe", a.Lane.ID)
		}
		return a
	}
	first := probe()
	if !s.Observe(first, 410, false, 0, "HTTP 410").GoneOnlyItsCustomers {
		t.Fatalf("the first 410 while parked (%s's probe, another customer's lanes held): not its customer's alone, want its", first.Lane.ID.Customer)
	}
	h := first.Head
	h.Attempts, h.LastStatus, h.LastAttemptAt, h.NotBefore = first.Number, 410, clk.Now(), clk.Now().Add(time.Hour)
	s.Retry(first, h) // charged: its retry waits
	second := probe()
	if second.Lane.ID.Customer == first.Lane.ID.Customer {
		t.Fatalf("the probes did not go round: %s twice", second.Lane.ID.Customer)
	}
	if s.Observe(second, 410, false, 0, "HTTP 410").GoneOnlyItsCustomers {
		t.Fatal("another customer's 410 within the minute: its customer's alone, want everyone's")
	}

	s2, clk2 := newSched()
	s2.SetLimits("alone", 0, outageLimits)
	appendTo(s2, 0, lid("alone", "acme", "a"), ev(1))
	appendTo(s2, 0, lid("alone", "acme", "b"), ev(2))
	outage(t, s2, "alone", func(lanes.ID) time.Time { return t0.Add(time.Hour) })
	clk2.Advance(time.Second)
	if a := mustPick(t, s2); s2.Observe(a, 410, false, 0, "HTTP 410").GoneOnlyItsCustomers {
		t.Fatal("a 410 while parked with one customer's lanes alone: its customer's, want everyone's")
	}
}

// Held, in the operator's views (LaneSummary.Held, Location.Held), is the
// scheduler's hold only: a head whose last failure was its destination's
// is held while the destination is parked, not while it is degraded or
// healthy, where it waits for its retry time and then, due, for its turn.
func TestHeldOnlyWhileItsDestinationIsParked(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d", 0, outageLimits)
	id := lid("d", "c", "a")
	appendTo(s, 0, id, ev(1), ev(2))
	a := mustPick(t, s)
	s.Observe(a, 429, true, 0, "HTTP 429")
	h := a.Head
	h.HeldByDestination, h.LastStatus, h.LastAttemptAt, h.NotBefore = true, 429, clk.Now(), clk.Now().Add(time.Second)
	h.WindowEnd = t0.Add(time.Hour)
	s.Retry(a, h)
	if st := s.Snapshot("d")[0].State; st != budget.Degraded {
		t.Fatalf("after a 429: destination %s, want degraded", st)
	}
	view := func(what string, wantState LaneState, wantHeld, wantDue bool, wantNext time.Time) {
		t.Helper()
		ls := s.ListLanes("d", LaneFilter{Limit: 10}).Lanes
		loc, ok := s.Find("ev-1")
		if len(ls) != 1 || !ok {
			t.Fatalf("%s: lanes %+v, head found %v", what, ls, ok)
		}
		if ls[0].State != wantState || ls[0].Held != wantHeld || !ls[0].NextAttemptAt.Equal(wantNext) {
			t.Errorf("%s: lane state %d held %v next %v, want state %d held %v next %v", what, ls[0].State, ls[0].Held, ls[0].NextAttemptAt, wantState, wantHeld, wantNext)
		}
		if loc.Held != wantHeld || loc.Due != wantDue {
			t.Errorf("%s: head held %v due %v, want held %v due %v", what, loc.Held, loc.Due, wantHeld, wantDue)
		}
	}
	view("degraded, before its retry time", LaneWaiting, false, false, h.NotBefore)
	clk.Advance(2 * time.Second)
	s.mu.Lock()
	s.promote(clk.Now()) // due, not yet picked
	s.mu.Unlock()
	view("degraded, its retry time passed", LaneDue, false, true, time.Time{})

	outage(t, s, "d", func(lanes.ID) time.Time { return t0.Add(time.Hour) })
	view("parked", LaneWaiting, true, false, time.Time{})
}
