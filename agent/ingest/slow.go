package ingest

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// slowPublishAfter is how long a publish may take before it is logged,
// at WARN, with where its time went: a publish normally takes
// milliseconds, and one that takes seconds waited on something an
// operator wants named (its turn, a stream's answer, a leader moving).
const slowPublishAfter = 2 * time.Second

// The steps of a publish that phases times.
const (
	phaseAdmit    = iota // validation, disk room, its customer's turn
	phaseRecord          // idempotency records, deliveries built
	phasePrecheck        // the streams asked about its keys
	phaseStore           // its events written and acknowledged
	phaseVerify          // duplicates compared with their originals
	phaseCount
)

var phaseNames = [phaseCount]string{"admit", "record", "precheck", "store", "verify"}

// phases times a publish's steps: a clock read per step, so that a slow
// one says where its time went.
type phases struct {
	start, last time.Time
	took        [phaseCount]time.Duration
	next        int // the step under way (phaseCount: all done)
}

func startPhases() phases {
	now := time.Now()
	return phases{start: now, last: now}
}

// done ends step i: the time since the previous step ended is its.
func (p *phases) done(i int) {
	now := time.Now()
	p.took[i] = now.Sub(p.last)
	p.last = now
	p.next = i + 1
}

// slowLogs keeps the slow-publish log to a line a second: in an
// overload every publish may be slow.
type slowLogs struct {
	last    atomic.Int64 // the last line's time since slowLogEpoch (0: none yet)
	skipped atomic.Int64 // slow publishes not logged since
}

// slowLogEvery is the least time between two slow-publish lines.
const slowLogEvery = time.Second

// slowLogEpoch is what slowLogs counts from: a monotonic clock, which a
// step of the wall clock does not move.
var slowLogEpoch = time.Now()

// take reports whether a slow publish at now is logged, and how many
// were not since the last line.
func (s *slowLogs) take(now time.Time) (bool, int64) {
	at := int64(now.Sub(slowLogEpoch))
	last := s.last.Load()
	if (last != 0 && at-last < int64(slowLogEvery)) || !s.last.CompareAndSwap(last, at) {
		s.skipped.Add(1)
		return false, 0
	}
	return true, s.skipped.Swap(0)
}

// logIfSlow logs the publish of events events, answered err, when it
// took slowPublishAfter or more (at most a line a second, saying how many
// more were slow since): the time of each step it finished, and the step
// it ended in (and for how long) if it did not finish them all.
func (p *phases) logIfSlow(log *slog.Logger, every *slowLogs, events int, err error) {
	now := time.Now()
	took := now.Sub(p.start)
	if took < slowPublishAfter || log == nil {
		return
	}
	logged, skipped := every.take(now)
	if !logged {
		return
	}
	attrs := make([]any, 0, 10+2*phaseCount)
	attrs = append(attrs, "took", took.Round(time.Millisecond), "events", events)
	if skipped > 0 {
		attrs = append(attrs, "more_slow_since_last_line", skipped)
	}
	for i, d := range p.took[:p.next] {
		attrs = append(attrs, phaseNames[i], d.Round(time.Millisecond))
	}
	if p.next < phaseCount {
		attrs = append(attrs, "ended_in", phaseNames[p.next], phaseNames[p.next], now.Sub(p.last).Round(time.Millisecond))
	}
	if err != nil {
		attrs = append(attrs, "error", err)
	}
	log.Warn("slow publish: where its time went", attrs...)
}
