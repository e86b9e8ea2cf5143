package scheduler

import (
	"container/heap"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/lanes"
)

func (s *Scheduler) lane(partition int, id lanes.ID) *Lane {
	return s.laneBySubject(partition, id, id.Subject(partition))
}

func (s *Scheduler) laneBySubject(partition int, id lanes.ID, subject string) *Lane {
	d := s.destination(id.Destination, partition)
	l := d.lanes[subject]
	if l == nil {
		c := d.customers[id.Customer]
		if c == nil {
			w, ok := d.weights[id.Customer]
			if !ok {
				w = 1
			}
			c = &customer{id: id.Customer, weight: w}
			d.customers[id.Customer] = c
		}
		s.born++
		l = &Lane{ID: id, Partition: partition, Subject: subject, heapIdx: -1, dest: d, cust: c, pos: len(d.order)}
		d.lanes[subject] = l
		d.order = append(d.order, laneSlot{lane: l, born: s.born, cust: c})
		d.peakLanes = max(d.peakLanes, len(d.lanes))
		c.lanes++
		c.route(id.Subscription, 1)
	}
	return l
}

// LaneAppend is one lane's share of an AppendAll.
type LaneAppend struct {
	ID lanes.ID
	// Subject is ID.Subject(partition), computed by the caller who has it.
	Subject string
	Entries []Entry
}

// AppendAll adds newly stored events to many lanes under one lock (the
// partition writer's group commit).
func (s *Scheduler) AppendAll(partition int, appends []LaneAppend) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for _, a := range appends {
		l := s.laneBySubject(partition, a.ID, a.Subject)
		empty := len(l.entries) == 0
		l.push(a.Entries)
		s.indexOf(partition).add(l, len(l.entries)-len(a.Entries))
		if empty && len(l.entries) > 0 {
			l.newHead(now)
		}
		l.dest.pending += len(a.Entries)
		l.cust.pending += len(a.Entries)
		l.dest.rates.arrive(now, len(a.Entries))
		if l.state == laneIdle {
			s.schedule(l, now)
		}
	}
	s.wake()
}

// Restore installs a lane rebuilt from the store, with its head's ledger
// state (zero Head when the head was never attempted).
//
// The store does not keep when a head became head, so a restored head's
// headSince is approximated: its first attempt when it had one, else its
// acceptance. Both are no later than the truth; the acceptance of a head
// that waited behind others is earlier than when it became head.
func (s *Scheduler) Restore(partition int, id lanes.ID, entries []Entry, head Head, hasLedger bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lane(partition, id)
	if len(l.entries) == 0 && len(entries) > 0 {
		l.headSince = head.FirstAttemptAt
		if l.headSince.IsZero() {
			l.headSince = entries[0].AcceptedAt
		}
	}
	l.push(entries)
	s.indexOf(partition).add(l, len(l.entries)-len(entries))
	s.restored(l, len(entries), head, hasLedger)
}

// Restored collects one lane's pending events for RestoreLane as
// compactly as the lane keeps them: a rebuild of millions of events makes
// no Entry, and no event id string, per event.
type Restored struct {
	entries []entry
	// odd holds the event ids that are not UUIDs, by sequence.
	odd map[uint64]string
}

// Grow makes room for n more events: a rebuild that knows a lane's count
// (a snapshot's) makes its entries once, at their size, instead of
// doubling them as it appends and copying them to their size in
// RestoreLane.
func (r *Restored) Grow(n int) { r.entries = slices.Grow(r.entries, n) }

// Add appends an event: its lane-store sequence, its event id (as
// stored) and when it was accepted, in Unix nanoseconds.
func (r *Restored) Add(seq uint64, eventID []byte, acceptedAt int64) {
	r.entries = append(r.entries, newEntry(seq, eventID, acceptedAt, r.setOdd))
}

func (r *Restored) setOdd(seq uint64, id string) {
	if r.odd == nil {
		r.odd = make(map[uint64]string)
	}
	r.odd[seq] = id
}

// Len is how many events were added.
func (r *Restored) Len() int { return len(r.entries) }

// FirstSeq is the sequence of the first event added (0: none).
func (r *Restored) FirstSeq() uint64 {
	if r.Len() == 0 {
		return 0
	}
	return r.entries[0].Seq
}

