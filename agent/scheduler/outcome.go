package scheduler

import (
	"cmp"
	"container/heap"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/rivora/rivora/agent/budget"
)

// Observation is what Observe learned from one attempt's result.
type Observation struct {
	// Transition is the health transition the attempt caused, when
	// Changed (for the log).
	Transition budget.Transition
	Changed    bool
	// OtherwiseHealthy: the destination is healthy apart from the
	// attempt's own lane (see otherwiseHealthy), or apart from its
	// customer's lanes while it serves other customers (see
	// onlyItsCustomers), which decides whether a failure that is the
	// destination's is charged to the event.
	OtherwiseHealthy bool
	// GoneOnlyItsCustomers: the attempt was answered 410 Gone, and the
	// 410 is its customer's alone (see goneOnlyItsCustomers), which
	// decides whether a shared destination is disabled for every
	// customer or the 410 is charged to the event.
	GoneOnlyItsCustomers bool
}

// NoteCertificateRefused records that the partner refused the
// destination's new client certificate in a's handshake, so the attempt
// went with the replaced one (the fallback of a rotation's overlap):
// health shows it, since the fallback ends with the overlap.
func (s *Scheduler) NoteCertificateRefused(a *Attempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a.Lane.dest.certRefusedAt = s.clock.Now()
}

// Observe feeds one attempt's result into its destination's budget:
// status is the HTTP status (0: no response); destinationFault marks
// failures that are the destination's (429, any 5xx, 408/409/425,
// timeouts, connection errors) as opposed to the event's (another 4xx, a
// request never sent). Call it before Settle. When the destination
// recovers, lanes held back only by its failures become due at once,
// paced by the budget. It answers, in the same call, whether the
// destination is otherwise healthy after this result.
func (s *Scheduler) Observe(a *Attempt, status int, destinationFault bool, retryAfter time.Duration, cause string) Observation {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := a.Lane.dest
	if d.dropped || d.budget == nil {
		return Observation{OtherwiseHealthy: s.otherwiseHealthy(a)}
	}
	before := lastTransition(d.budget)
	changes := d.budget.Changes()
	d.statuses.add(status)
	now := s.clock.Now()
	released := false
	customer := a.Lane.ID.Customer
	ownFault, goneOwn := false, false
	switch {
	case status >= 200 && status < 300:
		d.lastSuccess = now
		d.customerSuccesses.add(customer, now)
		if d.budget.Succeeded(now) {
			s.releaseHeld(d, now)
			released = true
		}
	case destinationFault:
		// A 429 or a Retry-After is the partner's word on the whole
		// destination: it always reaches the budget.
		ownFault = status != http.StatusTooManyRequests && retryAfter == 0 && s.onlyItsCustomers(a)
		d.faults.add(a.Lane, now)
		d.customerFaults.add(customer, now)
		if ownFault {
			// Its customer's alone while the others' go through: a
			// shared destination's budget is not cut for one customer
			// (a failing path of its subscription, payloads the
			// partner refuses), and the event is charged.
			break
		}
		if status == http.StatusTooManyRequests || retryAfter > 0 {
			d.budget.Throttled(now, retryAfter, cause)
		} else {
			d.budget.Failed(now, cause)
		}
	case status == http.StatusGone:
		// Judged here, acted on by the verdict (a disable, or the
		// event's failure); never the budget's.
		goneOwn = s.goneOnlyItsCustomers(a)
		d.customerGone.add(customer, now)
	}
	d.rates.observe(now, status, d.budget.Ceiling(), d.budget.Rate())
	if d.budget.State() == budget.Parked {
		s.parked[d] = true
	} else {
		delete(s.parked, d)
	}
	s.noteBudget(d, changes)
	obs := Observation{OtherwiseHealthy: ownFault || s.otherwiseHealthy(a), GoneOnlyItsCustomers: goneOwn}
	if after := lastTransition(d.budget); after != before {
		obs.Transition, obs.Changed = after, true
		s.noteOthers("") // its lanes may go now (workers.go)
	}
	if released || obs.Changed {
		// Lanes became due, or the destination's health moved: dispatch
		// now. Otherwise the attempt's Settle, which follows every
		// Observe, wakes the dispatcher: one wake-up per attempt, not two.
		s.wake()
	}
	return obs
}

func lastTransition(b *budget.Budget) budget.Transition {
	if tr := b.Transitions(); len(tr) > 0 {
		return tr[len(tr)-1]
	}
	return budget.Transition{}
}

