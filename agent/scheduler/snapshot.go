package scheduler

import (
	"sort"
	"time"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/agent/limits"
)

// CustomerSnapshot is one customer's backlog on one destination.
type CustomerSnapshot struct {
	ID           string
	Weight       float64
	DueLanes     int
	WaitingLanes int
	InFlight     int
	Pending      int
}

// DestinationSnapshot is what the scheduler knows of one destination.
type DestinationSnapshot struct {
	ID         string
	Configured bool
	// Paused: no attempt goes out (paused by an operator, or disabled by
	// a partner's 410).
	Paused         bool
	Class          limits.Class
	State          budget.State
	ConfiguredRate float64
	CurrentRate    float64
	LearnedRate    float64 // the partner's ceiling as the budget learned it; 0: none
	Tokens         float64
	HoldUntil      time.Time
	InFlight       int
	MaxInFlight    int
	Pending        int
	Customers      []CustomerSnapshot
	LastStatuses   []int
	LastTransition *budget.Transition
	// Over the last minute: attempts, and of them 429 and 5xx answers and
	// attempts no answer came to (a timeout, a connection or TLS error).
	LastMinuteAttempts, LastMinuteThrottled, LastMinuteServerErrors, LastMinuteNoAnswer int
	// LastMinuteClientErrors: attempts answered another 4xx than 429 (the
	// partner refused the event); LastMinuteArrivals: events that joined
	// its lanes (stored, not rebuilt).
	LastMinuteClientErrors, LastMinuteArrivals int
	// LastFailure is the destination's latest failure that was its own
	// (its cause and when; zero: none since its owner started).
	LastFailure budget.Failure
	// OldestPending is when the oldest pending event was accepted (zero:
	// none pending).
	OldestPending time.Time
	// OldestDue is when the lane due the longest became due: since then
	// its head has waited for a token, an in-flight slot, a worker or its
	// customer's turn (zero: no lane due).
	OldestDue time.Time
	// At is when the snapshot was taken, on the scheduler's clock.
	At time.Time
	// CertificateRefusedAt is the last attempt whose partner refused the
	// destination's new client certificate (zero: none).
	CertificateRefusedAt time.Time
}

// Snapshot reports one destination ("" = every destination), sorted by id.
// It walks the destination's lanes: an operator's query, not a hot path.
func (s *Scheduler) Snapshot(destinationID string) []DestinationSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	var out []DestinationSnapshot
	for id, d := range s.dests {
		if destinationID != "" && id != destinationID {
			continue
		}
		snap := DestinationSnapshot{
			ID: id, At: now, Configured: d.configured, Paused: d.paused, Class: d.class, InFlight: d.inFlight,
			MaxInFlight: d.limits.MaxInFlight, Pending: d.pending, LastStatuses: d.statuses.list(),
			CertificateRefusedAt: d.certRefusedAt,
		}
		m := d.rates.lastMinute(now)
		snap.LastMinuteAttempts, snap.LastMinuteThrottled, snap.LastMinuteServerErrors, snap.LastMinuteNoAnswer = m.attempts, m.throttled, m.serverErrors, m.noAnswer
		snap.LastMinuteClientErrors, snap.LastMinuteArrivals = m.clientErrors, m.arrivals
		if b := d.budget; b != nil {
			snap.State, snap.ConfiguredRate, snap.CurrentRate = b.State(), b.Ceiling(), b.Rate()
			snap.LearnedRate, snap.Tokens, snap.HoldUntil = b.Learned(), b.Tokens(now), b.HoldUntil()
			snap.LastFailure = b.LastFailure()
			if tr := b.Transitions(); len(tr) > 0 {
				last := tr[len(tr)-1]
				snap.LastTransition = &last
			}
		}
		perCustomer := make(map[string]*CustomerSnapshot)
		for _, l := range d.lanes {
			c := perCustomer[l.ID.Customer]
			if c == nil {
				c = &CustomerSnapshot{ID: l.ID.Customer, Weight: l.cust.weight}
				perCustomer[l.ID.Customer] = c
			}
			c.Pending += len(l.entries)
			if len(l.entries) > 0 {
				if at := fromUnixNanos(l.entries[0].acceptedAt); snap.OldestPending.IsZero() || at.Before(snap.OldestPending) {
					snap.OldestPending = at
				}
			}
			switch l.state {
			case laneDue, laneExpired:
				c.DueLanes++
				if at := fromUnixNanos(l.dueSince); l.state == laneDue && (snap.OldestDue.IsZero() || at.Before(snap.OldestDue)) {
					snap.OldestDue = at
				}
			case laneWaiting, laneSubPaused:
				c.WaitingLanes++
			case laneInFlight:
				c.InFlight++
			}
		}
		for _, c := range perCustomer {
			snap.Customers = append(snap.Customers, *c)
		}
		sort.Slice(snap.Customers, func(i, j int) bool { return snap.Customers[i].ID < snap.Customers[j].ID })
		out = append(out, snap)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
