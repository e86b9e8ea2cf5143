package scheduler

import (
	"time"

	"github.com/rivora/rivora/agent/budget"
)

// SavedBudget is a destination's budget as a restart should find it
// (budget.Saved), with what its config said of the destination then:
// when it was made and last resumed, both by the control plane's clock,
// so that a restore compares them with the config's without comparing
// clocks (restoreBudget).
type SavedBudget struct {
	Destination string       `json:"-"`
	Saved       budget.Saved `json:"budget"`
	Created     time.Time    `json:"created,omitzero"`
	Resumed     time.Time    `json:"resumed,omitzero"`
}

// RestoreBudget gives a destination of partition p its budget as saved
// before the partition last changed hands (a restart, a failover). The
// partition's rebuild calls it, usually before the destination is
// configured again: SetLimits takes it up when it makes the budget. A
// budget made already takes it up at once.
func (s *Scheduler) RestoreBudget(destinationID string, partition int, saved SavedBudget) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.dests[destinationID]; d != nil && d.budget != nil {
		s.restoreBudget(d, saved)
		return
	}
	if s.restoredBudgets == nil {
		s.restoredBudgets = make(map[int]map[string]SavedBudget)
	}
	if s.restoredBudgets[partition] == nil {
		s.restoredBudgets[partition] = make(map[string]SavedBudget)
	}
	s.restoredBudgets[partition][destinationID] = saved
}

// takeRestoredBudget gives a budget just made for d what RestoreBudget
// kept for it.
func (s *Scheduler) takeRestoredBudget(d *destination) {
	saved, ok := s.restoredBudgets[d.partition][d.id]
	if !ok {
		return
	}
	delete(s.restoredBudgets[d.partition], d.id)
	s.restoreBudget(d, saved)
}

// restoreBudget applies saved to d's budget, unless it was saved for
// another destination of the same name (deleted and made again while no
// agent that saw it go owned its partition): that one starts afresh. A
// resume since it was saved (the config's last resume is another) ends
// its hold, as it would have ended the hold itself.
func (s *Scheduler) restoreBudget(d *destination, saved SavedBudget) {
	if !saved.Created.Equal(d.createdAt) {
		return
	}
	b := saved.Saved
	if !saved.Resumed.Equal(d.resumedAt) {
		b.HoldUntil = time.Time{}
	}
	d.budget.Restore(b, s.clock.Now())
	if d.budget.State() == budget.Parked {
		s.parked[d] = true
	} else {
		delete(s.parked, d)
	}
}

// NoteCreated gives the scheduler when the control plane made a
// destination (restoreBudget: a budget saved before is another's).
func (s *Scheduler) NoteCreated(destinationID string, partition int, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.destination(destinationID, partition).createdAt = at
}

// noteBudget marks d's budget for saving if it changed since it counted
// before (budget.Budget.Changes).
func (s *Scheduler) noteBudget(d *destination, before uint64) {
	if d.budget.Changes() == before || d.budgetUnsaved || !d.configured || d.deleted {
		return
	}
	d.budgetUnsaved = true
	if s.unsavedBudgets == nil {
		s.unsavedBudgets = make(map[int][]*destination)
	}
	s.unsavedBudgets[d.partition] = append(s.unsavedBudgets[d.partition], d)
}

// ChangedBudgets returns the budgets of partition p's destinations that
// changed since the last call, for its owner to save.
func (s *Scheduler) ChangedBudgets(p int) []SavedBudget {
	s.mu.Lock()
	defer s.mu.Unlock()
	ds := s.unsavedBudgets[p]
	if len(ds) == 0 {
		return nil
	}
	delete(s.unsavedBudgets, p)
	now := s.clock.Now()
	out := make([]SavedBudget, 0, len(ds))
	for _, d := range ds {
		d.budgetUnsaved = false
		if d.dropped || d.deleted || d.budget == nil {
			continue
		}
		out = append(out, SavedBudget{Destination: d.id, Saved: d.budget.Save(now), Created: d.createdAt, Resumed: d.resumedAt})
	}
	return out
}