// releaseHeld makes due every waiting lane of d held by d's failures,
// oldest head first, so that within a customer they go in the order their
// events were accepted.
func (s *Scheduler) releaseHeld(d *destination, now time.Time) {
	var held []*Lane
	for _, l := range d.lanes {
		if l.state == laneWaiting && l.head.HeldByDestination {
			held = append(held, l)
		}
	}
	slices.SortFunc(held, func(a, b *Lane) int { return cmp.Compare(a.entries[0].Seq, b.entries[0].Seq) })
	for _, l := range held {
		heap.Remove(&s.waiting, l.heapIdx)
		l.head.NotBefore = now
		l.wake = now
		s.makeDue(l, now)
	}
}

// otherwiseHealthy reports whether a's destination is healthy apart from
// a's own lane, which decides whether a failure of a that is the
// destination's (429, any 5xx, 408/409/425, timeout, connection
// error) counts against the event's max_attempts. s.mu is held.
//
// The budget's health (healthy → degraded → parked) cannot say it alone:
// one payload the partner 503s degrades its destination by itself. So the
// destination is otherwise healthy when it is not parked and, since the
// head's previous attempt ended (for a first attempt: in the
// FirstAttemptLookback before it started), it answered 2xx at least once
// and no other lane had a failure that was the destination's. A
// destination that is down (no 2xx) or throttling many lanes (a 429
// storm) is not; a partner that 503s one payload while it accepts the
// rest is.
func (s *Scheduler) otherwiseHealthy(a *Attempt) bool {
	d := a.Lane.dest
	since, ok := lookback(a)
	return ok && d.lastSuccess.After(since) && !d.faults.otherSince(a.Lane, since)
}

// lookback is since when otherwiseHealthy and onlyItsCustomers look at
// a's destination: the head's previous attempt, or for a first attempt
// FirstAttemptLookback before it started. ok is false when there is
// nothing to look at: no budget yet, or parked (down, whatever else).
func lookback(a *Attempt) (since time.Time, ok bool) {
	if b := a.Lane.dest.budget; b == nil || b.State() == budget.Parked {
		return time.Time{}, false
	}
	since = a.Head.LastAttemptAt
	if since.IsZero() {
		since = a.StartedAt.Add(-FirstAttemptLookback)
	}
	return since, true
}

// onlyItsCustomers reports whether a failure of a that is the
// destination's is its customer's alone: within the last
// FirstAttemptLookback another customer's attempt went through, and
// since the head's previous attempt (as for otherwiseHealthy) none of
// another customer's failed. A destination shared by customers then keeps
// its budget for the others: one customer's flood of failing events, over
// as many lanes as it likes, costs only that customer. A destination
// serving one customer, or one that stopped answering everyone (no
// success in the second before a's timeout), is never so: its failures
// cut its budget as before. The second is the last one, not only the
// time a was out: a partner refusing one customer's payloads within a
// millisecond would otherwise rarely have answered anyone else meanwhile,
// and one customer's batch of them cut the shared budget to its floor.
// s.mu is held.
func (s *Scheduler) onlyItsCustomers(a *Attempt) bool {
	d, customer := a.Lane.dest, a.Lane.ID.Customer
	since, ok := lookback(a)
	return ok && s.othersAnswered(a) && !d.customerFaults.otherSince(customer, since)
}

// goneOnlyItsCustomers reports whether a 410 Gone answered to a is its
// customer's alone: within the last GoneOthersLookback another
// customer's attempt went through, and no other customer got a 410 since
// that success. The partner then still takes the others' webhooks and
// refuses this customer's (its account there closed), so on a
// destination shared by customers the 410 must not disable it for all of
// them; two customers' closed accounts, with others' webhooks taken in
// between, are each their own. Another
// customer's other failures (a 5xx, a timeout) are not counted against
// it: they say nothing of whether the partner wants webhooks, and would
// let one customer's poison payloads turn another's refusal into a
// disable for everyone. s.mu is held.
func (s *Scheduler) goneOnlyItsCustomers(a *Attempt) bool {
	d, customer := a.Lane.dest, a.Lane.ID.Customer
	if d.budget != nil && d.budget.State() == budget.Parked {
		// Down for everyone as far as Rivora can tell: no success says
		// the others are still welcome. The probes go round the
		// customers with held lanes, one a second, so while another
		// customer has some, its own probe says soon whether the partner
		// is gone for all: until another customer's 410 within
		// ParkedGoneLookback, this one is its customer's.
		return s.otherCustomerPending(d, customer) && !d.customerGone.otherSince(customer, s.clock.Now().Add(-ParkedGoneLookback))
	}
	if _, ok := lookback(a); !ok {
		return false
	}
	lastTaken := d.customerSuccesses.latestOther(customer)
	lastGone := d.customerGone.latestOther(customer)
	return lastTaken.After(s.clock.Now().Add(-GoneOthersLookback)) && !lastGone.After(lastTaken)
}

