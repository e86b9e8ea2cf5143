package scheduler

import (
	"cmp"
	"container/heap"
	"runtime"
	"slices"
	"time"

	"github.com/rivora/rivora/lanes"
)

// LaneState is what a pending lane's head waits for.
type LaneState int

// Lane states, as ListLanes reports them.
const (
	// LaneDue: the head waits for its destination's budget (or, its
	// window closed while held, to be dead-lettered).
	LaneDue LaneState = iota + 1
	// LaneWaiting: the head waits for its retry time, or, held by its
	// parked destination, for the destination's recovery, or for its
	// paused subscription's resume.
	LaneWaiting
	LaneInFlight
)

// LaneSummary is one pending lane as ListLanes reports it.
type LaneSummary struct {
	ID          lanes.ID
	Depth       int // pending events, head included
	HeadEventID string
	Head        Head
	// HeadSince is when the head became the lane's head (see Restore for
	// a rebuilt lane).
	HeadSince time.Time
	// NextAttemptAt is the head's retry time while it waits for one (not
	// while its parked destination holds it), or the end of its
	// destination's Retry-After hold when that is later, due lanes' too;
	// zero otherwise.
	NextAttemptAt time.Time
	State         LaneState
	// Held: the head waits for its parked destination (its last failure
	// was the destination's), not for its own retry time: it goes when a
	// probe gets through (or, due, as the parked destination's one
	// attempt at a time), or dies when its window closes. Only then
	// (Lane.heldByParked); a head whose last failure was the
	// destination's while the destination is healthy or degraded waits
	// for its retry time, then for its turn.
	Held bool
	// SubscriptionPaused: the lane waits for its subscription's resume.
	SubscriptionPaused bool
	headSeq            uint64
	since              int64 // HeadSince in Unix ns, for ordering
}

// Stuck reports whether the lane's head has failed at least once.
func (ls LaneSummary) Stuck() bool { return stuck(ls.Head) }

func stuck(h Head) bool { return h.Attempts > 0 || !h.LastAttemptAt.IsZero() }

// LaneFilter selects the lanes ListLanes reports.
type LaneFilter struct {
	Customer string // "" = every customer
	// Subscription keeps one subscription's lanes ("" = every lane).
	Subscription string
	Stuck        bool // only lanes whose head has failed at least once
	// MinAttempts keeps lanes whose head used at least this many of its
	// max attempts (0: every lane): a lowered max_attempts ends them.
	MinAttempts int
	Limit       int // at most this many lanes (0: count them only)
}

// LaneList is ListLanes' answer.
type LaneList struct {
	Lanes   []LaneSummary // longest-waiting head first
	Matched int           // lanes that matched the filter, Limit aside
}

// listChunk is how many lanes ListLanes reads per hold of the lock: a
// hold of a few µs (1M lanes walk in ~14 ms, BenchmarkListLanes). Larger
// chunks walk no faster and make the lock's other users wait longer
// (BenchmarkLockWaitDuringListLanes).
const listChunk = 256

// ListLanes reports a destination's pending lanes that match f,
// longest-waiting head first (oldest HeadSince; then the head accepted
// first), at most f.Limit of them, and how many matched.
//
// It reads the destination's lanes (d.order) in chunks of listChunk,
// taking the lock for one chunk at a time, and keeps the best f.Limit
// outside the lock: its cost grows with the destination's pending lanes
// only, and delivery goes on between chunks. So the answer is not one
// instant's: each lane is reported as it was when its chunk was read.
// Lanes that change during the walk are reported thus:
//   - a lane pending throughout the walk is reported exactly once (a lane
//     that swap-remove moves from ahead of the walk to behind it is
//     passed to the walk in LaneWalk.moved);
//   - a lane made during the walk is not reported (a lane that drains and
//     is made again is a new lane), so none is reported twice;
//   - a lane that drains during the walk may or may not be reported.
//
// A walk stops early, with what it has, when the destination is dropped
// (its partition handed off).
func (s *Scheduler) ListLanes(destinationID string, f LaneFilter) LaneList {
	w := s.WalkLanes(destinationID, f)
	for w.Step() {
	}
	return w.Result()
}

// WalkLanes starts a ListLanes that the caller steps itself, so it can
// pace the walk (the scheduler does not sleep): call Step until it
// returns false, then Result; Close a walk given up before its end. One
// goroutine at a time.
func (s *Scheduler) WalkLanes(destinationID string, f LaneFilter) *LaneWalk {
	return s.startWalk(destinationID, f, listChunk)
}

// LaneWalk is one ListLanes under way (nil: the destination has no lanes
// here). Its laneWalk belongs to the scheduler's lock; the rest is the
// walking goroutine's own.
type LaneWalk struct {
	laneWalk
	f     LaneFilter
	chunk int
	// batch is the chunk's candidates, copied under the lock.
	batch   []LaneSummary
	top     summaryHeap // the best f.Limit so far, worst on top
	matched int
}

func (s *Scheduler) startWalk(destinationID string, f LaneFilter, chunk int) *LaneWalk {
	w := &LaneWalk{f: f, chunk: chunk}
	if !s.startLaneWalk(&w.laneWalk, destinationID) {
		return nil
	}
	return w
}

