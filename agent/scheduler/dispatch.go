package scheduler

import (
	"container/heap"
	"slices"
	"time"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/agent/limits"
)

// promote makes due every waiting lane whose time has come; a held lane
// whose window closed is queued to be handed out without a token.
func (s *Scheduler) promote(now time.Time) {
	for s.waiting.Len() > 0 {
		l := s.waiting[0]
		if l.wake.After(now) {
			return
		}
		heap.Pop(&s.waiting)
		s.ready(l, now)
	}
	s.expireDeadlines(now)
}

// expireDeadlines queues as expired every held head whose window closed,
// also when it is due (waiting for a token of a starved budget), so that
// it dies on time rather than when a token comes.
func (s *Scheduler) expireDeadlines(now time.Time) {
	for len(s.deadlines) > 0 && !s.deadlines[0].at.After(now) {
		dl := heap.Pop(&s.deadlines).(deadline)
		l := dl.lane
		if l.deadlineAt == dl.at.UnixNano() {
			l.deadlineAt = 0
		}
		if l.dest.dropped || len(l.entries) == 0 || l.entries[0].Seq != dl.seq || !l.head.HeldByDestination || !l.head.WindowEnd.Equal(dl.at) {
			continue // stale: the lane moved on or its head changed
		}
		switch l.state {
		case laneWaiting:
			heap.Remove(&s.waiting, l.heapIdx)
		case laneDue:
			s.undue(l)
		default:
			continue // in flight or already expired: its outcome decides
		}
		l.state = laneExpired
		s.expired = append(s.expired, l)
	}
}

// watchDeadline makes sure a held head's window end is in the deadline
// heap (once per head and window end).
func (s *Scheduler) watchDeadline(l *Lane) {
	at := l.head.WindowEnd
	if !l.head.HeldByDestination || at.IsZero() || at.UnixNano() == l.deadlineAt {
		return
	}
	l.deadlineAt = at.UnixNano()
	heap.Push(&s.deadlines, deadline{at: at, lane: l, seq: l.entries[0].Seq})
}

// undue takes a due lane out of its customer's queues.
func (s *Scheduler) undue(l *Lane) {
	c, d := l.cust, l.dest
	c.firsts.remove(l)
	c.retries.remove(l)
	d.due--
	if c.due() == 0 {
		c.active = false
		c.deficit = 0
		if i := slices.Index(d.active, c); i >= 0 {
			d.active = slices.Delete(d.active, i, i+1)
			if d.cursor > i {
				d.cursor--
			}
		}
	}
	if d.due == 0 && d.inRing {
		s.leaveRing(d)
	}
}

// ready makes a lane due, or queues it as expired when its head is held
// by its destination and its window has closed.
func (s *Scheduler) ready(l *Lane, now time.Time) {
	if l.head.HeldByDestination && !l.head.WindowEnd.IsZero() && !now.Before(l.head.WindowEnd) {
		l.state = laneExpired
		s.expired = append(s.expired, l)
		return
	}
	s.makeDue(l, now)
}

// pickExpired hands out a lane whose window closed while its destination
// held it: no token and no in-flight slot, since nothing is sent (the
// owner dead-letters it). A paused destination keeps its lanes: the pause
// moves their windows on.
func (s *Scheduler) pickExpired(now time.Time) *Attempt {
	for i, l := range s.expired {
		if !l.dest.deleted && (l.dest.paused || !l.dest.configured) {
			continue
		}
		s.expired = append(s.expired[:i], s.expired[i+1:]...)
		l.state = laneInFlight
		l.dest.inFlight++
		return &Attempt{Lane: l, Entry: l.entry(0), Head: l.head, Number: l.head.Attempts + 1, StartedAt: now, Expired: true, Unconfigured: l.dest.deleted}
	}
	return nil
}

// dropExpired removes l from the expired queue.
func (s *Scheduler) dropExpired(l *Lane) {
	if i := slices.Index(s.expired, l); i >= 0 {
		s.expired = append(s.expired[:i], s.expired[i+1:]...)
	}
}

