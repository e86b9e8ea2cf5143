package budget_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/agent/clock"
)

// waf is a simulated partner: a web application firewall letting limit
// requests through per fixed one-second window (every arrival counts,
// refused ones too) and answering at once.
type waf struct {
	limit int
	start time.Time
	win   int64
	n     int
}

func (w *waf) accepts(now time.Time) bool {
	if win := int64(now.Sub(w.start) / time.Second); win != w.win {
		w.win, w.n = win, 0
	}
	w.n++
	return w.n <= w.limit
}

// second tallies one simulated second of attempts.
type second struct{ attempts, throttled, delivered int }

// sim drives a budget against a partner with an unbounded backlog: every
// token is spent the moment it arrives, and time advances exactly to the
// next one.
type sim struct {
	t       *testing.T
	clk     *clock.Manual
	b       *budget.Budget
	partner *waf
	seconds []second
	// maxLearned is the highest Learned() seen.
	maxLearned float64
	// answer, when set, answers instead of the partner's limit: 200, 429
	// or another status (a failure that is not throttling).
	answer func(now time.Time) int
}

func newSim(t *testing.T, configured float64, burst, limit int) *sim {
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	return &sim{t: t, clk: clk, b: budget.NewBudget(configured, burst, budget.DefaultAIMD(), clk.Now()), partner: &waf{limit: limit, start: clk.Now()}}
}

// run simulates until d after the start.
func (s *sim) run(d time.Duration) {
	end := s.partner.start.Add(d)
	for now := s.clk.Now(); now.Before(end); now = s.clk.Now() {
		if !s.b.Take(now) {
			s.clk.Advance(s.b.Wait(now))
			continue
		}
		i := int(now.Sub(s.partner.start) / time.Second)
		for len(s.seconds) <= i {
			s.seconds = append(s.seconds, second{})
		}
		s.seconds[i].attempts++
		switch status := s.status(now); status {
		case 200:
			s.seconds[i].delivered++
			s.b.Succeeded(now)
		case 429:
			s.seconds[i].throttled++
			s.b.Throttled(now, 0, "HTTP 429")
		default:
			s.b.Failed(now, fmt.Sprintf("HTTP %d", status))
		}
		s.maxLearned = max(s.maxLearned, s.b.Learned())
	}
}

// status is what the partner answers an attempt at now.
func (s *sim) status(now time.Time) int {
	switch {
	case s.answer != nil:
		return s.answer(now)
	case s.partner.accepts(now):
		return 200
	}
	return 429
}

// between sums the seconds [from, to).
func (s *sim) between(from, to int) second {
	var sum second
	for _, x := range s.seconds[from:to] {
		sum.attempts += x.attempts
		sum.throttled += x.throttled
		sum.delivered += x.delivered
	}
	return sum
}

// checkSettled asserts that over seconds [from, to) under 5% of attempts
// were throttled and deliveries stayed above 80% of limit.
func (s *sim) checkSettled(from, to, limit int) {
	s.t.Helper()
	sum := s.between(from, to)
	share := float64(sum.throttled) / float64(max(sum.attempts, 1))
	rate := float64(sum.delivered) / float64(to-from)
	s.t.Logf("seconds %d–%d: %d attempts, %.2f%% throttled, %.1f/s delivered of a %d/s ceiling; learned %.1f/s, rate %.1f/s",
		from, to, sum.attempts, 100*share, rate, limit, s.b.Learned(), s.b.Rate())
	if share >= 0.05 {
		s.t.Errorf("seconds %d–%d: %.2f%% of attempts throttled, want < 5%%", from, to, 100*share)
	}
	if rate <= 0.8*float64(limit) {
		s.t.Errorf("seconds %d–%d: delivered %.1f/s, want > 80%% of the partner's %d/s", from, to, rate, limit)
	}
}

// The incident's storm: a configured rate far above the partner's ceiling.
// After 15 s the budget runs just below the ceiling instead of climbing
// back into the wall, and learns the ceiling (never above it).
func TestLearnsThePartnersCeiling(t *testing.T) {
	for _, c := range []struct {
		configured   float64
		burst, limit int
	}{
		{10_000, 10_000, 50}, // the write-up's storm
		{2_000, 200, 600},    // the game day
		{400, 50, 40},
		{10_000, 100, 7},
		{60, 60, 50}, // configured just above the ceiling
	} {
		t.Run(fmt.Sprintf("%g/s_at_%d/s", c.configured, c.limit), func(t *testing.T) {
			s := newSim(t, c.configured, c.burst, c.limit)
			s.run(5 * time.Minute)
			s.checkSettled(15, 300, c.limit)
			if l := s.b.Learned(); l < 0.9*float64(c.limit) || l > float64(c.limit) {
				t.Errorf("learned %.2f/s, want within 90–100%% of the partner's %d/s", l, c.limit)
			}
			if s.maxLearned > float64(c.limit) {
				t.Errorf("learned up to %.2f/s, above the partner's %d/s", s.maxLearned, c.limit)
			}
			if s.b.State() != budget.Degraded {
				t.Errorf("state %s, want degraded (below the configured rate)", s.b.State())
			}
		})
	}
}

