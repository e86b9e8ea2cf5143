package budget

import (
	"math"
	"time"
)

// MaxHold is the longest Retry-After hold (delivery.MaxRetryAfter: a
// partner's "come back tomorrow" is held to that).
const MaxHold = time.Hour

// Saved is what of a budget outlives its process: the health it reached
// and why, the rate its last cut left, the partner's learned ceiling and a
// Retry-After hold. The partition's owner keeps it in the partition's
// ledger, so a restart, or another agent taking the partition over, does
// not meet a throttling or failing partner at the full configured rate
// (the burst at once) or ignore the hold it asked for.
//
// The climb since the last cut is not saved (each success raises the rate;
// a write per success is too many): a restored budget starts again from
// its last cut and climbs from there.
type Saved struct {
	State State   `json:"state"`
	Rate  float64 `json:"rate"`
	// Last is the transition into State (with its time and cause).
	Last         Transition `json:"last"`
	LastCut      time.Time  `json:"last_cut,omitzero"`
	Learned      float64    `json:"learned,omitempty"`
	LearnedAt    time.Time  `json:"learned_at,omitzero"`
	HoldUntil    time.Time  `json:"hold_until,omitzero"`
	FailingSince time.Time  `json:"failing_since,omitzero"`
	LastFailure  Failure    `json:"last_failure,omitzero"`
	At           time.Time  `json:"at"`
}

// Changes counts the changes of what Save records, but the climb: a move
// to another state, a cut, a hold begun, moved or ended. Its owner saves
// the budget when it moved.
func (b *Budget) Changes() uint64 { return b.changes }

// Save returns what a restart should keep of the budget at now.
func (b *Budget) Save(now time.Time) Saved {
	s := Saved{
		State: b.state, Rate: b.bucket.Rate(), LastCut: b.lastCut,
		Learned: b.learned, LearnedAt: b.learnedAt, FailingSince: b.failingSince,
		LastFailure: b.lastFailure, At: now,
	}
	if now.Before(b.holdUntil) {
		s.HoldUntil = b.holdUntil
	}
	if n := len(b.transitions); n > 0 {
		s.Last = b.transitions[n-1]
	}
	return s
}

// Restore takes up what Save recorded before a restart, on a budget made
// at the configured rate that has seen no attempt yet: a hold that has not
// ended holds it; a degraded budget goes on from its last cut's rate
// (capped at the configured one, with one second of it on hand), a parked
// one probes (the first at once). A healthy record restores only its hold.
func (b *Budget) Restore(s Saved, now time.Time) {
	// Another agent's clock may run ahead: a hold is at most as long
	// as a partner may ask for.
	hold := s.HoldUntil
	if longest := now.Add(MaxHold); hold.After(longest) {
		hold = longest
	}
	if hold.After(now) && hold.After(b.holdUntil) {
		b.holdUntil = hold
	}
	b.lastFailure = s.LastFailure
	if s.State != Degraded && s.State != Parked {
		return
	}
	rate := math.Max(b.tune.Floor, math.Min(s.Rate, b.ceiling))
	b.bucket.SetLimits(rate, b.burst, now)
	b.bucket.Cap(rate, now)
	b.lastCut, b.lastRaise = s.LastCut, now
	b.learned, b.learnedAt = s.Learned, s.LearnedAt
	if s.State == Parked {
		// A degraded budget's failures may have been followed by
		// successes, which do not save it again: the restart is no
		// evidence of failure, and failing since then would park it at
		// its next failure.
		b.failingSince = s.FailingSince
	}
	b.lastProbe = time.Time{}
	last := s.Last
	if last.To != s.State {
		last = Transition{At: s.At, From: Healthy, To: s.State, Cause: "restored"}
	}
	b.transitions = append(b.transitions, last)
	b.state = s.State
	b.changes++
}