// pick returns the next attempt, or how long to sleep (0: until kicked).
func (s *Scheduler) pick(now time.Time) (*Attempt, time.Duration) {
	var wait time.Duration
	soonest := func(d time.Duration) {
		if d > 0 && (wait == 0 || d < wait) {
			wait = d
		}
	}
	if s.waiting.Len() > 0 {
		soonest(s.waiting[0].wake.Sub(now))
	}
	if len(s.deadlines) > 0 {
		soonest(s.deadlines[0].at.Sub(now))
	}
	if s.workers > 0 && s.busy >= s.workers {
		return nil, wait // every worker is busy: Done kicks
	}
	if a := s.pickExpired(now); a != nil {
		return a, 0
	}
	if s.othersFirst(now) {
		// Other customers' attempts go before a big customer's, whatever
		// their class (workers.go).
		var othersWait time.Duration
		s.othersWaiting = false
		a := s.pickClasses(now, func(d time.Duration) {
			soonest(d)
			if d > 0 && (othersWait == 0 || d < othersWait) {
				othersWait = d
			}
		}, true)
		if a != nil {
			return a, 0
		}
		s.othersDue, s.othersBy, s.othersAt = false, "", time.Time{}
		if othersWait > 0 {
			s.othersAt = now.Add(othersWait)
		}
	}
	if a := s.pickClasses(now, soonest, false); a != nil {
		return a, 0
	}
	if a := s.pickProbe(now, soonest); a != nil {
		return a, 0
	}
	return nil, wait
}

// pickClasses hands out the next attempt among due destinations, class
// by class; with notBig, only to a customer that is not big.
func (s *Scheduler) pickClasses(now time.Time, soonest func(time.Duration), notBig bool) *Attempt {
	for class := limits.High; class < numClasses; class++ {
		if s.ringClass[class] == 0 {
			continue // none due: a pass over a ring of 10k destinations for nothing took 40% of the CPU at 10M pending
		}
		if a := s.pickClass(now, class, soonest, notBig); a != nil {
			return a
		}
	}
	return nil
}

// deletedInFlight is how many heads of a destination that is not in the
// config (deleted) may be out at once: nothing is sent, each costs the
// owner a load and, for a dead letter, a ledger write.
const deletedInFlight = 8

// inFlightCap is how many attempts d may have out: its max_in_flight, and
// one while parked. A parked destination's attempts probe whether it is
// back; one out says as much as ten, and a partner that hangs would hold
// a delivery worker per probe until its timeout (a customer's own
// destinations at a hanging endpoint took most of the agent's workers).
// A deleted one's heads are never sent: deletedInFlight.
func (d *destination) inFlightCap() int {
	if d.deleted {
		return deletedInFlight
	}
	if d.budget != nil && d.budget.State() == budget.Parked {
		return 1
	}
	return d.limits.MaxInFlight
}

// pickProbe takes, for a parked destination with nothing due, a held
// lane (probeLane), so that one probe per second finds out when the
// destination is back even while every lane is in backoff.
func (s *Scheduler) pickProbe(now time.Time, soonest func(time.Duration)) *Attempt {
	for d := range s.parked {
		if d.inRing || !d.configured || d.paused || d.dropped || d.inFlight >= d.inFlightCap() || s.workersReserved(d) || d.budget.State() != budget.Parked {
			continue
		}
		probe := d.probeLane()
		if probe == nil {
			continue
		}
		if !d.budget.Take(now) {
			soonest(d.budget.Wait(now))
			continue
		}
		heap.Remove(&s.waiting, probe.heapIdx)
		probe.state = laneInFlight
		d.inFlight++
		d.probedCustomer = probe.ID.Customer
		return &Attempt{Lane: probe, Entry: probe.entry(0), Head: probe.head, Number: probe.head.Attempts + 1, StartedAt: now, EarlyProbe: true}
	}
	return nil
}

// probeLane is the held lane that probes d next, in one pass over its
// lanes: the customers with held lanes take turns, in customer id order
// from the one after the customer that probed last, and within a
// customer the lane that would retry first goes. So on a shared
// destination a customer whose events the partner refuses (or whose
// lanes happen to close first) does not decide alone whether it is back.
// nil when no lane is held.
func (d *destination) probeLane() *Lane {
	var next, first *Lane // of the first customer after the last prober; of the first customer
	for _, l := range d.lanes {
		if l.state != laneWaiting || !l.head.HeldByDestination {
			continue
		}
		if probesBefore(l, first) {
			first = l
		}
		if l.ID.Customer > d.probedCustomer && probesBefore(l, next) {
			next = l
		}
	}
	if next == nil {
		return first // every customer had its turn: round again
	}
	return next
}

