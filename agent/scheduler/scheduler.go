// Package scheduler decides which lane head is attempted next. It owns the
// in-memory view of every pending lane of the partitions this agent owns:
// destination → customer → lanes. It is a scheduler, not the source of
// truth: the partition owner rebuilds it from the lane store and ledger at
// any time.
//
// Rules it enforces:
//   - only a lane's head is ever in flight; a lane waiting for a retry holds
//     only itself;
//   - no token in the destination's budget, no attempt: the dispatcher sleeps
//     until the next token instead of polling;
//   - a destination never has more than max_in_flight attempts out, so a slow
//     destination cannot hold every worker;
//   - within a destination, customers with due lanes share attempts by weight
//     (deficit round robin), and within a customer due first attempts go
//     before due retries, oldest first.
package scheduler

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Entry is one pending event in a lane.
type Entry struct {
	// Seq is the event's sequence in its partition's lane store.
	Seq        uint64
	EventID    string
	AcceptedAt time.Time
	// Event is the stored event when it is kept in memory; nil means the
	// delivery worker loads it from the lane store by Seq.
	Event *rivorav1.Event
}

// Head is the attempt state of a lane's head event.
type Head struct {
	Attempts       int
	NotBefore      time.Time
	LastStatus     int
	LastError      string
	FirstAttemptAt time.Time
	LastAttemptAt  time.Time
	// HeldByDestination: the last failure was the destination's (throttled,
	// down), not the event's; when the destination recovers the lane goes
	// at once instead of waiting out its own backoff.
	HeldByDestination bool
}

// Limits are the scheduler's share of a destination's limits.
type Limits struct {
	RatePerSecond float64
	Burst         int
	MaxInFlight   int
}

// Class is a destination's priority class: due attempts of a higher class
// are handed out first. Budgets still bound every destination, so a high
// class cannot take more than its own budget.
type Class int

// Priority classes, highest first.
const (
	High Class = iota
	Normal
	Low
	numClasses
)

// Attempt is a lane head handed to a delivery worker.
type Attempt struct {
	Lane      *Lane
	Entry     Entry
	Head      Head // state before this attempt
	Number    int  // 1-based attempt number
	StartedAt time.Time
	// EarlyProbe: the destination is parked and this lane was taken before
	// its own retry time to probe whether the destination is back. If the
	// probe fails for the destination's reasons, the event is not charged
	// an attempt: report it with Retry(a, a.Head).
	EarlyProbe bool
}

type laneState int

const (
	laneIdle laneState = iota
	laneDue
	laneWaiting
	laneInFlight
)

// Lane is one (destination, customer, lane_key) FIFO.
type Lane struct {
	ID        lanes.ID
	Partition int
	Subject   string

	entries []Entry
	head    Head
	state   laneState
	heapIdx int
	// hasLedger is true when the ledger holds a head record for this lane
	// that must be purged once the lane drains.
	hasLedger bool
	dest      *destination
	cust      *customer
}

type customer struct {
	id      string
	weight  float64
	deficit float64
	lanes   int // lanes of this customer with pending entries
	firsts  laneQueue
	retries laneQueue
	active  bool
}

func (c *customer) due() int { return c.firsts.len() + c.retries.len() }

type destination struct {
	id         string
	partition  int
	configured bool
	limits     Limits
	budget     *budget.Budget
	class      Class
	paused     bool
	statuses   statusRing // last attempt statuses
	inFlight   int
	lanes      map[string]*Lane
	customers  map[string]*customer
	weights    map[string]float64
	active     []*customer // customers with due lanes, in DRR order
	cursor     int
	due        int
	pending    int
	inRing     bool
	// dropped: DropPartition forgot this destination; outcomes of its
	// attempts still in flight must not put its lanes back in play.
	dropped bool
}

// Scheduler is safe for concurrent use. Run dispatches attempts on the
// channel returned by Attempts; workers report each outcome back.
type Scheduler struct {
	clock clock.Clock
	kick  chan struct{}
	out   chan *Attempt

	mu      sync.Mutex
	dests   map[string]*destination
	ring    []*destination // destinations with due lanes
	parked  map[*destination]bool
	rr      int
	waiting laneHeap
}

// New returns an empty scheduler.
func New(clk clock.Clock) *Scheduler {
	return &Scheduler{
		clock:  clk,
		kick:   make(chan struct{}, 1),
		out:    make(chan *Attempt, 16),
		dests:  make(map[string]*destination),
		parked: make(map[*destination]bool),
	}
}

