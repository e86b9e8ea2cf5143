package scheduler

import (
	"time"

	"github.com/rivora/rivora/lanes"
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
	// WindowEnd is when the event's retry window closes, as the owner last
	// computed it (zero: not known yet). A held lane of a parked destination
	// waits for the destination's recovery or for WindowEnd, whichever
	// comes first.
	WindowEnd time.Time
}

// laneState is a byte, so that it packs with hasLedger: a Lane fits the
// 352-byte size class.
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

// Lane is one (destination, customer, lane_key[, subscription]) FIFO.
type Lane struct {
	ID        lanes.ID
	Partition int
	Subject   string

	entries []Entry
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
	// heap (zero: none pending).
	deadlineAt time.Time
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
	firsts  laneQueue
	retries laneQueue
	active  bool
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
