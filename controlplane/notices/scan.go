package notices

import (
	"fmt"
	"time"
)

// Scan decides which parts of the dead-letter archive to read for
// deadletter.created notices, and which dead letters it read are new.
// Agents report, per destination, how many dead letters they archived (a
// counter that restarts with the partition); a destination whose counter
// moved is read from Slack behind the newest dead letter seen of it. A
// full read (every destination) runs first and every FullEvery, for what
// a counter cannot show (an agent that archived and died between two
// reports). Not safe for concurrent use: the notifier's poll loop owns it.
//
// Invariants: a dead letter (event id, dead_at) is new at most once; none
// that died before Floor is new; a destination's seen set holds no entry
// older than Slack behind its newest, and no read starts earlier than
// that, so pruning never makes a counted dead letter new again.
type Scan struct {
	Floor     time.Time
	Slack     time.Duration
	FullEvery time.Duration

	dests    map[string]*destScan
	archived map[string]int64
	dirty    map[string]bool
	lastFull time.Time
	newest   time.Time
}

type destScan struct {
	newest time.Time
	seen   map[string]time.Time
}

// NewScan returns a Scan counting dead letters that died from floor on.
func NewScan(floor time.Time, slack, fullEvery time.Duration) *Scan {
	return &Scan{Floor: floor, Slack: slack, FullEvery: fullEvery, dests: map[string]*destScan{}, dirty: map[string]bool{}}
}

// Archived takes the agents' archived counters, per destination, summed
// over agents; a destination whose sum changed is read next.
func (s *Scan) Archived(counts map[string]int64) {
	for d, n := range counts {
		if s.archived[d] != n {
			s.dirty[d] = true
		}
	}
	for d := range s.archived {
		if _, ok := counts[d]; !ok {
			s.dirty[d] = true
		}
	}
	s.archived = counts
}

// Due says what to read at now: everything from fullSince (full), and
// each destination from its since.
func (s *Scan) Due(now time.Time) (full bool, fullSince time.Time, dests map[string]time.Time) {
	dests = make(map[string]time.Time, len(s.dirty))
	for d := range s.dirty {
		dests[d] = s.since(s.dests[d])
	}
	full = s.lastFull.IsZero() || now.Sub(s.lastFull) >= s.FullEvery
	return full, s.after(s.newest), dests
}

func (s *Scan) since(ds *destScan) time.Time {
	if ds == nil {
		return s.Floor
	}
	return s.after(ds.newest)
}

func (s *Scan) after(newest time.Time) time.Time {
	if at := newest.Add(-s.Slack); at.After(s.Floor) {
		return at
	}
	return s.Floor
}

// Read records a read that succeeded at now: of one destination, or ""
// for a full one. It prunes what no later read can return again.
func (s *Scan) Read(destination string, now time.Time) {
	if destination == "" {
		s.lastFull = now
		clear(s.dirty)
	} else {
		delete(s.dirty, destination)
	}
	for _, ds := range s.dests {
		for k, at := range ds.seen {
			if at.Before(ds.newest.Add(-s.Slack)) {
				delete(ds.seen, k)
			}
		}
	}
}

// New reports whether a dead letter read from the archive was not seen
// before, and remembers it.
func (s *Scan) New(destination, eventID string, deadAt time.Time) bool {
	if deadAt.Before(s.Floor) {
		return false
	}
	ds := s.dests[destination]
	if ds == nil {
		ds = &destScan{seen: map[string]time.Time{}}
		s.dests[destination] = ds
	}
	if deadAt.Before(ds.newest.Add(-s.Slack)) {
		return false // pruned: counted by an earlier read
	}
	key := fmt.Sprintf("%s@%d", eventID, deadAt.UnixNano()) // a replayed event may die again
	if _, ok := ds.seen[key]; ok {
		return false
	}
	ds.seen[key] = deadAt
	if deadAt.After(ds.newest) {
		ds.newest = deadAt
	}
	if deadAt.After(s.newest) {
		s.newest = deadAt
	}
	return true
}
