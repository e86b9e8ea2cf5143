package budget_test

import (
	"slices"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/agent/clock"
)

// answer is an attempt's answer, due at at.
type answer struct {
	at time.Time
	ok bool
}

// wafRun is a budget against a partner that lets limit attempts a
// second through (answered after okAfter) and refuses the rest with 429
// (answered after refusedAfter), at most inFlight attempts out.
type wafRun struct {
	limit, inFlight       int
	okAfter, refusedAfter time.Duration
	learnedAt             time.Duration // when the ceiling was first learned (-1: never)
	attempts, refused     int           // from 15 s on
}

func (r *wafRun) run(d time.Duration) {
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	start := clk.Now()
	b := budget.NewBudget(10_000, 5_000, budget.DefaultAIMD(), start)
	w := &waf{limit: r.limit, start: start}
	var out []answer
	r.learnedAt = -1
	for now := clk.Now(); now.Before(start.Add(d)); now = clk.Now() {
		slices.SortFunc(out, func(a, b answer) int { return a.at.Compare(b.at) })
		for len(out) > 0 && !out[0].at.After(now) {
			if out[0].ok {
				b.Succeeded(now)
			} else {
				b.Throttled(now, 0, "HTTP 429")
			}
			out = out[1:]
		}
		if r.learnedAt < 0 && b.Learned() > 0 {
			r.learnedAt = now.Sub(start)
		}
		next := time.Hour
		if len(out) > 0 {
			next = out[0].at.Sub(now)
		}
		switch {
		case len(out) >= r.inFlight:
			b.Saturated(now)
		case b.Take(now):
			ok := w.accepts(now)
			if now.Sub(start) >= 15*time.Second {
				r.attempts++
				if !ok {
					r.refused++
				}
			}
			after := r.okAfter
			if !ok {
				after = r.refusedAfter
			}
			out = append(out, answer{at: now.Add(after), ok: ok})
			continue
		default:
			next = min(next, b.Wait(now))
		}
		clk.Advance(max(next, time.Millisecond))
	}
}

// A WAF answers its 429s at once and lets its 200s through to a slow
// origin: in the second after the first cut the budget sees many more
// refusals than successes, which is throttling, not an outage. It learns
// the ceiling at once and then stays under it (an outage rule that took
// more refusals than successes for an outage learned nothing for ten
// seconds, thousands of 429s).
func TestCeilingLearnedWhen429sComeBackFirst(t *testing.T) {
	for _, r := range []*wafRun{
		{limit: 50, inFlight: 100, okAfter: 300 * time.Millisecond, refusedAfter: 5 * time.Millisecond},
		{limit: 50, inFlight: 1000, okAfter: 300 * time.Millisecond, refusedAfter: 5 * time.Millisecond},
		{limit: 50, inFlight: 1000, okAfter: 1500 * time.Millisecond, refusedAfter: 5 * time.Millisecond},
	} {
		r.run(40 * time.Second)
		if r.learnedAt < 0 || r.learnedAt > 3*time.Second {
			t.Errorf("200s after %s, 429s after %s, %d in flight: ceiling learned at %v, want within 3s (a second after the first 2xx)", r.okAfter, r.refusedAfter, r.inFlight, r.learnedAt)
		}
		if share := float64(r.refused) / float64(max(r.attempts, 1)); share > 0.02 {
			t.Errorf("200s after %s, 429s after %s, %d in flight: %.1f%% of attempts refused from 15s on, want under 2%%", r.okAfter, r.refusedAfter, r.inFlight, 100*share)
		}
	}
}
