package scheduler

import (
	"slices"
	"time"
)

// laneWalk is a walk over a destination's pending lanes (d.order) that
// takes the lock one chunk of lanes at a time, for the operator's views
// of many lanes (ListLanes, PendingEvents), so that delivery goes on
// between chunks however many lanes there are. Each lane is seen as it
// was when its chunk was read:
//   - a lane pending throughout the walk is seen exactly once (a lane
//     that swap-remove moves from ahead of the cursor to behind it is
//     handed to the walk in moved);
//   - a lane made during the walk is not seen (a lane that drains and
//     is made again is a new lane), so none is seen twice;
//   - a lane that drains during the walk may or may not be seen.
//
// The walk ends early when the destination is dropped (its partition
// handed off). Its fields belong to the scheduler's lock.
type laneWalk struct {
	s      *Scheduler
	d      *destination
	born   uint64 // lanes born after the walk started are skipped
	cursor int    // next position of d.order to read
	moved  []*Lane
}

// startLaneWalk registers w as a walk over a destination's lanes; false
// when the destination has no lanes here.
func (s *Scheduler) startLaneWalk(w *laneWalk, destinationID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dests[destinationID]
	if d == nil {
		return false
	}
	w.s, w.d, w.born = s, d, s.born
	d.walks = append(d.walks, w)
	return true
}

// next shows visit, under the lock, the slots of the lanes moved behind
// the cursor since the last chunk, then of up to chunk lanes from the
// cursor, or fewer when visit asks to end the chunk; only lanes the walk
// is to see (see laneWalk). It returns false once the walk is over (and
// no longer registered).
func (w *laneWalk) next(chunk int, visit func(*laneSlot) (endChunk bool)) bool {
	s, d := w.s, w.d
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dests[d.id] != d {
		return false // dropped: its lanes are another agent's now
	}
	for _, l := range w.moved {
		if l.pos >= 0 && w.sees(&d.order[l.pos]) {
			visit(&d.order[l.pos])
		}
	}
	w.moved = w.moved[:0]
	start := min(w.cursor, len(d.order)) // lanes drained behind it
	end := min(start+chunk, len(d.order))
	for i := start; i < end; i++ {
		if sl := &d.order[i]; w.sees(sl) && visit(sl) {
			end = i + 1
		}
	}
	w.cursor = end
	if end < len(d.order) {
		return true
	}
	w.unregister()
	return false
}

// sees reports whether the walk is to see a lane: not one made during
// the walk, nor one (restored) empty.
func (w *laneWalk) sees(sl *laneSlot) bool { return sl.born <= w.born && sl.seq != 0 }

// close ends a walk before its end (a walk that ended is closed).
func (w *laneWalk) close() {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.unregister()
}

func (w *laneWalk) unregister() {
	w.d.walks = slices.DeleteFunc(w.d.walks, func(x *laneWalk) bool { return x == w })
	w.moved = nil
}

// laneSlot is a lane's place in d.order, with a copy of what ListLanes
// filters and sorts on, so its walk reads one slice in sequence.
//
// Invariant: for every lane l of d, d.order[l.pos] is l's slot: its
// lane is l, its cust l.cust, and reslot would not change it.
type laneSlot struct {
	lane  *Lane
	born  uint64 // Scheduler.born when the lane was made
	cust  *customer
	since int64  // lane.headSince, Unix ns
	seq   uint64 // the head's sequence (0: no entries)
	stuck bool   // stuck(lane.head)
}

// The hot path (AppendAll, Settle) keeps the slots as it
// goes, so each update is cheap: it writes only the slot's fields that
// changed, and those hold no pointers (no write barrier), once per head,
// not per event.

// newHead makes the lane's first entry its head since now, with the
// attempt state l.head: a lane that was empty got events, or its head
// moved on.
func (l *Lane) newHead(now time.Time) {
	l.headSince = now
	sl := &l.dest.order[l.pos]
	sl.since, sl.seq, sl.stuck = now.UnixNano(), l.entries[0].Seq, stuck(l.head)
}

// setHead replaces the head's attempt state; of it, the slot keeps
// whether it is stuck.
func (l *Lane) setHead(h Head) {
	l.head = h
	l.dest.order[l.pos].stuck = stuck(h)
}

// reslot refreshes the whole of l's slot, for a lane rebuilt by Restore.
func (l *Lane) reslot() {
	sl := &l.dest.order[l.pos]
	sl.since, sl.seq, sl.stuck = l.headSince.UnixNano(), 0, stuck(l.head)
	if len(l.entries) > 0 {
		sl.seq = l.entries[0].Seq
	}
}

// unorder swap-removes l from d.order. A lane moved from ahead of a walk's
// cursor to behind it is handed to that walk, so it is not missed.
func (d *destination) unorder(l *Lane) {
	last := len(d.order) - 1
	if l.pos != last {
		x := d.order[last]
		d.order[l.pos], x.lane.pos = x, l.pos
		for _, w := range d.walks {
			if last >= w.cursor && l.pos < w.cursor {
				w.moved = append(w.moved, x.lane)
			}
		}
	}
	d.order[last] = laneSlot{}
	d.order = d.order[:last]
	l.pos = -1
}
