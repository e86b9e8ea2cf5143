package scheduler

import (
	"container/heap"
	"runtime"
	"slices"
	"time"

	"github.com/rivora/rivora/lanes"
)

// PendingFilter selects a destination's pending events.
type PendingFilter struct {
	Destination string
	// Customer, Lane and Subscription, when set, must match.
	Customer, Lane, Subscription string
	// Since and Until bound AcceptedAt (zero: unbounded).
	Since, Until time.Time
	// Limit bounds the answer (> 0).
	Limit int
	// InFlightOnly: only lane heads being attempted.
	InFlightOnly bool
}

// PendingEvent is one pending event of a listing.
type PendingEvent struct {
	Lane      lanes.ID
	Partition int
	Entry     Entry
	// IsHead: first in its lane; Head is then its attempt state.
	IsHead   bool
	Head     Head
	InFlight bool
}

// PendingEvents lists a destination's pending events, newest first by
// AcceptedAt, at most f.Limit; truncated reports that more matched. It
// walks the destination's lanes like ListLanes, one chunk at a time under
// the lock, so its cost to delivery does not grow with the number of
// lanes; each lane from its tail, stopping at the first entry older than
// the Limit newest found so far. Lanes that change during the walk are
// seen as ListLanes says (a lane pending throughout is seen once, as it
// was when its chunk was read). A Lane with its Customer and
// Subscription is one lane: looked up, not walked (without Subscription
// the customer's lane key may name a lane per subscription: walked).
func (s *Scheduler) PendingEvents(f PendingFilter) (events []PendingEvent, truncated bool) {
	w := s.WalkPending(f)
	for w.Step() {
	}
	return w.Result()
}

// WalkPending starts a PendingEvents that the caller steps itself, as
// WalkLanes: call Step until it returns false, then Result; Close a walk
// given up before its end. One goroutine at a time.
func (s *Scheduler) WalkPending(f PendingFilter) *PendingWalk {
	return s.startPendingWalk(f, listChunk)
}

// PendingWalk is one PendingEvents under way (nil: nothing to list). Its
// laneWalk belongs to the scheduler's lock, and so does newest while a
// chunk is read.
type PendingWalk struct {
	laneWalk
	f       PendingFilter
	chunk   int
	newest  pendingHeap
	matched int
	// looked: the chunk's entries looked at so far (bounds a chunk of
	// deep lanes).
	looked int
}

// pendingChunkEntries bounds the entries a chunk looks at: the lane that
// reaches it ends the chunk.
const pendingChunkEntries = 4 * listChunk

func (s *Scheduler) startPendingWalk(f PendingFilter, chunk int) *PendingWalk {
	if f.Limit <= 0 {
		return nil
	}
	w := &PendingWalk{f: f, chunk: chunk}
	if !s.startLaneWalk(&w.laneWalk, f.Destination) {
		return nil
	}
	return w
}

// Step reads one chunk under the lock; false once the walk is over.
func (w *PendingWalk) Step() bool {
	if w == nil {
		return false
	}
	if w.f.Customer != "" && w.f.Lane != "" && w.f.Subscription != "" {
		w.offerOne()
		return false
	}
	w.looked = 0
	more := w.next(w.chunk, w.offer)
	runtime.Gosched() // as LaneWalk.Step
	return more
}

// offer offers a matching lane's entries. Called under the lock.
func (w *PendingWalk) offer(sl *laneSlot) (endChunk bool) {
	l := sl.lane
	if (w.f.Customer != "" && sl.cust.id != w.f.Customer) || (w.f.Lane != "" && l.ID.Key != w.f.Lane) ||
		(w.f.Subscription != "" && l.ID.Subscription != w.f.Subscription) {
		return false
	}
	m, looked := w.newest.offerLane(l, w.f)
	w.matched += m
	w.looked += looked
	return w.looked >= pendingChunkEntries
}

// offerOne offers the one lane the filter names, and ends the walk.
func (w *PendingWalk) offerOne() {
	s, d := w.s, w.d
	s.mu.Lock()
	defer s.mu.Unlock()
	w.unregister()
	if s.dests[d.id] != d {
		return
	}
	id := lanes.ID{Destination: d.id, Customer: w.f.Customer, Key: w.f.Lane, Subscription: w.f.Subscription}
	if l := d.lanes[id.Subject(d.partition)]; l != nil {
		w.matched, _ = w.newest.offerLane(l, w.f)
	}
}

// Close ends a walk before its end (a walk that ended is closed).
func (w *PendingWalk) Close() {
	if w != nil {
		w.close()
	}
}

// Result is the walk's answer so far (all of it once Step returned
// false): newest first, and whether more matched.
func (w *PendingWalk) Result() (events []PendingEvent, truncated bool) {
	if w == nil {
		return nil, false
	}
	events = slices.Clone(w.newest)
	slices.SortFunc(events, func(x, y PendingEvent) int { return y.Entry.AcceptedAt.Compare(x.Entry.AcceptedAt) })
	return events, w.matched > len(events)
}

// offerLane offers a lane's entries in the time bounds to h, newest
// first, and returns how many matched (a lower bound once the rest of
// the lane is older than h's oldest: enough to tell truncation) and how
// many it looked at.
func (h *pendingHeap) offerLane(l *Lane, f PendingFilter) (matched, looked int) {
	if f.InFlightOnly && l.state != laneInFlight {
		return 0, 0
	}
	from := len(l.entries) - 1
	if f.InFlightOnly {
		from = 0 // the head alone
	}
	for i := from; i >= 0; i-- {
		looked++
		at := fromUnixNanos(l.entries[i].acceptedAt)
		if (!f.Since.IsZero() && at.Before(f.Since)) || (!f.Until.IsZero() && at.After(f.Until)) {
			continue
		}
		matched++
		if h.Len() == f.Limit {
			if !at.After((*h)[0].Entry.AcceptedAt) {
				return matched, looked
			}
			heap.Pop(h)
		}
		pe := PendingEvent{Lane: l.ID, Partition: l.Partition, Entry: l.entry(i), IsHead: i == 0}
		if i == 0 {
			pe.Head, pe.InFlight = l.head, l.state == laneInFlight
		}
		heap.Push(h, pe)
	}
	return matched, looked
}

// pendingHeap is a min-heap by AcceptedAt: the oldest of the newest kept.
type pendingHeap []PendingEvent

func (h pendingHeap) Len() int           { return len(h) }
func (h pendingHeap) Less(i, j int) bool { return h[i].Entry.AcceptedAt.Before(h[j].Entry.AcceptedAt) }
func (h pendingHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pendingHeap) Push(x any)        { *h = append(*h, x.(PendingEvent)) }
func (h *pendingHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