// The memory fades: a partner that raises its ceiling from 50/s to 200/s is
// found again within three minutes, and one that drops its limit entirely
// gets the configured rate back (and nothing learned) within five.
func TestFindsARaisedCeiling(t *testing.T) {
	s := newSim(t, 2_000, 2_000, 50)
	s.run(2 * time.Minute)
	s.checkSettled(15, 120, 50)

	s.partner.limit = 200
	s.run(5 * time.Minute)
	for i := 120; i < 300; i++ {
		if s.seconds[i].delivered >= 0.9*200 {
			t.Logf("first second at ≥ 90%% of the raised ceiling: %d s after the rise", i-120)
			break
		}
	}
	s.checkSettled(300-60, 300, 200)
	if l := s.b.Learned(); l < 180 || l > 200 {
		t.Errorf("learned %.2f/s after the ceiling rose to 200/s, want 180–200", l)
	}

	s.partner.limit = 1 << 30
	lifted := 5 * time.Minute
	until := lifted
	for s.b.State() != budget.Healthy && until < lifted+5*time.Minute {
		until += 10 * time.Second
		s.run(until)
	}
	t.Logf("healthy again %s after the partner's limit was lifted", until-lifted)
	if s.b.State() != budget.Healthy || s.b.Rate() != 2_000 || s.b.Learned() != 0 {
		t.Errorf("5 min after the partner's limit was lifted: state %s, rate %.1f/s, learned %.1f/s; want healthy at 2000/s, nothing learned",
			s.b.State(), s.b.Rate(), s.b.Learned())
	}
}

// A stray 503 while the destination sends far below its rate (the bucket
// was never the limit) is no ceiling: the rate is halved as before and
// nothing is learned.
func TestStrayErrorAtLowLoadLearnsNothing(t *testing.T) {
	b := budget.NewBudget(50, 50, budget.DefaultAIMD(), at(0))
	for ms := 0; ms < 2000; ms += 500 {
		if !b.Take(at(ms)) {
			t.Fatalf("take at %d ms refused at 2/s of a 50/s budget", ms)
		}
		b.Succeeded(at(ms))
	}
	b.Take(at(2000))
	b.Throttled(at(2000), 0, "HTTP 503")
	if b.Rate() != 25 || b.Learned() != 0 {
		t.Fatalf("after a stray 503 at 2/s: rate %v learned %v, want 25 and nothing learned", b.Rate(), b.Learned())
	}
}

// In a storm the first 429 comes back while 2xx answers to attempts sent
// before it are still in flight: until a second after the cut they still
// count toward the learned ceiling, later ones do not.
func TestAnswersInFlightAtTheCutStillCount(t *testing.T) {
	b := budget.NewBudget(10_000, 10_000, budget.DefaultAIMD(), at(0))
	b.Saturated(at(0))
	for ms := range 38 {
		b.Succeeded(at(10 + ms))
	}
	b.Throttled(at(50), 0, "HTTP 429")
	if b.Learned() != 38 || b.Rate() != 0.9*38 {
		t.Fatalf("after 38 × 2xx then a 429: learned %v rate %v, want 38 and 34.2", b.Learned(), b.Rate())
	}
	for ms := range 12 {
		b.Succeeded(at(51 + ms))
	}
	if b.Learned() != 50 {
		t.Fatalf("12 more 2xx just after the cut: learned %v, want 50", b.Learned())
	}
	for ms := range 60 {
		b.Succeeded(at(1100 + ms))
	}
	if b.Learned() != 50 {
		t.Fatalf("2xx more than a second after the cut raised the learned ceiling to %v", b.Learned())
	}
}

