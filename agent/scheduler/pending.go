package scheduler

import (
	"container/heap"
	"slices"
	"time"

	"github.com/rivora/rivora/agent/lanes"
)

// PendingFilter selects a destination's pending events.
type PendingFilter struct {
	Destination string
	// Customer and Lane, when set, must match.
	Customer, Lane string
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
// walks the destination's lanes under the lock, each from its tail, and
// stops in a lane at the first entry older than the Limit newest found so
// far: an operator's query, bounded by the destination's pending events.
func (s *Scheduler) PendingEvents(f PendingFilter) (events []PendingEvent, truncated bool) {
	if f.Limit <= 0 {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dests[f.Destination]
	if d == nil {
		return nil, false
	}
	newest := &pendingHeap{}
	matched := 0
	for _, l := range d.lanes {
		if (f.Customer != "" && l.ID.Customer != f.Customer) || (f.Lane != "" && l.ID.Key != f.Lane) {
			continue
		}
		matched += newest.offerLane(l, f)
	}
	events = slices.Clone(*newest)
	slices.SortFunc(events, func(x, y PendingEvent) int { return y.Entry.AcceptedAt.Compare(x.Entry.AcceptedAt) })
	return events, matched > len(events)
}

// offerLane offers a lane's entries in the time bounds to h, newest
// first, and returns how many matched (a lower bound once the rest of
// the lane is older than h's oldest: enough to tell truncation).
func (h *pendingHeap) offerLane(l *Lane, f PendingFilter) int {
	matched := 0
	if f.InFlightOnly && l.state != laneInFlight {
		return 0
	}
	for i := len(l.entries) - 1; i >= 0; i-- {
		if f.InFlightOnly && i > 0 {
			continue
		}
		e := l.entries[i]
		if (!f.Since.IsZero() && e.AcceptedAt.Before(f.Since)) || (!f.Until.IsZero() && e.AcceptedAt.After(f.Until)) {
			continue
		}
		matched++
		if h.Len() == f.Limit {
			if !e.AcceptedAt.After((*h)[0].Entry.AcceptedAt) {
				return matched
			}
			heap.Pop(h)
		}
		pe := PendingEvent{Lane: l.ID, Partition: l.Partition, Entry: e, IsHead: i == 0}
		if i == 0 {
			pe.Head, pe.InFlight = l.head, l.state == laneInFlight
		}
		heap.Push(h, pe)
	}
	return matched
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
