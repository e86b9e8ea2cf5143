// Package budget holds a destination's token bucket: no token, no attempt.
// When the bucket is empty it tells exactly when the next token arrives, so
// the scheduler sleeps instead of polling.
//
// A Budget adapts the bucket's rate to what the partner answers (the
// numbers are DefaultAIMD's):
//   - The configured rate is the ceiling. Each clean second adds back 5% of
//     it.
//   - A throttle (429, any 5xx, 408/409/425, timeout, connection error)
//     cuts the rate, at most once a second and never below 0.5/s. If the
//     destination was saturated within the last second (an attempt was due
//     and held back for want of a token or by the in-flight cap), the
//     requests the partner let through in that second are learned as its
//     ceiling and the cut goes to 90% of it; otherwise the rate is halved.
//     A second that let through under half the ceiling learned before is
//     an outage's, not a limit's: it teaches nothing, and a ceiling the
//     cut before it learned is taken back.
//   - With a learned ceiling the climb stops at 90% of it; above that it
//     adds 1% of the ceiling per clean second, doubling every 30 s without a
//     throttle. A ceiling that stays put costs a 429 or two every ~10 s; a
//     raised one is found again within minutes. The ceiling is forgotten
//     when the rate is back at the configured one, when the doubled climb
//     is as fast as the plain 5%, or when a second without a failure got
//     half as much again through (and at least 2/s more).
//   - A Retry-After holds every attempt until it passes. 20 s without a
//     success parks the destination: one probe a second; when one gets
//     through it resumes at a tenth of the configured rate (at most 90% of
//     a learned ceiling) and climbs from there.
package budget

import (
	"math"
	"time"
)

// Bucket is a token bucket. It is not safe for concurrent use; its owner
// (the scheduler) serialises access.
type Bucket struct {
	rate   float64 // tokens per second
	burst  float64
	tokens float64
	last   time.Time
}

// New returns a full bucket refilling at rate tokens/s up to burst.
func New(rate float64, burst int, now time.Time) *Bucket {
	b := &Bucket{last: now}
	b.SetLimits(rate, burst, now)
	b.tokens = b.burst
	return b
}

// SetLimits changes rate and burst in place, keeping the tokens already
// earned (capped at the new burst).
func (b *Bucket) SetLimits(rate float64, burst int, now time.Time) {
	b.refill(now)
	b.rate = math.Max(rate, 0)
	b.burst = math.Max(float64(burst), 1)
	b.tokens = math.Min(b.tokens, b.burst)
}

// Rate is the current refill rate in tokens per second.
func (b *Bucket) Rate() float64 { return b.rate }

// Tokens is the number of tokens available at now.
func (b *Bucket) Tokens(now time.Time) float64 {
	b.refill(now)
	return b.tokens
}

func (b *Bucket) refill(now time.Time) {
	if elapsed := now.Sub(b.last).Seconds(); elapsed > 0 {
		b.tokens = math.Min(b.burst, b.tokens+elapsed*b.rate)
		b.last = now
	}
}

// Cap lowers the tokens on hand to at most n (after a rate cut, so the
// cut applies now rather than after the burst is spent).
func (b *Bucket) Cap(n float64, now time.Time) {
	b.refill(now)
	b.tokens = math.Min(b.tokens, math.Max(n, 1))
}

// Take spends one token if one is available at now.
func (b *Bucket) Take(now time.Time) bool {
	b.refill(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Refund gives back a token taken for an attempt that was not made, up to
// the burst.
func (b *Bucket) Refund(now time.Time) {
	b.refill(now)
	b.tokens = math.Min(b.tokens+1, b.burst)
}

// Wait is how long from now until a token is available (0 if one is).
func (b *Bucket) Wait(now time.Time) time.Duration {
	b.refill(now)
	if b.tokens >= 1 {
		return 0
	}
	if b.rate <= 0 {
		return time.Hour
	}
	d := time.Duration(math.Ceil((1 - b.tokens) / b.rate * float64(time.Second)))
	return max(d, time.Microsecond)
}
