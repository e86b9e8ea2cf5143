package scheduler

import (
	"runtime"
	"time"
)

// AcceptedWalk counts a destination's pending events accepted at or
// before a time given per lane's subscription (CountAccepted): what a
// window shortened so that they are past it ends. It walks the lanes as
// ListLanes does, one chunk under the lock at a time (a lane pending
// throughout is counted once, as it was when its chunk was read).
type AcceptedWalk struct {
	laneWalk
	by      func(subscription string) time.Time
	counted int
	// looked: the chunk's entries looked at so far (bounds a chunk of
	// deep lanes, as PendingWalk's).
	looked int
}

// CountAccepted starts an AcceptedWalk (nil: the destination has no lanes
// here) that the caller steps, as WalkLanes: by gives the latest
// acceptance time counted in a lane of that subscription ("" for events
// published to the destination); it is called under the scheduler's
// lock, so it must not call the scheduler.
func (s *Scheduler) CountAccepted(destinationID string, by func(subscription string) time.Time) *AcceptedWalk {
	w := &AcceptedWalk{by: by}
	if !s.startLaneWalk(&w.laneWalk, destinationID) {
		return nil
	}
	return w
}

// Step reads one chunk under the lock; false once the walk is over.
func (w *AcceptedWalk) Step() bool {
	if w == nil {
		return false
	}
	w.looked = 0
	more := w.next(listChunk, w.count)
	runtime.Gosched() // as LaneWalk.Step
	return more
}

// count counts a lane's entries accepted by its time. Called under the
// lock.
func (w *AcceptedWalk) count(sl *laneSlot) (endChunk bool) {
	l := sl.lane
	by := w.by(l.ID.Subscription)
	if by.IsZero() {
		return false
	}
	ns := unixNanos(by)
	for i := range l.entries {
		if l.entries[i].acceptedAt <= ns {
			w.counted++
		}
	}
	w.looked += len(l.entries)
	return w.looked >= pendingChunkEntries
}

// Close ends a walk before its end (a walk that ended is closed).
func (w *AcceptedWalk) Close() {
	if w != nil {
		w.close()
	}
}

// Counted is the walk's count so far (all of it once Step returned
// false).
func (w *AcceptedWalk) Counted() int {
	if w == nil {
		return 0
	}
	return w.counted
}
