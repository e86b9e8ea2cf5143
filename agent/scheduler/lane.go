package scheduler

import (
	"math"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/lanes"
)

// Entry is one pending event in a lane, as the scheduler takes it in and
// hands it out. A lane keeps it smaller (entry).
type Entry struct {
	// Seq is the event's sequence in its partition's lane store.
	Seq        uint64
	EventID    string
	AcceptedAt time.Time
	// Data is the stored event's encoding when the owner's cache keeps it
	// in memory; "" means the delivery worker loads it from the lane
	// store by Seq. Encoded rather than decoded: a decoded event is a
	// dozen objects the garbage collector walks on every cycle for as
	// long as it is cached, its encoding one it never looks into.
	Data string
}

// entry is how a lane keeps a pending event: 32 bytes and nothing else
// on the heap, where an Entry costs 64 bytes and its event id string 48
// more (the pending state of 10M events is mostly entries). The event id
// is kept as the 16 bytes of its UUID, which every id the agent makes is;
// another id (zero id) is kept in its destination's oddIDs. The event
// the owner's bounded cache keeps (Entry.Data) is in its destination's
// cached, not in the entry: a string in every entry would cost 16 bytes
// per pending event (160 MB at 10M) for the few the cache holds, and make
// the garbage collector look at every entry's slot.
type entry struct {
	Seq        uint64
	acceptedAt int64 // Unix ns; noTime for a zero AcceptedAt
	id         uuid.UUID
}

// noTime stands for a zero time.Time, whose Unix nanoseconds do not fit
// an int64.
const noTime = math.MinInt64

func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return noTime
	}
	return t.UnixNano()
}