// RestoreLane is Restore for the events collected in r, which it takes
// over: r must not be used again.
func (s *Scheduler) RestoreLane(partition int, id lanes.ID, r *Restored, head Head, hasLedger bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lane(partition, id)
	n := r.Len()
	if len(l.entries) == 0 && n > 0 {
		l.headSince = head.FirstAttemptAt
		if l.headSince.IsZero() {
			l.headSince = fromUnixNanos(r.entries[0].acceptedAt)
		}
	}
	l.pushRestored(r)
	s.indexOf(partition).add(l, len(l.entries)-n)
	*r = Restored{}
	s.restored(l, n, head, hasLedger)
}

// restored schedules a lane that Restore gave n more entries.
func (s *Scheduler) restored(l *Lane, n int, head Head, hasLedger bool) {
	l.dest.pending += n
	l.cust.pending += n
	l.head = head
	l.reslot()
	l.hasLedger = l.hasLedger || hasLedger
	if l.state == laneIdle {
		s.schedule(l, s.clock.Now())
	}
	s.wake()
}

// LowWater is the lowest lane-store sequence still pending in partition p,
// or 0 when nothing is pending.
//
// It reads the heads' sequences from the destinations' lane slots (one
// slice each, kept by the hot path: d.order[l.pos].seq is l's head, 0
// for no entries), not from the lanes: every partition's reclaimer asks
// five times a second, under the scheduler's lock, and walking a million
// lanes through their map and pointers took a core at 10M pending.
func (s *Scheduler) LowWater(p int) uint64 {
	low, _ := s.Backlog(p)
	return low
}

// Backlog is LowWater and, from the same walk, how many events are
// pending in partition p.
func (s *Scheduler) Backlog(p int) (low uint64, pending int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.dests {
		if d.partition != p {
			continue
		}
		pending += d.pending
		for i := range d.order {
			if seq := d.order[i].seq; seq != 0 && (low == 0 || seq < low) {
				low = seq
			}
		}
	}
	return low, pending
}

// HasPending reports whether partition p has an event pending: what
// LowWater != 0 says, without walking every lane. It stops at the first
// destination of p with one, so while p delivers a backlog it looks at a
// few destinations, not at every lane slot (a reclaimer asks five times a
// second, under the scheduler's lock).
func (s *Scheduler) HasPending(p int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.dests {
		if d.partition == p && d.pending > 0 {
			return true
		}
	}
	return false
}

// DropPartition forgets every lane of partition p (ownership lost or
// handed off). In-flight attempts finish but their outcomes are ignored by
// the owner.
func (s *Scheduler) DropPartition(p int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The partition's id index goes in one step: remove then finds none
	// to forget its lanes' ids from one by one (at the stop of an agent
	// with 1M pending that was a sixth of its CPU).
	delete(s.byEventID, p)
	delete(s.unsavedBudgets, p)
	delete(s.restoredBudgets, p)
	for _, d := range s.dests {
		if d.partition == p {
			s.remove(d)
		}
	}
	s.deadlines = slices.DeleteFunc(s.deadlines, func(dl deadline) bool { return dl.lane.dest.dropped })
	heap.Init(&s.deadlines)
}

// ForgetDestination forgets a deleted destination: its budget, rate
// history, weights and lanes, so it is in no snapshot (health, metrics)
// any more. Its backlog was archived before it was deleted; an event
// still pending (one in flight then, or one that arrived since: an
// edge's, accepted while the edge was cut off) keeps it, unconfigured,
// until its last lane drains. Those lanes are not held: their heads are
// handed out without a token (Attempt.Unconfigured) for the owner to
// dead-letter, or to try again later when the event was accepted under
// a config the agent has not applied yet.
func (s *Scheduler) ForgetDestination(destinationID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, restored := range s.restoredBudgets {
		delete(restored, destinationID)
	}
	if d := s.dests[destinationID]; d != nil {
		s.forgetLocked(d)
	}
}

