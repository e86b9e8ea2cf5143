package budget

import (
	"math"
	"time"
)

// The partner's ceiling as the budget learns it. Halving alone finds a
// rate the partner takes, but additive increase in steps of the configured
// rate climbs straight back through the partner's limit when the configured
// rate is far above it (10,000/s in front of a WAF allowing 50/s), so the
// destination hits the wall every few seconds. Instead the budget
// remembers what the partner let through when it throttled, cuts to just
// below that, and probes above it slowly; the probe doubles with every
// ProbeDoubling without throttling, so the memory fades over minutes and a
// partner that raised its limit is found again.

// goodput counts 2xx answers per twentieth of a second over the last
// second. Counting whole slots makes it at most 5% low and never high: the
// budget approaches the partner's ceiling from below.
type goodput struct {
	count [20]int
	slot  [20]int64 // which twentieth (since the epoch) count[i] holds
}

const goodputSlot = time.Second / 20

func (g *goodput) add(now time.Time) {
	s := now.UnixNano() / int64(goodputSlot)
	i := s % int64(len(g.count))
	if g.slot[i] != s {
		g.slot[i], g.count[i] = s, 0
	}
	g.count[i]++
}

// rate is the 2xx answers in the last second, per second.
func (g *goodput) rate(now time.Time) float64 {
	s := now.UnixNano() / int64(goodputSlot)
	n := 0
	for i, at := range g.slot {
		if at <= s && at > s-int64(len(g.count)) {
			n += g.count[i]
		}
	}
	return float64(n)
}

// Saturated records that the destination had an attempt due that its
// in-flight cap held back: like a refused token, it says the partner sees
// all the destination may send.
func (b *Budget) Saturated(now time.Time) { b.saturated = now }

// cutRate is the rate a throttle at now cuts to. When the destination was
// saturated within the last second (an attempt was due and held back by
// the bucket or the in-flight cap, so this is the partner refusing what we
// may send, not a stray error at low load), their rate is learned as its
// ceiling and the cut goes to Approach of it; otherwise the rate is halved.
//
// A second whose goodput fell under half the ceiling learned before is an
// outage's (a partner answering 429 to everything, whatever it says), not
// a limit's: it teaches nothing, and a ceiling the cut before it learned
// (the outage's first second, with the successes from before it) is taken
// back. Learning from such seconds took the one success before a partner
// refused everything for its ceiling (1/s of a partner that had taken
// 3/s), and held the climb after the outage to the probe above it. The
// count of refusals tells nothing here: a WAF answers its 429s long before
// its origin answers the 200s, so while the rate is far above the ceiling
// every second refuses many times what it lets through.
func (b *Budget) cutRate(now time.Time) float64 {
	g := b.goodput.rate(now)
	busy := !b.saturated.IsZero() && now.Sub(b.saturated) <= time.Second
	tentative := b.tentative
	b.tentative = false
	if b.learned > 0 && g < b.learned/2 {
		if tentative {
			b.learned, b.learnedAt = b.unlearned, b.unlearnedAt
		}
		return b.bucket.Rate() / 2
	}
	if b.tune.Approach <= 0 || g <= 0 || !busy {
		return b.bucket.Rate() / 2
	}
	b.unlearned, b.unlearnedAt, b.tentative = b.learned, b.learnedAt, true
	b.learned, b.learnedAt = g, now
	return b.tune.Approach * math.Min(g, b.bucket.Rate())
}

// refusedRate is the failures that were the destination's (throttles and
// others) in the last second, per second.
func (b *Budget) refusedRate(now time.Time) float64 {
	return b.throttles.rate(now) + b.failures.rate(now)
}

// countSuccess records a 2xx. Until CutEvery after a cut that learned the
// ceiling, the learned ceiling grows with the goodput: in a storm the
// first 429 comes back while 2xx answers to attempts sent before it are
// still in flight, and those were let through too. Later, a second that
// got clearly more through than the learned ceiling (ceilingExceeded)
// with no failure of the destination's shows the ceiling gone: it is
// forgotten, and the rate climbs at the full Increase again (a partner
// that had throttled at 3/s took 10/s after an outage while the budget
// still crept up by the probe: 66 s from 0.5/s to 20/s).
func (b *Budget) countSuccess(now time.Time) {
	b.goodput.add(now)
	if b.learned <= 0 {
		return
	}
	g := b.goodput.rate(now)
	if now.Sub(b.learnedAt) < b.tune.CutEvery {
		b.learned = math.Max(b.learned, g)
		return
	}
	if g >= ceilingExceeded*b.learned && g >= b.learned+2 && b.refusedRate(now) == 0 {
		b.learned, b.tentative = 0, false
		b.changes++
	}
}

// ceilingExceeded: a clean second's goodput at this multiple of the
// learned ceiling (and at least 2 more) forgets it. The goodput over a
// sliding second of a partner that limits per fixed second may pass its
// limit a little where the two windows straddle; half as much again is no
// such artefact.
const ceilingExceeded = 1.5

// raisedRate is the rate after elapsed seconds of clean traffic: Increase
// of the configured rate per second up to Approach of the learned ceiling,
// then Probe of the learned ceiling per second, doubling every
// ProbeDoubling since the last cut. Once the probe is no slower than the
// plain increase, the learned ceiling is forgotten.
func (b *Budget) raisedRate(now time.Time, elapsed float64) float64 {
	rate, step := b.bucket.Rate(), b.tune.Increase*b.ceiling
	if b.learned <= 0 {
		return rate + step*elapsed
	}
	if below := b.tune.Approach * b.learned; rate < below {
		return math.Min(below, rate+step*elapsed)
	}
	probe := b.tune.Probe * b.learned * math.Exp2(now.Sub(b.lastCut).Seconds()/b.tune.ProbeDoubling.Seconds())
	if probe >= step {
		b.learned = 0
		return rate + step*elapsed
	}
	return rate + probe*elapsed
}

// resumeRate is where a parked destination whose probe got through starts
// again: a tenth of the configured rate (at least the floor, at most
// Approach of a learned ceiling) or its cut rate if that is higher, so the
// backlog drains without a thundering herd and without crawling up from
// the floor.
func (b *Budget) resumeRate() float64 {
	rate := math.Min(b.ceiling, math.Max(b.bucket.Rate(), b.ceiling/10))
	if b.learned > 0 {
		rate = math.Min(rate, b.tune.Approach*b.learned)
	}
	return math.Max(b.tune.Floor, rate)
}

// Learned is the partner's ceiling as throttling found it (tokens/s): what
// the partner let through in the second before it last refused the rate
// the budget allowed. 0 when nothing is remembered (never throttled at
// that rate, back at the configured rate, or the memory faded).
func (b *Budget) Learned() float64 { return b.learned }