// GoneOthersLookback is how far back goneOnlyItsCustomers looks for
// another customer's attempt that went through: far longer than
// FirstAttemptLookback, because a wrong verdict either way costs
// unevenly. A 410 judged one customer's when the partner is gone for all
// costs one charged attempt: the next customer's 410 finds no success
// since and disables the destination. A 410 judged everyone's when it is
// one customer's stops every customer until an operator resumes it —
// which a second seemed to, whenever the others' traffic was sparse.
const GoneOthersLookback = time.Minute

// ParkedGoneLookback is how far back goneOnlyItsCustomers looks, while
// the destination is parked, for another customer's 410: long enough for
// the probes to have gone round the customers with held lanes.
const ParkedGoneLookback = time.Minute

// otherCustomerPending reports whether another customer than customer has
// events pending on d. s.mu is held.
func (s *Scheduler) otherCustomerPending(d *destination, customer string) bool {
	for id, c := range d.customers {
		if id != customer && c.pending > 0 {
			return true
		}
	}
	return false
}

// othersAnswered: within the last FirstAttemptLookback an attempt of
// another customer than a's went through on a's destination. s.mu is
// held.
func (s *Scheduler) othersAnswered(a *Attempt) bool {
	return a.Lane.dest.customerSuccesses.otherSince(a.Lane.ID.Customer, s.clock.Now().Add(-FirstAttemptLookback))
}

// FirstAttemptLookback is how far back otherwiseHealthy looks for a
// head's first attempt, which has no previous attempt to look back to.
const FirstAttemptLookback = time.Second

// recentMarks remember the latest mark (a failure, a success) and its
// key (a lane, a customer) and, of the other keys, the latest: enough to
// tell whether any key but a given one was marked since a given time.
type recentMarks[K comparable] struct {
	key   K
	at    time.Time
	other time.Time // latest mark of a key other than key
}

func (f *recentMarks[K]) add(k K, now time.Time) {
	if k != f.key {
		f.other = f.at
		f.key = k
	}
	f.at = now
}

// latestOther is the latest mark of a key other than k (zero: none).
func (f *recentMarks[K]) latestOther(k K) time.Time {
	if f.key != k {
		return f.at
	}
	return f.other
}

// otherSince reports a mark of a key other than k after since.
func (f *recentMarks[K]) otherSince(k K, since time.Time) bool {
	if f.key != k {
		return f.at.After(since)
	}
	return f.other.After(since)
}

// Outcome tells the partition owner what a finished attempt left behind.
type Outcome struct {
	// Drained: the lane is now empty and forgotten.
	Drained bool
	// PurgeLedger: the drained lane had a ledger head record to purge.
	PurgeLedger bool
	// Remaining counts the lane's pending events after the attempt.
	Remaining int
}

// advance pops the head of a lane after success or death.
func (s *Scheduler) advance(a *Attempt, died bool) Outcome {
	l, d := a.Lane, a.Lane.dest
	d.inFlight--
	if d.dropped {
		return Outcome{}
	}
	if x := s.byEventID[l.Partition]; x != nil {
		x.remove(l, &l.entries[0])
	}
	l.pop()
	d.pending--
	l.cust.pending--
	l.head = Head{}
	l.state = laneIdle
	if len(l.entries) > 0 {
		if died {
			now := s.clock.Now()
			l.newHead(now)
			s.holdNext(a, l)
			s.schedule(l, now)
		} else {
			at := s.succeededAt(a)
			l.newHead(at)
			if !s.holdForSubscription(l) {
				s.makeDue(l, at)
			}
		}
		return Outcome{Remaining: len(l.entries)}
	}
	out := Outcome{Drained: true, PurgeLedger: l.hasLedger}
	s.forget(l)
	s.removeIfIdle(d) // deleted while this attempt was in flight
	return out
}