// probesBefore orders held lanes for probeLane: by customer id, then the
// earlier wake (nil, none yet, goes last).
func probesBefore(l, than *Lane) bool {
	switch {
	case than == nil:
		return true
	case l.ID.Customer != than.ID.Customer:
		return l.ID.Customer < than.ID.Customer
	}
	return l.wake.Before(than.wake)
}

// pickClass hands out the next attempt among due destinations of one
// class, round robin; with notBig, only to a customer holding less than
// half the workers. A deleted destination's heads go without a token
// (Attempt.Unconfigured); a destination not configured yet holds its
// lanes.
func (s *Scheduler) pickClass(now time.Time, class limits.Class, soonest func(time.Duration), notBig bool) *Attempt {
	var passOver func(customer string) bool
	switch {
	case notBig:
		passOver = s.big
	case s.reservedForOthers():
		passOver = s.big // the reserve is the others' (workers.go)
	}
	for i := 0; i < len(s.ring); i++ {
		idx := (s.rr + i) % len(s.ring)
		d := s.ring[idx]
		if d.class != class || !d.deleted && (!d.configured || d.paused) {
			continue // a deleted destination's heads go to the owner, paused or not
		}
		if d.inFlight >= d.inFlightCap() {
			if !d.deleted && d.inFlight >= d.limits.MaxInFlight {
				d.budget.Saturated(now)
			}
			continue
		}
		if notBig && s.onlyBig(d) || !notBig && s.reservedForOthers() && s.onlyBig(d) {
			continue
		}
		if s.workersReserved(d) {
			if notBig {
				s.othersWaiting = true
			}
			continue // Done kicks
		}
		if !d.deleted && !d.budget.Take(now) {
			soonest(d.budget.Wait(now))
			continue
		}
		l := d.nextLane(passOver)
		s.rr = idx + 1
		if d.due == 0 {
			s.leaveRing(d)
		}
		l.state = laneInFlight
		d.inFlight++
		return &Attempt{Lane: l, Entry: l.entry(0), Head: l.head, Number: l.head.Attempts + 1, StartedAt: now, BudgetWait: max(time.Duration(now.UnixNano()-l.dueSince), 0), Unconfigured: d.deleted}
	}
	return nil
}

// makeDue queues l as due since now: from then on its head waits only for
// its destination's budget token, a free in-flight slot and its turn.
func (s *Scheduler) makeDue(l *Lane, now time.Time) {
	l.state = laneDue
	l.dueSince = now.UnixNano()
	c, d := l.cust, l.dest
	if l.head.Attempts == 0 {
		c.firsts.push(l)
	} else {
		if c.retries.len() == 0 {
			c.firstsPassed = 0 // counted for retries that left otherwise
		}
		c.retries.push(l)
	}
	d.due++
	if !s.big(c.id) && d.configured && !d.paused && d.inFlight < d.inFlightCap() {
		s.noteOthersDue(c.id, d, now)
	}
	if !c.active {
		c.active = true
		d.active = append(d.active, c)
	}
	if !d.inRing {
		d.inRing = true
		s.ring = append(s.ring, d)
		s.ringClass[d.class]++
	}
}

func (s *Scheduler) leaveRing(d *destination) {
	for i, x := range s.ring {
		if x == d {
			s.ring = append(s.ring[:i], s.ring[i+1:]...)
			s.ringClass[d.class]--
			if s.rr > i {
				s.rr--
			}
			break
		}
	}
	d.inRing = false
}

// schedule puts an idle lane with entries where it belongs. A head held
// by its parked destination waits for the destination (releaseHeld) or
// for its window to close, not for its own retry time.
func (s *Scheduler) schedule(l *Lane, now time.Time) {
	if len(l.entries) == 0 || l.dest.dropped || s.holdForSubscription(l) {
		return
	}
	s.watchDeadline(l)
	l.wake = l.head.NotBefore
	if l.head.HeldByDestination && s.parked[l.dest] && l.head.WindowEnd.After(l.wake) {
		l.wake = l.head.WindowEnd
	}
	if l.wake.After(now) {
		l.state = laneWaiting
		heap.Push(&s.waiting, l)
		return
	}
	s.ready(l, now)
}
