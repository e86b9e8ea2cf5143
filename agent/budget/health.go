package budget

import (
	"fmt"
	"math"
	"time"

	"github.com/rivora/rivora/internal/rates"
)

// State is a destination's health as its budget sees it. Whether a
// failure that is the destination's counts against an event's
// max_attempts takes more than State (one payload a partner refuses
// degrades its destination by itself): see scheduler.Observation.OtherwiseHealthy.
type State int

const (
	// Healthy: refilling at the configured rate.
	Healthy State = iota
	// Degraded: the rate was cut after throttling or failures and is being
	// walked back up.
	Degraded
	// Parked: sustained failure; one probe per ProbeEvery until one
	// succeeds.
	Parked
)

func (s State) String() string {
	switch s {
	case Healthy:
		return "healthy"
	case Degraded:
		return "degraded"
	case Parked:
		return "parked"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// AIMD tunes how a budget adapts.
type AIMD struct {
	// Floor is the lowest refill rate a cut may reach (tokens/s).
	Floor float64
	// Increase is added back per second of clean traffic, as a fraction of
	// the configured rate.
	Increase float64
	// CutEvery spaces cuts: at most one per CutEvery.
	CutEvery time.Duration
	// ParkAfter parks a destination that has had no success for this long
	// while failing.
	ParkAfter time.Duration
	// ProbeEvery spaces probes while parked.
	ProbeEvery time.Duration
	// Approach is the fraction of the learned ceiling (the partner's
	// goodput when it throttled a busy budget) a throttle cuts to, and up
	// to which the rate climbs at the full Increase; 0 learns nothing.
	Approach float64
	// Probe is the climb per clean second above Approach of the learned
	// ceiling, as a fraction of it; it doubles every ProbeDoubling since
	// the last cut.
	Probe         float64
	ProbeDoubling time.Duration
	// StrayShare: a failure that is not throttling (Failed) cuts only
	// when failures are at least this share of the last second's answers;
	// 0 cuts on every one.
	StrayShare float64
}

// sparseClimbMax bounds the clean time one success counts for the climb
// back: a success after a long quiet spell is evidence for a few seconds
// of health, not for all of the quiet.
const sparseClimbMax = 10 * time.Second

// DefaultAIMD are the design card's numbers.
func DefaultAIMD() AIMD {
	return AIMD{Floor: 0.5, Increase: 0.05, CutEvery: time.Second, ParkAfter: 20 * time.Second, ProbeEvery: time.Second,
		Approach: 0.9, Probe: 0.01, ProbeDoubling: 30 * time.Second, StrayShare: 0.1}
}

// Failure is a failure that was the destination's, with its cause.
type Failure struct {
	At    time.Time
	Cause string
}

// LastFailure is the latest failure recorded (zero: none): its cause may
// be newer than the last transition's (a degraded destination that
// fails otherwise now).
func (b *Budget) LastFailure() Failure { return b.lastFailure }

// Transition records one change of state.
type Transition struct {
	At       time.Time
	From, To State
	Cause    string
}

// Budget is a destination's adaptive token bucket: the configured rate is
// a ceiling; throttling (429, 503, timeouts, connection errors) cuts the
// refill rate at most once per CutEvery (to just below the partner's
// ceiling when it can learn it, else by half), clean traffic adds it back, a
// Retry-After holds the whole destination, and sustained failure parks it
// into probe mode. Not safe for concurrent use: the scheduler owns it.
type Budget struct {
	tune    AIMD
	bucket  *Bucket
	ceiling float64
	burst   int

	state        State
	lastCut      time.Time
	lastRaise    time.Time
	holdUntil    time.Time
	failingSince time.Time // first failure since the last success; zero when clean
	lastProbe    time.Time
	transitions  []Transition

	lastFailure Failure // the latest Failed or Throttled

	goodput   goodput   // 2xx over the last second
	failures  goodput   // Failed answers over the last second
	throttles goodput   // Throttled answers over the last second
	saturated time.Time // an attempt was last held back (no token, or the in-flight cap)
	learned   float64   // the partner's ceiling; 0: none remembered
	learnedAt time.Time // the cut that learned it
	// tentative: the last cut learned the ceiling, and no cut since has
	// said whether its second was a limit's or an outage's first;
	// unlearned and unlearnedAt are what it replaced (cutRate).
	tentative   bool
	unlearned   float64
	unlearnedAt time.Time

	changes uint64 // see Changes
}

// NewBudget returns a healthy budget at the configured rate (held at
// rates.Min or above, as SetLimits does).
func NewBudget(rate float64, burst int, tune AIMD, now time.Time) *Budget {
	rate = math.Max(rate, rates.Min)
	return &Budget{tune: tune, bucket: New(rate, burst, now), ceiling: rate, burst: burst, lastRaise: now}
}

// SetLimits changes the configured rate and burst in place. A healthy
// budget moves to the new rate; a degraded one keeps its cut rate, capped
// at the new ceiling. A rate under rates.Min (the control plane refuses
// one; this is the last line) is held at it: a bucket refilling at 1e-300
// would hold its events past their window, and stay there after the
// configured rate is restored.
//
// A lower rate applies now: the tokens on hand are capped at one second
// of it, as an automatic cut caps them. Otherwise an operator's cut from
// 200/s to 1/s during an incident would first let the burst's tokens (up
// to 200) through at once.
func (b *Budget) SetLimits(rate float64, burst int, now time.Time) {
	rate = math.Max(rate, rates.Min)
	lowered := rate < b.ceiling
	b.ceiling, b.burst = rate, burst
	current := rate
	if b.state != Healthy {
		current = math.Min(b.bucket.Rate(), rate)
	}
	b.bucket.SetLimits(current, burst, now)
	if lowered {
		b.bucket.Cap(current, now)
	}
}

// State is the current health state.
func (b *Budget) State() State { return b.state }

// Rate is the current refill rate (tokens/s).
func (b *Budget) Rate() float64 { return b.bucket.Rate() }

// Ceiling is the configured rate.
func (b *Budget) Ceiling() float64 { return b.ceiling }

// Tokens available at now.
func (b *Budget) Tokens(now time.Time) float64 { return b.bucket.Tokens(now) }

// HoldUntil is the end of a Retry-After hold (zero when none).
func (b *Budget) HoldUntil() time.Time { return b.holdUntil }

// EndHold ends a Retry-After hold now (an operator's resume).
func (b *Budget) EndHold() {
	if !b.holdUntil.IsZero() {
		b.holdUntil = time.Time{}
		b.changes++
	}
}

// Transitions are the recorded state changes, oldest first (the last 32).
func (b *Budget) Transitions() []Transition { return b.transitions }

func (b *Budget) moveTo(s State, now time.Time, cause string) {
	if s == b.state {
		return
	}
	b.changes++
	b.transitions = append(b.transitions, Transition{At: now, From: b.state, To: s, Cause: cause})
	if len(b.transitions) > 32 {
		b.transitions = b.transitions[len(b.transitions)-32:]
	}
	b.state = s
}

// Take spends the right to one attempt at now: a token, or while parked a
// probe slot.
func (b *Budget) Take(now time.Time) bool {
	if now.Before(b.holdUntil) {
		return false
	}
	if !b.holdUntil.IsZero() {
		// The hold is over. The bucket refilled meanwhile, up to the
		// burst: spent at once, that is a herd at a partner that just
		// asked to be left alone. As after a cut, one second of the rate
		// is on hand.
		b.bucket.Cap(b.bucket.Rate(), now)
		b.holdUntil = time.Time{}
	}
	if b.state == Parked {
		if !b.lastProbe.IsZero() && now.Sub(b.lastProbe) < b.tune.ProbeEvery {
			return false
		}
		b.lastProbe = now
		return true
	}
	if !b.bucket.Take(now) {
		b.saturated = now
		return false
	}
	return true
}

// Refund gives back what Take spent for an attempt that was not made (a
// token; a probe slot stays spent: probes are paced, not budgeted).
func (b *Budget) Refund(now time.Time) {
	if b.state != Parked {
		b.bucket.Refund(now)
	}
}

// Wait is how long from now until Take can succeed.
func (b *Budget) Wait(now time.Time) time.Duration {
	var d time.Duration
	if now.Before(b.holdUntil) {
		d = b.holdUntil.Sub(now)
	}
	if b.state == Parked {
		if !b.lastProbe.IsZero() {
			d = max(d, b.lastProbe.Add(b.tune.ProbeEvery).Sub(now))
		}
		return d
	}
	return max(d, b.bucket.Wait(now))
}

// Succeeded records a 2xx. It reports whether the destination just
// recovered from parked or degraded (so lanes held back by its failures
// may go at once).
func (b *Budget) Succeeded(now time.Time) (recovered bool) {
	b.failingSince = time.Time{}
	b.countSuccess(now)
	switch b.state {
	case Parked:
		// A probe got through: resume and climb from there.
		b.bucket.SetLimits(b.resumeRate(), b.burst, now)
		b.bucket.Cap(1, now)
		b.moveTo(Degraded, now, "probe succeeded")
		b.lastRaise = now
		return true
	case Degraded:
		if now.Sub(b.lastCut) < b.tune.CutEvery {
			b.lastRaise = now
			return false
		}
		// The climb is per clean second since the last raise or cut,
		// whichever came later: up to sparseClimbMax of them when no
		// failure came in the last second, so a destination with a
		// success every few seconds climbs back as fast in time as a busy
		// one (at 1 s per success it stayed degraded for minutes after
		// its incident), and never more than the time since its cut.
		from := b.lastRaise
		if b.lastCut.After(from) {
			from = b.lastCut
		}
		elapsed := math.Min(now.Sub(from).Seconds(), sparseClimbMax.Seconds())
		if now.Sub(b.lastFailure.At) < time.Second {
			elapsed = math.Min(elapsed, 1)
		}
		b.lastRaise = now
		rate := math.Min(b.ceiling, b.raisedRate(now, elapsed))
		b.bucket.SetLimits(rate, b.burst, now)
		if rate >= b.ceiling {
			b.learned = 0
			b.moveTo(Healthy, now, "rate back at the configured ceiling")
			return true
		}
	default:
		b.lastRaise = now
	}
	return false
}

// Throttled records the partner's explicit throttling (a 429, or any
// failure that came with a Retry-After): the rate is cut at most once per
// CutEvery, to just below the partner's ceiling when it can be learned
// (see cutRate), retryAfter (if any) holds every attempt until it passes,
// and failure with no success for ParkAfter parks the destination.
func (b *Budget) Throttled(now time.Time, retryAfter time.Duration, cause string) {
	b.lastFailure = Failure{At: now, Cause: cause}
	b.throttles.add(now)
	b.failed(now, retryAfter, cause, true)
}

// Failed records any other failure that is the destination's (a 5xx
// without Retry-After, 408/409/425, a timeout, a connection error; another
// 4xx, or a request never sent, is the event's and never comes here): as
// Throttled, but the cut halves the rate and learns no ceiling, and it
// cuts only when failures are at least StrayShare of the answers of the
// last second. A partner that fails a few requests at random says nothing
// about the rate it can take: learning from such a failure while a backlog
// keeps the budget busy took what the cut rate let through for the
// partner's ceiling, so each stray failure ratcheted the rate down by a
// tenth (a partner failing 5% of first attempts was held at ~1.3/s of its
// 50/s after a failover, in the chaos run); halving on each held it at
// ~5/s.
func (b *Budget) Failed(now time.Time, cause string) {
	b.lastFailure = Failure{At: now, Cause: cause}
	b.failures.add(now)
	if f := b.failures.rate(now); b.tune.StrayShare > 0 && f < b.tune.StrayShare*(f+b.goodput.rate(now)) {
		if b.failingSince.IsZero() {
			b.failingSince = now
		}
		return
	}
	b.failed(now, 0, cause, false)
}

func (b *Budget) failed(now time.Time, retryAfter time.Duration, cause string, learn bool) {
	if retryAfter > 0 {
		if until := now.Add(retryAfter); until.After(b.holdUntil) {
			b.holdUntil = until
			b.changes++
		}
	}
	if b.failingSince.IsZero() {
		b.failingSince = now
	}
	if b.state != Parked && now.Sub(b.failingSince) >= b.tune.ParkAfter {
		b.moveTo(Parked, now, fmt.Sprintf("no success for %s (last: %s)", now.Sub(b.failingSince).Round(time.Second), cause))
		b.lastProbe = now
		return
	}
	if b.state == Parked || now.Sub(b.lastCut) < b.tune.CutEvery {
		return
	}
	rate := b.bucket.Rate() / 2
	if learn {
		rate = b.cutRate(now)
	}
	rate = math.Max(b.tune.Floor, rate)
	b.lastCut = now
	b.changes++
	b.bucket.SetLimits(rate, b.burst, now)
	b.bucket.Cap(rate, now)
	b.moveTo(Degraded, now, cause)
}
