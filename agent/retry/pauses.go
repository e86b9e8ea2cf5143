package retry

import (
	"slices"
	"time"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Pause is one interval in which a destination or a subscription was
// paused: time that does not count against an event's window. End is zero
// while it lasts.
type Pause struct{ Start, End time.Time }

// Pauses are a destination's or a subscription's recent pauses.
type Pauses []Pause

// PausesFromProto is the control plane's pause intervals.
func PausesFromProto(list []*rivorav1.PauseInterval) Pauses {
	out := make(Pauses, 0, len(list))
	for _, p := range list {
		var end time.Time
		if p.GetEnd() != nil {
			end = p.GetEnd().AsTime()
		}
		out = append(out, Pause{Start: p.GetStart().AsTime(), End: end})
	}
	return out
}

// LastResume is when the last of ps ended (zero: none, or it lasts).
// The last in the list, not the latest time: a leader whose clock is
// behind an earlier one's still records a new resume there.
func (ps Pauses) LastResume() time.Time {
	if len(ps) == 0 {
		return time.Time{}
	}
	return ps[len(ps)-1].End
}

// within is the part of p inside [from, to] (ok false: none).
func (p Pause) within(from, to time.Time) (start, end time.Time, ok bool) {
	start, end = p.Start, p.End
	if end.IsZero() || end.After(to) {
		end = to
	}
	if start.Before(from) {
		start = from
	}
	return start, end, end.After(start)
}

// Between is how long ps paused between from and to.
func (ps Pauses) Between(from, to time.Time) time.Duration {
	var total time.Duration
	for _, p := range ps {
		if start, end, ok := p.within(from, to); ok {
			total += end.Sub(start)
		}
	}
	return total
}

// Union is how long ps or other paused between from and to, a time both
// paused counted once (an event routed by a paused subscription of a
// paused destination).
func (ps Pauses) Union(other Pauses, from, to time.Time) time.Duration {
	total := ps.Between(from, to) + other.Between(from, to)
	for _, p := range ps {
		if start, end, ok := p.within(from, to); ok {
			total -= other.Between(start, end)
		}
	}
	return total
}

// Merge is the time ps or other paused as one list in time order, a time
// both paused once (ps and other each without overlaps, as Union takes
// them): for a third list's Union.
func (ps Pauses) Merge(other Pauses) Pauses {
	all := slices.Concat(ps, other)
	slices.SortFunc(all, func(a, b Pause) int { return a.Start.Compare(b.Start) })
	out := all[:0]
	for _, p := range all {
		n := len(out)
		if n == 0 || (!out[n-1].End.IsZero() && p.Start.After(out[n-1].End)) {
			out = append(out, p)
			continue
		}
		if !out[n-1].End.IsZero() && (p.End.IsZero() || p.End.After(out[n-1].End)) {
			out[n-1].End = p.End
		}
	}
	return out
}

// Bounded is ps (in time order, without overlaps) kept to at most limit
// intervals (at least one): past limit, the two neighbours with the
// shortest gap between them fold into one, from the first's start to the
// second's end, again until limit remain. Folding counts that gap as
// paused too, so it over-credits an event's window by the shortest gaps
// (never by the span of every fold: stretches a day apart stay apart
// while closer ones can fold) and never under-credits it: dropping the
// oldest instead would forget a time the event was held, and a window
// could close on an event still pending from then. ps is not changed.
func (ps Pauses) Bounded(limit int) Pauses {
	limit = max(limit, 1)
	if len(ps) <= limit {
		return ps
	}
	out := slices.Clone(ps)
	for len(out) > limit {
		// Only the last may be open (no end): every gap has a start.
		shortest := 0
		for i := 1; i < len(out)-1; i++ {
			if out[i+1].Start.Sub(out[i].End) < out[shortest+1].Start.Sub(out[shortest].End) {
				shortest = i
			}
		}
		out[shortest].End = out[shortest+1].End
		out = slices.Delete(out, shortest+1, shortest+2)
	}
	return out
}