// Attempts is where Run hands out attempts; each must be reported back with
// exactly one of Succeeded, Retry, Dead or Release.
func (s *Scheduler) Attempts() <-chan *Attempt { return s.out }

func (s *Scheduler) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run dispatches attempts until ctx ends.
func (s *Scheduler) Run(ctx context.Context) error {
	for {
		if ctx.Err() != nil {
			s.releaseUnsent()
			return nil
		}
		s.mu.Lock()
		now := s.clock.Now()
		s.promote(now)
		a, wait := s.pick(now)
		s.mu.Unlock()
		if a != nil {
			select {
			case s.out <- a:
				continue
			case <-ctx.Done():
				s.Release(a)
				s.releaseUnsent()
				return nil
			}
		}
		var timer clock.Timer
		var timerC <-chan time.Time
		if wait > 0 {
			timer = s.clock.NewTimer(wait)
			timerC = timer.C()
		}
		select {
		case <-s.kick:
		case <-timerC:
		case <-ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			s.releaseUnsent()
			return nil
		}
	}
}

// releaseUnsent gives back attempts still waiting in the hand-off buffer
// when dispatching stops.
func (s *Scheduler) releaseUnsent() {
	for {
		select {
		case a := <-s.out:
			s.Release(a)
		default:
			return
		}
	}
}

// promote makes due every waiting lane whose time has come.
func (s *Scheduler) promote(now time.Time) {
	for s.waiting.Len() > 0 {
		l := s.waiting[0]
		if l.head.NotBefore.After(now) {
			return
		}
		heap.Pop(&s.waiting)
		s.makeDue(l)
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
		soonest(s.waiting[0].head.NotBefore.Sub(now))
	}
	for class := High; class < numClasses; class++ {
		if a := s.pickClass(now, class, soonest); a != nil {
			return a, 0
		}
	}
	if a := s.pickProbe(now, soonest); a != nil {
		return a, 0
	}
	return nil, wait
}

// pickProbe takes, for a parked destination with nothing due, the held
// lane that would retry first, so that one probe per second finds out
// when the destination is back even while every lane is in backoff.
func (s *Scheduler) pickProbe(now time.Time, soonest func(time.Duration)) *Attempt {
	for d := range s.parked {
		if d.inRing || !d.configured || d.paused || d.dropped || d.inFlight >= d.limits.MaxInFlight || d.budget.State() != budget.Parked {
			continue
		}
		var probe *Lane
		for _, l := range d.lanes {
			if l.state == laneWaiting && l.head.HeldByDestination && (probe == nil || l.head.NotBefore.Before(probe.head.NotBefore)) {
				probe = l
			}
		}
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
		return &Attempt{Lane: probe, Entry: probe.entries[0], Head: probe.head, Number: probe.head.Attempts + 1, StartedAt: now, EarlyProbe: true}
	}
	return nil
}

// pickClass hands out the next attempt among due destinations of one
// class, round robin.
func (s *Scheduler) pickClass(now time.Time, class Class, soonest func(time.Duration)) *Attempt {
	for i := 0; i < len(s.ring); i++ {
		idx := (s.rr + i) % len(s.ring)
		d := s.ring[idx]
		if d.class != class || !d.configured || d.paused || d.inFlight >= d.limits.MaxInFlight {
			continue
		}
		if !d.budget.Take(now) {
			soonest(d.budget.Wait(now))
			continue
		}
		l := d.nextLane()
		s.rr = idx + 1
		if d.due == 0 {
			s.leaveRing(d)
		}
		l.state = laneInFlight
		d.inFlight++
		return &Attempt{Lane: l, Entry: l.entries[0], Head: l.head, Number: l.head.Attempts + 1, StartedAt: now}
	}
	return nil
}

// nextLane picks by deficit round robin over customers with due lanes.
func (d *destination) nextLane() *Lane {
	for {
		if d.cursor >= len(d.active) {
			d.cursor = 0
		}
		c := d.active[d.cursor]
		if c.deficit < 1 {
			c.deficit += c.weight
			if c.deficit < 1 {
				d.cursor++
				continue
			}
		}
		var l *Lane
		if c.firsts.len() > 0 {
			l = c.firsts.pop()
		} else {
			l = c.retries.pop()
		}
		c.deficit--
		d.due--
		if c.due() == 0 {
			c.active = false
			c.deficit = 0
			d.active = append(d.active[:d.cursor], d.active[d.cursor+1:]...)
		} else if c.deficit < 1 {
			d.cursor++
		}
		return l
	}
}

