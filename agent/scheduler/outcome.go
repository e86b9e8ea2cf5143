package scheduler

import (
	"container/heap"
	"time"

	"github.com/rivora/rivora/agent/budget"
)

// Observe feeds one attempt's result into its destination's budget:
// status is the HTTP status (0: no response); destinationFault marks
// failures that are the destination's (429, 502/503/504, 408/409/425,
// timeouts, connection errors) as opposed to the event's (a 500 or another
// 4xx). Call it before Succeeded, Retry or Dead. When the destination
// recovers, lanes held back only by its failures become due at once, paced
// by the budget.
//
// It returns the transition the attempt caused, if any (for the log).
func (s *Scheduler) Observe(a *Attempt, status int, destinationFault bool, retryAfter time.Duration, cause string) (budget.Transition, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := a.Lane.dest
	if d.dropped || d.budget == nil {
		return budget.Transition{}, false
	}
	before := lastTransition(d.budget)
	d.statuses.add(status)
	now := s.clock.Now()
	switch {
	case status >= 200 && status < 300:
		if d.budget.Succeeded(now) {
			s.releaseHeld(d, now)
		}
	case destinationFault:
		d.budget.Throttled(now, retryAfter, cause)
	}
	if d.budget.State() == budget.Parked {
		s.parked[d] = true
	} else {
		delete(s.parked, d)
	}
	s.wake()
	if after := lastTransition(d.budget); after != before {
		return after, true
	}
	return budget.Transition{}, false
}

func lastTransition(b *budget.Budget) budget.Transition {
	if tr := b.Transitions(); len(tr) > 0 {
		return tr[len(tr)-1]
	}
	return budget.Transition{}
}

// releaseHeld makes due every waiting lane of d held by d's failures.
func (s *Scheduler) releaseHeld(d *destination, now time.Time) {
	for _, l := range d.lanes {
		if l.state == laneWaiting && l.head.HeldByDestination {
			heap.Remove(&s.waiting, l.heapIdx)
			l.head.NotBefore = now
			s.makeDue(l)
		}
	}
}

// Outcome tells the partition owner what a finished attempt left behind.
type Outcome struct {
	// Drained: the lane is now empty and forgotten.
	Drained bool
	// PurgeLedger: the drained lane had a ledger head record to purge.
	PurgeLedger bool
}

// advance pops the head of a lane after success or death.
func (s *Scheduler) advance(a *Attempt) Outcome {
	l, d := a.Lane, a.Lane.dest
	d.inFlight--
	if d.dropped {
		return Outcome{}
	}
	l.entries = l.entries[1:]
	d.pending--
	l.head = Head{}
	l.state = laneIdle
	if len(l.entries) > 0 {
		s.makeDue(l)
		return Outcome{}
	}
	out := Outcome{Drained: true, PurgeLedger: l.hasLedger}
	s.forget(l)
	return out
}

// forget removes an empty lane, and its customer once it has no lanes.
func (s *Scheduler) forget(l *Lane) {
	d, c := l.dest, l.cust
	delete(d.lanes, l.Subject)
	c.lanes--
	if c.lanes == 0 && !c.active {
		delete(d.customers, c.id)
	}
}

// Succeeded reports a delivered head: the lane advances.
func (s *Scheduler) Succeeded(a *Attempt) Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.wake()
	return s.advance(a)
}

// Dead reports a head whose attempts or window ran out, already recorded as
// a dead letter: the lane advances.
func (s *Scheduler) Dead(a *Attempt) Outcome {
	return s.Succeeded(a)
}

// Retry reports a failed head that waits until head.NotBefore. The caller
// has recorded head in the ledger.
func (s *Scheduler) Retry(a *Attempt, head Head) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := a.Lane
	l.dest.inFlight--
	l.head = head
	l.hasLedger = true
	l.state = laneIdle
	s.schedule(l, s.clock.Now())
	s.wake()
}

// Release returns an attempt that was not made (shutdown): the lane is due
// again with unchanged state.
func (s *Scheduler) Release(a *Attempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := a.Lane
	l.dest.inFlight--
	l.state = laneIdle
	s.schedule(l, s.clock.Now())
	s.wake()
}