// A partner failing one request in 20 at random (a 503 without
// Retry-After) while a backlog keeps the budget busy: every failure used
// to learn what the cut rate let through as the partner's ceiling and cut
// a tenth below it, ratcheting a 50/s destination down to ~1/s. A failure
// that is not throttling halves and learns nothing, so the rate stays
// well up.
func TestStrayFailuresUnderABacklogDoNotRatchetTheRate(t *testing.T) {
	run := func(fail func(b *budget.Budget, now time.Time)) *budget.Budget {
		b := budget.NewBudget(50, 50, budget.DefaultAIMD(), at(0))
		sent := 0
		for ms := 0; ms < 120_000; ms += 5 {
			now := at(ms)
			if !b.Take(now) { // a backlog: an attempt is always due
				continue
			}
			sent++
			if sent%20 == 0 {
				fail(b, now)
			} else {
				b.Succeeded(now)
			}
		}
		return b
	}
	learning := run(func(b *budget.Budget, now time.Time) { b.Throttled(now, 0, "HTTP 503") })
	stray := run(func(b *budget.Budget, now time.Time) { b.Failed(now, "HTTP 503") })
	t.Logf("after 2 min of 5%% stray failures under a backlog: %.2f/s learning from them, %.2f/s not", learning.Rate(), stray.Rate())
	if learning.Rate() >= 5 {
		t.Fatalf("the ratchet this test guards against did not happen with learning: rate %.2f/s", learning.Rate())
	}
	if stray.Rate() < 10 || stray.Learned() != 0 {
		t.Fatalf("5%% stray failures under a backlog: rate %.2f/s learned %.2f, want ≥ 10/s and nothing learned", stray.Rate(), stray.Learned())
	}
}

// The operator probe's incident: a partner limiting at 3/s, then
// refusing everything (429, then 503) for a minute, then taking all it is
// sent. Whenever in the partner's second its refusals begin, what the
// budget learned at 3/s is what it remembers through the outage (a second
// that let through under half that is an outage's, not a ceiling:
// learning from it remembered 1/s), and once the partner
// takes clearly more than that ceiling without a 429 the ceiling is
// forgotten and the rate climbs at the plain 5% of 20/s a second: back at
// 20/s within 40 s (it crept up by the probe above the ceiling: 80 to
// 130 s).
func TestAnOutageIsNoCeiling(t *testing.T) {
	for off := 0; off < 1200; off += 100 {
		t.Run(fmt.Sprintf("refusing_%dms_after_a_429", off), func(t *testing.T) {
			s := newSim(t, 20, 20, 3)
			s.run(time.Minute)
			if l := s.b.Learned(); l < 2.7 || l > 3 {
				t.Fatalf("learned %.2f/s of a partner at 3/s, want 2.7–3", l)
			}
			// From the first 429 after a minute, off later, the partner
			// refuses everything.
			var first time.Time
			s.answer = func(now time.Time) int {
				ok := s.partner.accepts(now)
				if first.IsZero() && !ok {
					first = now
				}
				if ok && (first.IsZero() || now.Sub(first) < time.Duration(off)*time.Millisecond) {
					return 200
				}
				return 429
			}
			for sec := 61; sec <= 120; sec++ {
				if sec == 90 {
					s.answer = func(time.Time) int { return 503 }
				}
				s.run(time.Duration(sec) * time.Second)
				if l := s.b.Learned(); l < 2 {
					t.Fatalf("%d s into the outage: learned %.2f/s, want what the partner let through at 3/s", sec-60, l)
				}
			}
			if l := s.b.Learned(); s.b.State() != budget.Parked || l < 2.7 || l > 3 {
				t.Fatalf("after a minute's outage: %s, learned %.2f/s; want parked, the 3/s ceiling remembered", s.b.State(), l)
			}

			s.answer = func(time.Time) int { return 200 }
			dropped := 0
			for sec := 121; sec <= 160 && s.b.State() != budget.Healthy; sec++ {
				s.run(time.Duration(sec) * time.Second)
				if dropped == 0 && s.b.Learned() == 0 {
					dropped = sec
				}
				if got := s.seconds[sec-1]; dropped == 0 && got.delivered >= 6 {
					t.Fatalf("second %d after the recovery: %d delivered without a 429, and the 3/s ceiling still remembered", sec-120, got.delivered)
				}
			}
			t.Logf("ceiling forgotten %d s after the recovery, rate back at 20/s after %s", dropped-120, s.clk.Now().Sub(s.partner.start)-2*time.Minute)
			if s.b.State() != budget.Healthy || s.b.Learned() != 0 {
				t.Fatalf("40 s after the partner recovered: %s at %.2f/s, learned %.2f/s; want healthy at 20/s, nothing learned", s.b.State(), s.b.Rate(), s.b.Learned())
			}
		})
	}
}