func (s *Scheduler) makeDue(l *Lane) {
	l.state = laneDue
	c, d := l.cust, l.dest
	if l.head.Attempts == 0 {
		c.firsts.push(l)
	} else {
		c.retries.push(l)
	}
	d.due++
	if !c.active {
		c.active = true
		d.active = append(d.active, c)
	}
	if !d.inRing {
		d.inRing = true
		s.ring = append(s.ring, d)
	}
}

func (s *Scheduler) leaveRing(d *destination) {
	for i, x := range s.ring {
		if x == d {
			s.ring = append(s.ring[:i], s.ring[i+1:]...)
			if s.rr > i {
				s.rr--
			}
			break
		}
	}
	d.inRing = false
}

// schedule puts an idle lane with entries where it belongs.
func (s *Scheduler) schedule(l *Lane, now time.Time) {
	if len(l.entries) == 0 || l.dest.dropped {
		return
	}
	if l.head.NotBefore.After(now) {
		l.state = laneWaiting
		heap.Push(&s.waiting, l)
		return
	}
	s.makeDue(l)
}

func (s *Scheduler) destination(id string, partition int) *destination {
	d := s.dests[id]
	if d == nil {
		d = &destination{
			class:     Normal,
			id:        id,
			partition: partition,
			lanes:     make(map[string]*Lane),
			customers: make(map[string]*customer),
			weights:   make(map[string]float64),
		}
		s.dests[id] = d
	}
	return d
}

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
		l = &Lane{ID: id, Partition: partition, Subject: subject, heapIdx: -1, dest: d, cust: c}
		d.lanes[subject] = l
		c.lanes++
	}
	return l
}

// SetLimits configures a destination; until it is configured its lanes are
// held. Changes apply in place: nothing pending moves.
func (s *Scheduler) SetLimits(destinationID string, partition int, lim Limits) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	d := s.destination(destinationID, partition)
	lim.MaxInFlight = max(lim.MaxInFlight, 1)
	if d.budget == nil {
		d.budget = budget.NewBudget(lim.RatePerSecond, lim.Burst, budget.DefaultAIMD(), now)
	} else {
		d.budget.SetLimits(lim.RatePerSecond, lim.Burst, now)
	}
	d.limits = lim
	d.configured = true
	s.wake()
}

// SetClass sets a destination's priority class.
func (s *Scheduler) SetClass(destinationID string, partition int, class Class) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.destination(destinationID, partition).class = min(max(class, High), Low)
	s.wake()
}

// SetPaused stops (or resumes) every attempt to a destination, retries
// included. Nothing pending moves; on resume each lane goes on from where
// it was, paced by the budget.
func (s *Scheduler) SetPaused(destinationID string, partition int, paused bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.destination(destinationID, partition).paused = paused
	s.wake()
}

// SetWeights replaces a destination's customer weights (unlisted: 1).
func (s *Scheduler) SetWeights(destinationID string, partition int, weights map[string]float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.destination(destinationID, partition)
	d.weights = make(map[string]float64, len(weights))
	for c, w := range weights {
		d.weights[c] = max(w, 0.01)
	}
	for id, c := range d.customers {
		if w, ok := d.weights[id]; ok {
			c.weight = w
		} else {
			c.weight = 1
		}
	}
	s.wake()
}

// Observe feeds one attempt's result into its destination's budget:
// status is the HTTP status (0: no response); destinationFault marks
// failures that are the destination's (429, 408, 5xx, timeouts, connection
// errors) as opposed to the event's (other 4xx). Call it before Succeeded,
// Retry or Dead. When the destination recovers, lanes held back only by its
// failures become due at once, paced by the budget.
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

// SetWeight sets a customer's share of a destination (default 1).
func (s *Scheduler) SetWeight(destinationID, customerID string, partition int, weight float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	weight = max(weight, 0.01)
	d := s.destination(destinationID, partition)
	d.weights[customerID] = weight
	if c := d.customers[customerID]; c != nil {
		c.weight = weight
	}
	s.wake()
}

// Append adds newly stored events at the tail of their lane.
func (s *Scheduler) Append(partition int, id lanes.ID, entries ...Entry) {
	s.AppendAll(partition, []LaneAppend{{ID: id, Subject: id.Subject(partition), Entries: entries}})
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
		l.entries = append(l.entries, a.Entries...)
		l.dest.pending += len(a.Entries)
		if l.state == laneIdle {
			s.schedule(l, now)
		}
	}
	s.wake()
}