func fromUnixNanos(ns int64) time.Time {
	if ns == noTime {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// compactID returns id's 16 bytes when id is a UUID in its canonical
// form (lower-case hex, 8-4-4-4-12), which is exactly what formatting the
// bytes gives back; false for any other id (and for the nil UUID, the
// zero id that marks an odd one).
func compactID[ID string | []byte](id ID) (uuid.UUID, bool) {
	var u uuid.UUID
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
		return u, false
	}
	j := 0
	for i := 0; i < len(id); i += 2 {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i-- // the dash: the next pair starts right after it
			continue
		}
		hi, ok1 := lowerHex(id[i])
		lo, ok2 := lowerHex(id[i+1])
		if !ok1 || !ok2 {
			return u, false
		}
		u[j] = hi<<4 | lo
		j++
	}
	return u, u != uuid.Nil
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// entryKey names one of a destination's entries (one whose event id is
// not a UUID, or whose event is cached): its lane and sequence.
type entryKey struct {
	lane *Lane
	seq  uint64
}

// newEntry makes an entry, its event id given as a string or as bytes;
// an id that is not a UUID goes to odd, under the sequence.
func newEntry[ID string | []byte](seq uint64, eventID ID, acceptedAt int64, odd func(seq uint64, id string)) entry {
	e := entry{Seq: seq, acceptedAt: acceptedAt}
	if id, ok := compactID(eventID); ok {
		e.id = id
	} else {
		odd(seq, string(eventID))
	}
	return e
}

// setOdd keeps the event id of l's entry seq, which is not a UUID, in
// its destination: a map per destination, not per lane, so a lane made
// and drained per event (a lane's usual life) makes no map.
func (l *Lane) setOdd(seq uint64, id string) {
	d := l.dest
	if d.oddIDs == nil {
		d.oddIDs = make(map[entryKey]string)
	}
	d.oddIDs[entryKey{l, seq}] = id
}

// setCached keeps the encoded event of l's entry seq, which the owner's
// cache holds, in its destination (a map per destination, as oddIDs).
func (l *Lane) setCached(seq uint64, data string) {
	d := l.dest
	if d.cached == nil {
		d.cached = make(map[entryKey]string)
	}
	d.cached[entryKey{l, seq}] = data
	d.cachedPeak = max(d.cachedPeak, len(d.cached))
}

// cachedData is the encoded event kept for l's entry seq ("": none).
func (l *Lane) cachedData(seq uint64) string {
	if len(l.dest.cached) == 0 {
		return ""
	}
	return l.dest.cached[entryKey{l, seq}]
}

// push appends entries at l's tail.
func (l *Lane) push(entries []Entry) {
	l.entries = slices.Grow(l.entries, len(entries))
	for _, e := range entries {
		l.entries = append(l.entries, newEntry(e.Seq, e.EventID, unixNanos(e.AcceptedAt), l.setOdd))
		if e.Data != "" {
			l.setCached(e.Seq, e.Data)
		}
	}
}

// pushRestored appends a rebuild's entries at l's tail.
func (l *Lane) pushRestored(r *Restored) {
	if len(l.entries) == 0 {
		l.entries = r.entries // most lanes: no copy
		if spare := cap(l.entries) - len(l.entries); spare > len(l.entries)/4 {
			// A rebuild appended one entry at a time: up to half of
			// the slice is spare room a restored lane may never use.
			l.entries = slices.Clone(l.entries)
		}
	} else {
		l.entries = append(l.entries, r.entries...)
	}
	for seq, id := range r.odd {
		l.setOdd(seq, id)
	}
}

// pop drops l's head entry.
func (l *Lane) pop() {
	l.forget(&l.entries[0])
	l.entries = l.entries[1:]
}

// forget drops what l's destination keeps for entry e: its odd id, its
// cached event.
func (l *Lane) forget(e *entry) {
	if e.id == uuid.Nil {
		delete(l.dest.oddIDs, entryKey{l, e.Seq})
	}
	if d := l.dest; len(d.cached) > 0 {
		delete(d.cached, entryKey{l, e.Seq})
		d.shrinkCached()
	}
}

// entry returns l's entry i as an Entry.
func (l *Lane) entry(i int) Entry {
	e := &l.entries[i]
	return Entry{Seq: e.Seq, EventID: l.eventID(e), AcceptedAt: fromUnixNanos(e.acceptedAt), Data: l.cachedData(e.Seq)}
}

// eventID formats e's event id.
func (l *Lane) eventID(e *entry) string {
	if e.id == uuid.Nil {
		return l.dest.oddIDs[entryKey{l, e.Seq}]
	}
	return e.id.String()
}

// hasEventID reports whether e's event id is id (parsed by compactID).
func (l *Lane) hasEventID(e *entry, id string, compact uuid.UUID, isCompact bool) bool {
	if e.id == uuid.Nil {
		return !isCompact && l.dest.oddIDs[entryKey{l, e.Seq}] == id
	}
	return isCompact && e.id == compact
}

// takeEntries empties l and returns its entries.
func (l *Lane) takeEntries() []Entry {
	out := make([]Entry, len(l.entries))
	for i := range l.entries {
		out[i] = l.entry(i)
		l.forget(&l.entries[i])
	}
	l.entries = nil
	return out
}

// TakenHead is the attempt state of a taken lane's first entry (zero
// when it was never tried). A lane TakeDestination or TakeSubscription
// returned is the taker's alone: it reads this when it dead-letters the
// entries, so that the head's dead letter says how often it was tried
// and how it last failed.
func (l *Lane) TakenHead() Head { return l.head }

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
	// WindowEnd is when the event's retry window closes, as the owner last
	// computed it (zero: not known yet). A held lane of a parked destination
	// waits for the destination's recovery or for WindowEnd, whichever
	// comes first.
	WindowEnd time.Time
}

// laneState is a byte, so that it packs with hasLedger.
type laneState uint8

const (
	laneIdle laneState = iota
	laneDue
	laneWaiting
	laneInFlight
	// laneExpired: held by its parked destination until its window closed;
	// queued in Scheduler.expired to be handed out without a token.
	laneExpired
	// laneSubPaused: its subscription is paused; in no queue until it
	// resumes (subscription.go).
	laneSubPaused
)

// heldByParked reports whether l's head waits for its parked destination
// rather than for its own retry time: what the operator's views call
// held. Its last failure was the destination's and the destination is
// parked: waiting, it waits for a probe to get through or its window to
// close (schedule); due (its retry time passed before the destination
// parked), it waits for the parked destination's one attempt at a time.
// A head whose last failure was the destination's while the destination
// is healthy or degraded is not held: it goes at its retry time. Called
// under the lock.
func (l *Lane) heldByParked() bool {
	return (l.state == laneWaiting || l.state == laneDue) && l.head.HeldByDestination && l.dest.budget != nil && l.dest.budget.State() == budget.Parked
}

