package scheduler

import "time"

// The delivery workers are shared by every destination. Were each free to
// take workers up to its max_in_flight, two slow partners (32 in flight
// each by default, 10 s timeouts) would hold all 64 workers, and every
// other destination's attempts would wait seconds for one: "a failing
// destination costs only itself" would hold for one slow partner, not for
// two. So once the workers are counted, the scheduler hands out no more
// attempts than there are workers (an attempt never waits for a worker
// behind slow ones), and keeps the last reserveOf(workers) of them for
// destinations with nothing in flight: slow partners holding many
// attempts each cannot starve any other destination. (As many slow
// partners as workers, one attempt each, still fill the pool.)
//
// Customers are counted too. One customer's destinations at a hanging
// endpoint would otherwise hold most workers for their timeouts, and the
// workers they free would go round robin over destinations, most of them
// its own: every other customer's deliveries would wait. So while a
// customer holds half the workers or more (it is "big"), every other
// customer's due attempt goes before its own, and the workers its hung
// attempts free go to the others first: while another customer's due
// lane waits for a worker, a big customer takes none of the reserve
// either (a worker freed into the reserve would go back to it, and the
// others' destinations with attempts out would never grow). It still
// takes what nobody else is waiting for, so a big customer that alone
// has work keeps every worker busy; another customer's attempt arriving
// when every worker is taken waits for the first of them to end.
// Attempts of events published without a customer are not counted by
// customer.

// LimitWorkers tells the scheduler how many delivery workers take its
// attempts (0: not counted, as when a test takes them itself). Each
// worker calls Done when it is free again.
func (s *Scheduler) LimitWorkers(workers int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.workers = max(workers, 0)
	s.bigCustomers, s.bigBusy = 0, 0
	for _, n := range s.customerBusy {
		if s.bigAt(n) {
			s.bigCustomers++
			s.bigBusy += n
		}
	}
	s.othersDue, s.othersBy = true, ""
	s.wake()
}

// Done frees the worker that took a from Attempts, once it is finished
// with it (settled or not).
func (s *Scheduler) Done(a *Attempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freeWorker(a) {
		s.wake()
	}
}

// freeWorker counts a's worker free, once; it reports whether a held
// one. s.mu is held.
func (s *Scheduler) freeWorker(a *Attempt) bool {
	if !a.worker {
		return false
	}
	a.worker = false
	s.busy--
	if s.bigCustomers > 0 && (s.othersWaiting || a.Lane.dest.due > 0 && !s.onlyBig(a.Lane.dest)) {
		// Its worker, or its slot (a shared destination at its
		// in-flight cap), may be what another customer's due lane
		// waited for.
		s.noteOthers("")
	}
	if id := a.Lane.ID.Customer; id != "" {
		n := s.customerBusy[id] - 1
		switch {
		case s.bigAt(n+1) && !s.bigAt(n):
			s.bigCustomers--
			s.bigBusy -= n + 1
			s.noteOthers(id) // its lanes are others' now
		case s.bigAt(n):
			s.bigBusy--
		default:
			s.noteOthers(id) // its destination may take another
		}
		if n > 0 {
			s.customerBusy[id] = n
		} else {
			delete(s.customerBusy, id)
		}
	}
	return true
}

// othersFirst reports whether pick looks for an attempt of a customer
// that is not big before a big customer's: there is a big customer, and
// since the last look found none another customer's lane became due, an
// attempt ended on a destination where another customer has a due lane
// (or one of that customer's ended), a destination's limits, pause or
// health changed, or the budget wait that look found has passed.
// (Between these the look would find nothing: it walks every due
// destination, thousands of a big customer's, for nothing.) s.mu is
// held.
func (s *Scheduler) othersFirst(now time.Time) bool {
	return s.bigCustomers > 0 && (s.othersDue || !s.othersAt.IsZero() && !now.Before(s.othersAt))
}

// noteOthersDue notes a lane of the customer with id, not big, due on d,
// whose in-flight cap has room: the look for others has something to
// find now, or, while a big customer waits behind it and d has no token,
// once the token comes (a look now would walk every due destination for
// nothing). s.mu is held.
func (s *Scheduler) noteOthersDue(id string, d *destination, now time.Time) {
	if s.bigCustomers == 0 {
		s.noteOthers(id)
		return
	}
	wait := d.budget.Wait(now)
	if wait == 0 {
		s.noteOthers(id)
		return
	}
	if at := now.Add(wait); s.othersAt.IsZero() || at.Before(s.othersAt) {
		s.othersAt = at
	}
}

// noteOthers notes that something of the customer with id changed that
// may let pick hand it an attempt (othersFirst). It keeps which customer
// that was while it is one alone: a customer whose own lanes were all
// that changed, and which then becomes big, leaves nothing of others to
// look for (a deployment with one customer, at the edge of half the
// workers, would otherwise walk its destinations at every crossing).
// s.mu is held.
func (s *Scheduler) noteOthers(id string) {
	switch {
	case !s.othersDue:
		s.othersDue, s.othersBy = true, id
	case s.othersBy != id:
		s.othersBy = "" // more than one customer, or none named
	}
}

// reserveOf is how many of workers only a destination with nothing in
// flight may take: an eighth, at least one.
func reserveOf(workers int) int { return max(workers/8, 1) }

// workersReserved reports whether d, which has attempts in flight, must
// leave the free workers to destinations with none. s.mu is held.
func (s *Scheduler) workersReserved(d *destination) bool {
	return d.inFlight > 0 && s.inReserve()
}

// inReserve reports whether only the reserve of the workers is free.
// s.mu is held.
func (s *Scheduler) inReserve() bool {
	return s.workers > 0 && s.busy >= s.workers-reserveOf(s.workers)
}

// reservedForOthers reports whether a big customer must leave the
// reserve: another customer's due lane waits for a worker (the last look
// for others found one held back by the reserve). s.mu is held.
func (s *Scheduler) reservedForOthers() bool {
	return s.othersWaiting && s.inReserve()
}

// bigAt reports whether a customer holding n workers holds half of them
// or more. s.mu is held.
func (s *Scheduler) bigAt(n int) bool { return s.workers > 0 && 2*n >= s.workers }

// big reports whether the customer with id holds half the workers or
// more. s.mu is held.
func (s *Scheduler) big(id string) bool {
	return id != "" && s.bigCustomers > 0 && s.bigAt(s.customerBusy[id])
}

// onlyBig reports whether every customer with a due lane on d is big. At
// most two customers can hold half the workers each, so this looks at no
// more than three of d's customers. s.mu is held.
func (s *Scheduler) onlyBig(d *destination) bool {
	if s.bigCustomers == 0 {
		return false
	}
	for _, c := range d.active {
		if !s.big(c.id) {
			return false
		}
	}
	return true
}

// holdWorker counts the worker a holds, for its customer too. s.mu is
// held.
func (s *Scheduler) holdWorker(a *Attempt) {
	a.worker = true
	s.busy++
	if id := a.Lane.ID.Customer; id != "" {
		s.customerBusy[id]++
		switch n := s.customerBusy[id]; {
		case s.bigAt(n) && !s.bigAt(n-1):
			s.bigCustomers++
			s.bigBusy += n
			if s.othersBy == id {
				s.othersDue = false // only its own lanes changed
			}
		case s.bigAt(n):
			s.bigBusy++
		}
	}
}

// Workers is how many delivery workers there are (0: not counted) and
// how many hold an attempt.
func (s *Scheduler) Workers() (workers, busy int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.workers, s.busy
}