// Restore installs a lane rebuilt from the store, with its head's ledger
// state (zero Head when the head was never attempted).
func (s *Scheduler) Restore(partition int, id lanes.ID, entries []Entry, head Head, hasLedger bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lane(partition, id)
	l.entries = append(l.entries, entries...)
	l.dest.pending += len(entries)
	l.head = head
	l.hasLedger = l.hasLedger || hasLedger
	if l.state == laneIdle {
		s.schedule(l, s.clock.Now())
	}
	s.wake()
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

// LowWater is the lowest lane-store sequence still pending in partition p,
// or 0 when nothing is pending.
func (s *Scheduler) LowWater(p int) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var low uint64
	for _, d := range s.dests {
		if d.partition != p {
			continue
		}
		for _, l := range d.lanes {
			if len(l.entries) > 0 && (low == 0 || l.entries[0].Seq < low) {
				low = l.entries[0].Seq
			}
		}
	}
	return low
}

// DropPartition forgets every lane of partition p (ownership lost or
// handed off). In-flight attempts finish but their outcomes are ignored by
// the owner.
func (s *Scheduler) DropPartition(p int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, d := range s.dests {
		if d.partition != p {
			continue
		}
		if d.inRing {
			s.leaveRing(d)
		}
		d.dropped = true
		delete(s.parked, d)
		for _, l := range d.lanes {
			if l.state == laneWaiting {
				heap.Remove(&s.waiting, l.heapIdx)
			}
		}
		delete(s.dests, id)
	}
}

// TakeDestination removes every lane of a destination that is not in
// flight and returns their entries (for archiving when a destination is
// deleted with force).
func (s *Scheduler) TakeDestination(destinationID string) map[*Lane][]Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dests[destinationID]
	if d == nil {
		return nil
	}
	taken := make(map[*Lane][]Entry)
	for _, l := range d.lanes {
		switch l.state {
		case laneInFlight:
			continue
		case laneWaiting:
			heap.Remove(&s.waiting, l.heapIdx)
		case laneDue:
			l.cust.firsts.remove(l)
			l.cust.retries.remove(l)
			d.due--
		}
		taken[l] = l.entries
		d.pending -= len(l.entries)
		l.entries = nil
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
	return taken
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

// Location is where a pending event sits.
type Location struct {
	Lane      lanes.ID
	Partition int
	Entry     Entry
	Ahead     int
	InFlight  bool
	Head      Head // set when the event is the lane head
}

// Find looks a pending event up by id. It scans every lane: an operator's
// query, not a hot path.
func (s *Scheduler) Find(eventID string) (Location, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.dests {
		for _, l := range d.lanes {
			for i, e := range l.entries {
				if e.EventID != eventID {
					continue
				}
				loc := Location{Lane: l.ID, Partition: l.Partition, Entry: e, Ahead: i}
				if i == 0 {
					loc.Head = l.head
					loc.InFlight = l.state == laneInFlight
				}
				return loc, true
			}
		}
	}
	return Location{}, false
}

// laneQueue is a FIFO of due lanes.
type laneQueue struct {
	items []*Lane
}

func (q *laneQueue) len() int     { return len(q.items) }
func (q *laneQueue) push(l *Lane) { q.items = append(q.items, l) }
func (q *laneQueue) pop() *Lane {
	l := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	return l
}
func (q *laneQueue) remove(l *Lane) {
	for i, x := range q.items {
		if x == l {
			q.items = append(q.items[:i], q.items[i+1:]...)
			return
		}
	}
}

// laneHeap orders waiting lanes by NotBefore.
type laneHeap []*Lane

func (h laneHeap) Len() int           { return len(h) }
func (h laneHeap) Less(i, j int) bool { return h[i].head.NotBefore.Before(h[j].head.NotBefore) }
func (h laneHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}
func (h *laneHeap) Push(x any) {
	l := x.(*Lane)
	l.heapIdx = len(*h)
	*h = append(*h, l)
}
func (h *laneHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.heapIdx = -1
	return l
}

// statusRing keeps a destination's last attempt statuses.
type statusRing struct {
	buf  [16]int
	n    int
	next int
}

func (r *statusRing) add(status int) {
	r.buf[r.next] = status
	r.next = (r.next + 1) % len(r.buf)
	r.n = min(r.n+1, len(r.buf))
}

// list returns the statuses oldest first.
func (r *statusRing) list() []int {
	out := make([]int, 0, r.n)
	for i := range r.n {
		out = append(out, r.buf[(r.next-r.n+i+len(r.buf))%len(r.buf)])
	}
	return out
}
