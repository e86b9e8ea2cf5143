package scheduler

import (
	"encoding/binary"
	"maps"

	"github.com/google/uuid"
)

// eventIndex says which lane holds each pending event with a UUID id, so
// Find looks at one lane instead of every entry of every lane while it
// holds the lock the dispatcher needs (at 10M pending events that scan
// took half a second). An id that is not a UUID is looked up in the
// destinations' oddIDs instead: they are few.
//
// It is keyed by 64 bits of the id (indexKey), not all 16: that keeps it
// at ~24 B per pending event, within the scheduler's share of the heap
// budget per event (TestPendingEventHeapIsSmall). Two pending ids that
// share a key (about one chance in 10^6 at 10M pending; or an id pending
// twice) mark the key ambiguous, and Find scans every lane for it as it
// did before the index. Find checks the whole id in the lane either way.
type eventIndex struct {
	lanes map[uint64]*Lane
	// peak is the most keys the map held since it was last made: Go maps
	// keep their capacity, so the map is made again once a quarter of
	// that is left (as destination.shrink does for lanes).
	peak int
}

// ambiguous marks a key that two pending ids share.
var ambiguous = new(Lane)

// indexShrinkFrom is the fewest keys the index must have held for
// shrinking it to be worth a copy.
const indexShrinkFrom = 4096

// indexKey folds a UUID's two halves: a version 7 id's first half is
// mostly its timestamp, its second half random.
func indexKey(id uuid.UUID) uint64 {
	return binary.LittleEndian.Uint64(id[:8]) ^ binary.LittleEndian.Uint64(id[8:])
}

// add indexes l's entries from position from on.
func (x *eventIndex) add(l *Lane, from int) {
	if x.lanes == nil {
		x.lanes = make(map[uint64]*Lane)
	}
	for i := from; i < len(l.entries); i++ {
		id := l.entries[i].id
		if id == uuid.Nil {
			continue
		}
		// One map operation for a new key, not a lookup then an insert:
		// at millions of keys each touches a cold slot, and a rebuild
		// adds every pending event. A key that was there already (the
		// map did not grow) becomes ambiguous.
		k := indexKey(id)
		had := len(x.lanes)
		x.lanes[k] = l
		if len(x.lanes) == had {
			x.lanes[k] = ambiguous
		}
	}
	x.peak = max(x.peak, len(x.lanes))
}

// remove forgets e, an entry of l that is leaving it (a delivered head:
// one map delete, and now and then a shrink).
func (x *eventIndex) remove(l *Lane, e *entry) {
	x.forget(l, e)
	x.shrink()
}

// removeAll forgets every entry of l (its lane is emptied or dropped).
func (x *eventIndex) removeAll(l *Lane) {
	for i := range l.entries {
		x.forget(l, &l.entries[i])
	}
	x.shrink()
}

// forget drops e's key if it names l; an ambiguous key stays (Find's
// scan for it finds what is left, or nothing).
func (x *eventIndex) forget(l *Lane, e *entry) {
	if e.id == uuid.Nil {
		return
	}
	if k := indexKey(e.id); x.lanes[k] == l {
		delete(x.lanes, k)
	}
}

// shrink gives back the memory of keys that left once at most a quarter
// of the most the index held are left; copying at a quarter keeps the
// cost per removed key constant.
func (x *eventIndex) shrink() {
	if x.peak < indexShrinkFrom || len(x.lanes) > x.peak/4 {
		return
	}
	fresh := make(map[uint64]*Lane, len(x.lanes))
	maps.Copy(fresh, x.lanes)
	x.lanes = fresh
	x.peak = len(x.lanes)
}

// lookup returns the lane that holds the event id: nil when none does,
// ambiguous when the caller must scan.
func (x *eventIndex) lookup(id uuid.UUID) *Lane {
	return x.lanes[indexKey(id)]
}

// indexOf is partition p's id index, made on first use.
func (s *Scheduler) indexOf(p int) *eventIndex {
	x := s.byEventID[p]
	if x == nil {
		if s.byEventID == nil {
			s.byEventID = make(map[int]*eventIndex)
		}
		x = &eventIndex{}
		s.byEventID[p] = x
	}
	return x
}

// unindex forgets every entry of l in its partition's index (none once
// the partition was dropped: its index went with it).
func (s *Scheduler) unindex(l *Lane) {
	if x := s.byEventID[l.Partition]; x != nil {
		x.removeAll(l)
	}
}

// ExpectPending sizes partition p's id index for n pending events when it
// holds none yet: a rebuild that knows how many it restores (a snapshot's
// count) then grows the map once, not by doubling through a million keys
// (each growth rehashes every key so far).
func (s *Scheduler) ExpectPending(p, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.indexOf(p)
	if len(x.lanes) == 0 && n > 0 {
		x.lanes = make(map[uint64]*Lane, n)
	}
}