// ForgetUnknown is ForgetDestination for a destination with events
// pending that the agent's config does not have (Unconfigured): deleted
// before they arrived, or before the agent started. Nothing happens if
// it was configured meanwhile (the config that made it was applied
// after the caller looked).
func (s *Scheduler) ForgetUnknown(destinationID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.dests[destinationID]; d != nil && !d.configured && !d.deleted {
		s.forgetLocked(d)
	}
}

// Unconfigured lists the destinations with events pending that were
// never configured here, nor forgotten: what ForgetUnknown is for once
// the config is known not to have them.
func (s *Scheduler) Unconfigured() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, d := range s.dests {
		if !d.configured && !d.deleted && d.pending > 0 {
			out = append(out, id)
		}
	}
	return out
}

// forgetLocked marks d deleted and lets its lanes go to the owner: none
// waits for a retry time or a parked destination's recovery any more.
func (s *Scheduler) forgetLocked(d *destination) {
	d.configured, d.deleted = false, true
	delete(s.parked, d)
	now := s.clock.Now()
	for _, l := range d.lanes {
		if l.state == laneWaiting {
			heap.Remove(&s.waiting, l.heapIdx)
			l.head.NotBefore, l.wake = now, now
			s.makeDue(l, now)
		}
	}
	s.removeIfIdle(d)
	s.wake()
}

// removeIfIdle removes d if it was deleted and nothing of it is pending
// or in flight any more.
func (s *Scheduler) removeIfIdle(d *destination) {
	if !d.deleted || d.pending > 0 || d.inFlight > 0 || s.dests[d.id] != d {
		return
	}
	s.remove(d)
	s.deadlines = slices.DeleteFunc(s.deadlines, func(dl deadline) bool { return dl.lane.dest == d })
	heap.Init(&s.deadlines)
}

// remove forgets d and its lanes; the caller drops d's deadlines.
// Attempts in flight finish, their outcomes ignored (dropped).
func (s *Scheduler) remove(d *destination) {
	if d.inRing {
		s.leaveRing(d)
	}
	d.dropped = true
	delete(s.parked, d)
	for _, l := range d.lanes {
		// Its entries stay with the lane (an attempt in flight still
		// holds it) but are pending here no more.
		s.unindex(l)
		switch l.state {
		case laneWaiting:
			heap.Remove(&s.waiting, l.heapIdx)
		case laneExpired:
			s.dropExpired(l)
		}
	}
	delete(s.dests, d.id)
}

// Left is what a take (TakeDestination, TakeSubscription) leaves to the
// attempts in flight, for the caller to report: a lane whose head is in
// flight is not taken, and neither are the entries queued behind its
// head. InFlight counts those heads: each attempt's outcome decides what
// becomes of its event. Behind counts the entries queued behind them,
// which their lanes hand out only once the attempts end (and which the
// owner then dead-letters, their destination or subscription being gone).
type Left struct {
	InFlight, Behind int
}

// add counts l, a lane whose head is in flight.
func (left *Left) add(l *Lane) {
	left.InFlight++
	if len(l.entries) > 1 {
		left.Behind += len(l.entries) - 1
	}
}

// TakeDestination removes every lane of a destination that is not in
// flight and returns their entries (for archiving when a destination is
// deleted with force), and what it left to the attempts in flight.
func (s *Scheduler) TakeDestination(destinationID string) (map[*Lane][]Entry, Left) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dests[destinationID]
	if d == nil {
		return nil, Left{}
	}
	taken := make(map[*Lane][]Entry)
	var left Left
	for _, l := range d.lanes {
		switch l.state {
		case laneInFlight:
			left.add(l)
			continue
		case laneWaiting:
			heap.Remove(&s.waiting, l.heapIdx)
		case laneExpired:
			s.dropExpired(l)
		case laneDue:
			l.cust.firsts.remove(l)
			l.cust.retries.remove(l)
			d.due--
		}
		d.pending -= len(l.entries)
		l.cust.pending -= len(l.entries)
		s.unindex(l)
		taken[l] = l.takeEntries()
		s.forget(l)
	}
	d.active = d.active[:0]
	for _, c := range d.customers {
		if c.due() > 0 {
			d.active = append(d.active, c)
		} else {
			c.active = false
			c.deficit = 0
		}
	}
	if d.due == 0 && d.inRing {
		s.leaveRing(d)
	}
	d.configured = false
	s.removeIfIdle(d)
	return taken, left
}