// Lane is one (destination, customer, lane_key[, subscription]) FIFO.
type Lane struct {
	ID        lanes.ID
	Partition int
	Subject   string

	entries []entry
	head    Head
	heapIdx int
	state   laneState
	// hasLedger is true when the ledger holds a head record for this lane
	// that must be purged once the lane drains.
	hasLedger bool
	// wake is when a waiting lane is promoted: its head's NotBefore, or
	// its WindowEnd while its destination holds it (parked).
	wake time.Time
	// deadlineAt is the window end this lane last put in the deadline
	// heap, in Unix nanoseconds (0: none pending); not a time.Time, so
	// that a lane fits the 352-byte size class (with the event index,
	// TestPendingEventHeapIsSmall).
	deadlineAt int64
	// dueSince is when the lane last became due, in Unix nanoseconds
	// (Attempt.BudgetWait); not a time.Time, to keep a lane small.
	dueSince int64
	// headSince is when the current head became the lane's head.
	headSince time.Time
	// pos is the lane's index in dest.order, where its slot says when it
	// was made (laneSlot.born).
	pos  int
	dest *destination
	cust *customer
}

type customer struct {
	id      string
	weight  float64
	deficit float64
	lanes   int // lanes of this customer with pending entries
	pending int // their entries
	firsts  laneQueue
	retries laneQueue
	// firstsPassed counts the first attempts taken since a retry was,
	// while a retry waited (nextLane).
	firstsPassed int
	active       bool
	// routed counts the customer's lanes here by subscription, for the
	// lanes a subscription routed (nil while there are none): a refused
	// skip reads from it which subscriptions may hold a lane key
	// (noLane), instead of walking the destination's lanes under the
	// lock its deliveries wait for.
	routed map[string]int
}

// route counts a lane of the customer's under subscription sub (n: 1 for
// a lane made, -1 for one forgotten); lanes published to the
// destination itself (sub "") are not counted.
func (c *customer) route(sub string, n int) {
	if sub == "" {
		return
	}
	if c.routed == nil {
		c.routed = make(map[string]int, 1)
	}
	c.routed[sub] += n
	if c.routed[sub] <= 0 {
		delete(c.routed, sub)
		if len(c.routed) == 0 {
			c.routed = nil // a map keeps its capacity: give it back
		}
	}
}

// firstsPerRetry is how many of a customer's first attempts on a
// destination go before one of its due retries while both wait: first
// attempts go first, but a retried lane is not left behind a backlog
// that keeps making new first attempts (its head would wait for the
// whole backlog, and a poison event would never use its attempts up).
const firstsPerRetry = 8

// take pops the customer's next due lane: a first attempt, but after
// firstsPerRetry of them a waiting retry.
func (c *customer) take() *Lane {
	if c.retries.len() > 0 && (c.firsts.len() == 0 || c.firstsPassed >= firstsPerRetry) {
		c.firstsPassed = 0
		return c.retries.pop()
	}
	if c.retries.len() > 0 {
		c.firstsPassed++
	} else {
		c.firstsPassed = 0
	}
	return c.firsts.pop()
}

func (c *customer) due() int { return c.firsts.len() + c.retries.len() }

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

// laneHeap orders waiting lanes by wake.
type laneHeap []*Lane

func (h laneHeap) Len() int           { return len(h) }
func (h laneHeap) Less(i, j int) bool { return h[i].wake.Before(h[j].wake) }
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

// deadline is a held head's window end; deadlineHeap orders them. Entries
// are not removed when a lane moves on: expireDeadlines skips stale ones.
type deadline struct {
	at   time.Time
	lane *Lane
	seq  uint64 // the head's, to tell a stale entry
}

type deadlineHeap []deadline

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlineHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)        { *h = append(*h, x.(deadline)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = deadline{}
	*h = old[:len(old)-1]
	return d
}
