package scheduler

import (
	"github.com/google/uuid"

	"github.com/rivora/rivora/lanes"
)

// ExportedEntry is one pending event as a restart needs it: what
// Restored.Add takes.
type ExportedEntry struct {
	Seq        uint64
	AcceptedAt int64     // Unix ns, as the lane keeps it
	ID         uuid.UUID // the event id, when it is a UUID (OddID empty)
	OddID      string    // the event id, when it is not a UUID
}

// ExportedLane is one lane of a partition with its pending events, oldest
// first.
type ExportedLane struct {
	ID      lanes.ID
	Entries []ExportedEntry
}

// ExportPartition copies every non-empty lane of partition p with its
// entries, so an owner stopping cleanly can save them (its snapshot) and
// the next start restore them without reading every stored event. Head
// state is not copied: the ledger holds it. It holds the lock for one
// walk of the partition's lanes.
func (s *Scheduler) ExportPartition(p int) []ExportedLane {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ExportedLane
	for _, d := range s.dests {
		if d.partition != p {
			continue
		}
		for _, l := range d.lanes {
			if len(l.entries) == 0 {
				continue
			}
			el := ExportedLane{ID: l.ID, Entries: make([]ExportedEntry, len(l.entries))}
			for i, e := range l.entries {
				el.Entries[i] = ExportedEntry{Seq: e.Seq, AcceptedAt: e.acceptedAt, ID: e.id}
				if e.id == uuid.Nil {
					el.Entries[i].OddID = d.oddIDs[entryKey{l, e.Seq}]
				}
			}
			out = append(out, el)
		}
	}
	return out
}

// AddUUID is Add for an event id already in its compact form (a
// snapshot's): no text to parse.
func (r *Restored) AddUUID(seq uint64, id uuid.UUID, acceptedAt int64) {
	r.entries = append(r.entries, entry{Seq: seq, acceptedAt: acceptedAt, id: id})
}