// Pending is the number of events pending for a destination.
func (s *Scheduler) Pending(destinationID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.dests[destinationID]; d != nil {
		return d.pending
	}
	return 0
}

// PendingByCustomer is the number of events pending on this scheduler,
// by customer (those with none left out).
func (s *Scheduler) PendingByCustomer() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, d := range s.dests {
		for id, c := range d.customers {
			if c.pending > 0 {
				out[id] += c.pending
			}
		}
	}
	return out
}

// Location is where a pending event sits.
type Location struct {
	Lane      lanes.ID
	Partition int
	Entry     Entry
	Ahead     int
	InFlight  bool
	// Due: the event is its lane's head and waits for its turn: a token
	// of its destination's budget, a free in-flight slot, its customer's
	// turn or a free delivery worker; its own retry time has passed.
	Due bool
	// Held: the event is its lane's head and waits for its parked
	// destination (LaneSummary.Held), due or not.
	Held bool
	Head Head // set when the event is the lane head
	// Destination is its destination's state, to say why it waits.
	Destination DestinationState
	// SubscriptionPaused: its lane waits for its subscription's resume.
	SubscriptionPaused bool
}

// DestinationState is a destination's health as the scheduler sees it.
type DestinationState struct {
	Health budget.State
	// Since is when it entered Health (zero: healthy from the start).
	Since  time.Time
	Paused bool
	// HoldUntil is the end of a partner's Retry-After hold (zero: none):
	// nothing is attempted before it, first attempts included.
	HoldUntil time.Time
}

// Find looks a pending event up by id: the index names its lane (an id
// that is not a UUID is looked for among its destinations' few such ids),
// so the lock is held for a look at one lane, not at every lane.
func (s *Scheduler) Find(eventID string) (Location, bool) {
	compact, isCompact := compactID(eventID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !isCompact {
		return findIn(s.laneOfOddID(eventID), eventID, compact, isCompact)
	}
	scan := false
	for _, x := range s.byEventID {
		switch l := x.lookup(compact); l {
		case nil:
		case ambiguous:
			scan = true
		default:
			// Another partition's id may share the key: the lane
			// checks the whole id.
			if loc, ok := findIn(l, eventID, compact, isCompact); ok {
				return loc, true
			}
		}
	}
	if !scan {
		return Location{}, false
	}
	for _, d := range s.dests {
		for _, l := range d.lanes {
			if loc, ok := l.find(eventID, compact, isCompact); ok {
				return loc, true
			}
		}
	}
	return Location{}, false
}

// findIn looks for the event in l, a lane the index named (nil: none).
func findIn(l *Lane, eventID string, compact uuid.UUID, isCompact bool) (Location, bool) {
	if l == nil || l.dest.dropped {
		return Location{}, false
	}
	return l.find(eventID, compact, isCompact)
}

// find looks for the event in l's entries.
func (l *Lane) find(eventID string, compact uuid.UUID, isCompact bool) (Location, bool) {
	for i := range l.entries {
		if !l.hasEventID(&l.entries[i], eventID, compact, isCompact) {
			continue
		}
		loc := Location{Lane: l.ID, Partition: l.Partition, Entry: l.entry(i), Ahead: i, Destination: l.dest.state(), SubscriptionPaused: l.state == laneSubPaused}
		if i == 0 {
			loc.Head = l.head
			loc.InFlight = l.state == laneInFlight
			loc.Due = l.state == laneDue
			loc.Held = l.heldByParked()
		}
		return loc, true
	}
	return Location{}, false
}

// laneOfOddID returns the lane holding the event whose id is id, not a
// UUID (nil: none).
func (s *Scheduler) laneOfOddID(id string) *Lane {
	for _, d := range s.dests {
		for k, odd := range d.oddIDs {
			if odd == id {
				return k.lane
			}
		}
	}
	return nil
}

func (d *destination) state() DestinationState {
	st := DestinationState{Paused: d.paused}
	if d.budget != nil {
		st.Health = d.budget.State()
		st.HoldUntil = d.budget.HoldUntil()
		if tr := lastTransition(d.budget); tr.To == st.Health {
			st.Since = tr.At
		}
	}
	return st
}
