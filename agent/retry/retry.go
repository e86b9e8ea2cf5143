// Package retry decides when a failed attempt is tried again and when an
// event stops being retried.
package retry

import (
	"math/rand/v2"
	"time"
)

// Policy is the retry policy of one destination.
type Policy struct {
	// Base is the first backoff (1 s); each failure doubles it.
	Base time.Duration
	// Cap bounds one backoff (1 h).
	Cap time.Duration
	// MaxAttempts ends retrying after this many attempts (8).
	MaxAttempts int
	// Window ends retrying this long after acceptance (72 h).
	Window time.Duration
}

// Defaults of the design card.
const (
	DefaultBase        = time.Second
	DefaultCap         = time.Hour
	DefaultMaxAttempts = 8
	DefaultWindow      = 72 * time.Hour
)

// DefaultPolicy returns the default retry policy.
func DefaultPolicy() Policy {
	return Policy{Base: DefaultBase, Cap: DefaultCap, MaxAttempts: DefaultMaxAttempts, Window: DefaultWindow}
}

// Backoff returns the nominal wait after the given number of failed attempts
// (1 → Base, 2 → 2·Base, …), capped.
func (p Policy) Backoff(attempts int) time.Duration {
	d := p.Base
	for i := 1; i < attempts; i++ {
		d *= 2
		if d >= p.Cap {
			return p.Cap
		}
	}
	return min(d, p.Cap)
}

// Jittered spreads a nominal backoff d over [d/2, d] so that lanes that
// failed together do not retry together ("equal jitter").
func Jittered(d time.Duration) time.Duration {
	half := d / 2
	if half <= 0 {
		return d
	}
	return half + rand.N(half+1)
}

// Verdict is what happens to an event after a failed attempt.
type Verdict int

const (
	// Retry: try again at NotBefore.
	Retry Verdict = iota
	// ExhaustedAttempts: max attempts reached.
	ExhaustedAttempts
	// ExhaustedWindow: the next attempt would fall outside the window (for
	// Hold: the window closed).
	ExhaustedWindow
)

// Decision is the outcome of Next.
type Decision struct {
	Verdict   Verdict
	NotBefore time.Time
}

// WindowEnd is when the window of an event whose window started at
// windowStart (acceptance, moved on by paused time) closes; zero when the
// policy has no window.
func (p Policy) WindowEnd(windowStart time.Time) time.Time {
	if p.Window <= 0 {
		return time.Time{}
	}
	return windowStart.Add(p.Window)
}

// Hold decides what follows a failure that is not charged to the event
// (its destination's fault while the destination is not otherwise
// healthy): the event keeps its attempts and waits, never past its
// window; only a closed window ends it (ExhaustedWindow), never earlier.
func (p Policy) Hold(windowStart, now time.Time, wait time.Duration) Decision {
	end := p.WindowEnd(windowStart)
	if end.IsZero() {
		return Decision{Verdict: Retry, NotBefore: now.Add(wait)}
	}
	if !now.Before(end) {
		return Decision{Verdict: ExhaustedWindow}
	}
	at := now.Add(wait)
	if at.After(end) {
		at = end
	}
	return Decision{Verdict: Retry, NotBefore: at}
}

// Next decides what follows the attempts-th failed attempt of an event
// accepted at acceptedAt. wait is the backoff to use (usually
// Jittered(Backoff(attempts))), passed in so tests are exact.
func (p Policy) Next(attempts int, acceptedAt, now time.Time, wait time.Duration) Decision {
	if p.MaxAttempts > 0 && attempts >= p.MaxAttempts {
		return Decision{Verdict: ExhaustedAttempts}
	}
	at := now.Add(wait)
	if p.Window > 0 && at.After(acceptedAt.Add(p.Window)) {
		return Decision{Verdict: ExhaustedWindow}
	}
	return Decision{Verdict: Retry, NotBefore: at}
}

// WindowClosedBy is the latest acceptance time of an event whose window,
// window long and held by the pauses paused reports (as its owner counts
// it: from acceptance, moved on by paused time), has closed at now: every
// event accepted then or before is past it. Zero when window is not
// positive (no window closes).
func WindowClosedBy(window time.Duration, now time.Time, paused func(from, to time.Time) time.Duration) time.Time {
	if window <= 0 {
		return time.Time{}
	}
	target := now.Add(-window)
	// closed(a): a's window end, a + paused(a, now) + window, is not
	// after now. a + paused(a, now) never falls as a grows (a paused
	// second moves both by the same), so the times that closed are all
	// before the ones that did not, and a binary search finds the last.
	closed := func(a time.Time) bool { return !a.Add(paused(a, now)).After(target) }
	if closed(target) {
		return target
	}
	lo, hi := target.Add(-paused(time.Time{}, now)), target // closed(lo), !closed(hi)
	for hi.Sub(lo) > time.Nanosecond {
		mid := lo.Add(hi.Sub(lo) / 2)
		if closed(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