// Step reads one chunk under the lock, then keeps its candidates; false
// once the walk is over.
func (w *LaneWalk) Step() bool {
	if w == nil {
		return false
	}
	more := w.read()
	for _, ls := range w.batch {
		w.keep(ls)
	}
	// Let the goroutines that queued on the lock during the chunk take it
	// before the next chunk does (an unlock followed at once by a lock
	// would win it back from them, up to 1 ms each).
	runtime.Gosched()
	return more
}

// read copies the summaries of the next chunk's matching lanes that can
// still make the top; false once the walk is over.
func (w *LaneWalk) read() bool {
	w.batch = w.batch[:0]
	return w.next(w.chunk, w.consider)
}

// consider counts a lane when it matches and copies its summary when it
// would enter the top. It reads only the slot, not the lane, until then:
// the walk reads d.order in sequence instead of chasing a pointer per
// lane. It ends the chunk once the top can be filled: the walk keeps
// them before reading on, so the rest of it copies only lanes that beat
// its worst. Called under the lock.
func (w *LaneWalk) consider(sl *laneSlot) (endChunk bool) {
	if w.f.Customer != "" && sl.cust.id != w.f.Customer {
		return false
	}
	if w.f.Stuck && !sl.stuck {
		return false
	}
	if w.f.Subscription != "" && sl.lane.ID.Subscription != w.f.Subscription {
		return false
	}
	if w.f.MinAttempts > 0 && sl.lane.head.Attempts < w.f.MinAttempts {
		return false
	}
	w.matched++
	if w.f.Limit <= 0 || (len(w.top) >= w.f.Limit && !waitedLonger(sl.since, sl.seq, w.top[0])) {
		return false
	}
	w.batch = append(w.batch, w.s.summary(sl.lane))
	return len(w.top) < w.f.Limit && len(w.top)+len(w.batch) >= w.f.Limit
}

// keep puts a candidate in the top, dropping the worst when full.
func (w *LaneWalk) keep(ls LaneSummary) {
	if len(w.top) < w.f.Limit {
		heap.Push(&w.top, ls)
		return
	}
	if longerWaiting(ls, w.top[0]) {
		w.top[0] = ls
		heap.Fix(&w.top, 0)
	}
}

// Close ends a walk before its end (a walk that ended is closed): the
// scheduler stops keeping track of it.
func (w *LaneWalk) Close() {
	if w != nil {
		w.close()
	}
}

// Result is the walk's answer so far (all of it once Step returned
// false).
func (w *LaneWalk) Result() LaneList {
	if w == nil {
		return LaneList{}
	}
	out := slices.Clone([]LaneSummary(w.top))
	slices.SortFunc(out, func(a, b LaneSummary) int {
		if longerWaiting(a, b) {
			return -1
		}
		if longerWaiting(b, a) {
			return 1
		}
		return 0
	})
	return LaneList{Lanes: out, Matched: w.matched}
}

// summary describes a pending lane. Called under the lock.
func (s *Scheduler) summary(l *Lane) LaneSummary {
	ls := LaneSummary{
		ID: l.ID, Depth: len(l.entries), HeadEventID: l.eventID(&l.entries[0]), Head: l.head,
		HeadSince: l.headSince, headSeq: l.entries[0].Seq, since: l.headSince.UnixNano(),
	}
	switch l.state {
	case laneInFlight:
		ls.State = LaneInFlight
	case laneWaiting:
		ls.State = LaneWaiting
		if ls.Held = l.heldByParked(); !ls.Held {
			ls.NextAttemptAt = l.head.NotBefore
		}
	case laneSubPaused:
		ls.State, ls.SubscriptionPaused = LaneWaiting, true
	default:
		ls.State = LaneDue
		ls.Held = l.heldByParked()
	}
	// A partner's Retry-After holds every lane of its destination, due
	// ones too: none is tried before it ends.
	if b := l.dest.budget; ls.State != LaneInFlight && b != nil && b.HoldUntil().After(ls.NextAttemptAt) && b.HoldUntil().After(s.clock.Now()) {
		ls.NextAttemptAt = b.HoldUntil()
	}
	return ls
}

// longerWaiting orders lanes for ListLanes: older head first, then the
// head accepted first (sequences are the partition's, and a destination
// is in one partition).
func longerWaiting(a, b LaneSummary) bool { return waitedLonger(a.since, a.headSeq, b) }

func waitedLonger(since int64, seq uint64, b LaneSummary) bool {
	if since != b.since {
		return since < b.since
	}
	return cmp.Less(seq, b.headSeq)
}

// summaryHeap keeps the worst summary (the one waiting least) on top.
type summaryHeap []LaneSummary

func (h summaryHeap) Len() int           { return len(h) }
func (h summaryHeap) Less(i, j int) bool { return longerWaiting(h[j], h[i]) }
func (h summaryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *summaryHeap) Push(x any)        { *h = append(*h, x.(LaneSummary)) }
func (h *summaryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