// succeededAt is when a's success was observed, which is when the next
// head of its lane became head: the destination's latest success, which
// Observe set no earlier than a's own (a microsecond before its
// Succeeded), so a success costs no second read of the clock. Without an
// observed success since a started (its event could not be loaded), the
// clock.
func (s *Scheduler) succeededAt(a *Attempt) time.Time {
	if at := a.Lane.dest.lastSuccess; !at.Before(a.StartedAt) {
		return at
	}
	return s.clock.Now()
}

// holdNext: on a destination that is not healthy, the head that follows
// a held head that died is held too, its window end estimated from its
// predecessor's (the owner checks the real one before dead-lettering it):
// the events behind a head whose window closed during an outage follow
// it at once instead of waiting for a token or probe slot each.
func (s *Scheduler) holdNext(a *Attempt, l *Lane) {
	if b := l.dest.budget; b == nil || b.State() == budget.Healthy || !a.Head.HeldByDestination || a.Head.WindowEnd.IsZero() {
		return
	}
	nextAccepted := fromUnixNanos(l.entries[0].acceptedAt)
	l.setHead(Head{HeldByDestination: true, WindowEnd: a.Head.WindowEnd.Add(nextAccepted.Sub(a.Entry.AcceptedAt))})
}

// forget removes an empty lane, and its customer once it has no lanes.
func (s *Scheduler) forget(l *Lane) {
	d, c := l.dest, l.cust
	delete(d.lanes, l.Subject)
	d.unorder(l)
	c.lanes--
	c.route(l.ID.Subscription, -1)
	if c.lanes == 0 && !c.active {
		delete(d.customers, c.id)
	}
	d.shrink()
}

// Settlement is what the partition owner tells the scheduler about a
// finished attempt, once it has recorded what the attempt's verdict
// needs (the ledger, the dead letter, the history).
type Settlement struct {
	Kind SettlementKind
	// Head is the lane head's new state (Retry).
	Head Head
	// Unsent: the attempt ended without anything sent (a dead letter
	// judged before sending: its destination deleted, say); the budget
	// token it took is given back, so that a backlog the partner never
	// sees costs the destination none of its rate.
	Unsent bool
}

// SettlementKind is what the lane does after an attempt.
type SettlementKind int

const (
	// Advance: the head was delivered (or cannot be loaded); the lane
	// moves on.
	Advance SettlementKind = iota
	// AdvanceDead: the head is a dead letter, already recorded; the lane
	// moves on.
	AdvanceDead
	// Retry: the head waits until Head.NotBefore, with Head's state.
	Retry
	// Release: the attempt was not made; the lane is due again with
	// unchanged state.
	Release
)

// ErrSettledTwice: an attempt was settled before. The second settlement
// is ignored; it is a defect of the caller.
var ErrSettledTwice = errors.New("scheduler: attempt settled twice")

// Settle ends an attempt: every attempt handed out (Attempts, TakeHead)
// is settled exactly once, and a second settlement changes nothing and
// returns ErrSettledTwice.
func (s *Scheduler) Settle(a *Attempt, st Settlement) (Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.settled {
		return Outcome{}, ErrSettledTwice
	}
	a.settled = true
	defer s.wake()
	if d := a.Lane.dest; st.Unsent && d.budget != nil && !a.EarlyProbe && !a.Expired {
		d.budget.Refund(s.clock.Now())
	}
	switch st.Kind {
	case Advance:
		return s.advance(a, false), nil
	case AdvanceDead:
		return s.advance(a, true), nil
	case Retry:
		s.retry(a, st.Head)
	default:
		s.release(a)
	}
	return Outcome{}, nil
}

// Settled reports whether a was settled.
func (s *Scheduler) Settled(a *Attempt) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return a.settled
}

// retry: a failed head waits until head.NotBefore. s.mu is held.
func (s *Scheduler) retry(a *Attempt, head Head) {
	l := a.Lane
	l.dest.inFlight--
	l.setHead(head)
	l.hasLedger = true
	l.state = laneIdle
	s.schedule(l, s.clock.Now())
}

// release: an attempt that was not made; the lane is due again with
// unchanged state. s.mu is held.
func (s *Scheduler) release(a *Attempt) {
	l := a.Lane
	l.dest.inFlight--
	l.state = laneIdle
	s.schedule(l, s.clock.Now())
}
