package scheduler

import (
	"slices"
	"time"

	"github.com/rivora/rivora/agent/budget"
)

// Rate history: each destination keeps its last 15 minutes in 10-second
// buckets — attempts and how they were answered, and the budget's rates
// — so an operator sees what its budget did without a metrics stack, and
// health carries the last minute's 429 and 5xx share. Fixed size per
// destination; written under the scheduler's lock on every outcome.
const (
	RateBucket      = 10 * time.Second
	rateBuckets     = 90 // 15 minutes
	lastMinuteSlots = int(time.Minute / RateBucket)
)

// RateSample is one bucket of a destination's history.
type RateSample struct {
	Start                   time.Time
	ConfiguredRate          float64
	CurrentRate             float64
	Attempts, Delivered     int
	Throttled, ServerErrors int
}

// rateSlot is a RateSample in the ring: slot is the bucket's number
// since the epoch (unix time / RateBucket); a slot whose number is not
// the one asked for is stale (older than the ring).
type rateSlot struct {
	slot                    int64
	configured, current     float64
	rated                   bool // configured and current were sampled
	attempts, delivered     int32
	throttled, serverErrors int32
	noAnswer                int32 // status 0: no answer came
	clientErrors            int32 // another 4xx than 429: the partner refused the event
	arrivals                int32 // events that joined the destination's lanes
}

type rateRing struct {
	slots [rateBuckets]rateSlot
	// since is the bucket this scheduler began to keep the destination
	// in: history starts there, not before (a restart, or a partition
	// that came from another agent, knows nothing of the time before).
	since int64
}

func slotOf(t time.Time) int64 { return t.UnixNano() / int64(RateBucket) }

// at returns the ring's slot for bucket n, reset when it held an older one.
func (r *rateRing) at(n int64) *rateSlot {
	s := &r.slots[n%rateBuckets]
	if s.slot != n {
		*s = rateSlot{slot: n}
	}
	return s
}

// observe records one attempt's answer (status 0: none) at now, with the
// budget's rates after it.
func (r *rateRing) observe(now time.Time, status int, configured, current float64) {
	s := r.at(slotOf(now))
	s.attempts++
	switch {
	case status >= 200 && status < 300:
		s.delivered++
	case status == 429:
		s.throttled++
	case status >= 400 && status < 500:
		s.clientErrors++
	case status >= 500:
		s.serverErrors++
	case status == 0:
		s.noAnswer++
	}
	s.configured, s.current, s.rated = configured, current, true
}

// arrive records n events that joined the destination's lanes at now.
func (r *rateRing) arrive(now time.Time, n int) {
	r.at(slotOf(now)).arrivals += int32(n)
}

// minuteCounts are the last minute's attempts and how they were answered,
// and the events that arrived.
type minuteCounts struct {
	attempts, throttled, serverErrors, noAnswer, clientErrors, arrivals int
}

// lastMinute is the attempts, 429s, 5xx answers, other 4xx answers and
// attempts without an answer of the last minute's buckets (the current one
// included), and the events that arrived in them.
func (r *rateRing) lastMinute(now time.Time) minuteCounts {
	var c minuteCounts
	n := slotOf(now)
	for i := range int64(lastMinuteSlots) {
		if s := &r.slots[(n-i)%rateBuckets]; s.slot == n-i {
			c.attempts += int(s.attempts)
			c.throttled += int(s.throttled)
			c.serverErrors += int(s.serverErrors)
			c.noAnswer += int(s.noAnswer)
			c.clientErrors += int(s.clientErrors)
			c.arrivals += int(s.arrivals)
		}
	}
	return c
}

// history is the last 15 minutes, oldest first, or fewer buckets when
// the ring began (since) within them: what came before is unknown here,
// not quiet. The current bucket's rates are now's (configured, current).
// A bucket with no attempt carries the rates of the one before it, and
// those before the first sampled one the first sample's: the budget
// moves on outcomes (and on recovery toward the configured rate, which
// the next attempt samples).
func (r *rateRing) history(now time.Time, configured, current float64) []RateSample {
	n := slotOf(now)
	buckets := rateBuckets
	if known := n - r.since + 1; r.since > 0 && known < int64(buckets) {
		buckets = int(max(known, 1))
	}
	out := make([]RateSample, buckets)
	first := -1
	for i := range buckets {
		slot := n - int64(buckets) + 1 + int64(i)
		sample := RateSample{Start: time.Unix(0, slot*int64(RateBucket))}
		if s := &r.slots[slot%rateBuckets]; s.slot == slot {
			sample.Attempts, sample.Delivered = int(s.attempts), int(s.delivered)
			sample.Throttled, sample.ServerErrors = int(s.throttled), int(s.serverErrors)
			if s.rated {
				sample.ConfiguredRate, sample.CurrentRate = s.configured, s.current
				if first < 0 {
					first = i
				}
			} else if i > 0 && first >= 0 {
				sample.ConfiguredRate, sample.CurrentRate = out[i-1].ConfiguredRate, out[i-1].CurrentRate
			}
		} else if first >= 0 {
			sample.ConfiguredRate, sample.CurrentRate = out[i-1].ConfiguredRate, out[i-1].CurrentRate
		}
		out[i] = sample
	}
	last := len(out) - 1
	out[last].ConfiguredRate, out[last].CurrentRate = configured, current
	if first < 0 {
		first = last
	}
	for i := range first {
		out[i].ConfiguredRate, out[i].CurrentRate = out[first].ConfiguredRate, out[first].CurrentRate
	}
	return out
}

// RateHistory is destination id's last 15 minutes and its budget's last
// health transitions, oldest first (nil when the scheduler does not have
// it).
func (s *Scheduler) RateHistory(id string) ([]RateSample, []budget.Transition) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dests[id]
	if d == nil {
		return nil, nil
	}
	var configured, current float64
	var transitions []budget.Transition
	if d.budget != nil {
		configured, current = d.budget.Ceiling(), d.budget.Rate()
		transitions = slices.Clone(d.budget.Transitions())
	}
	return d.rates.history(s.clock.Now(), configured, current), transitions
}
