package scheduler

import (
	"testing"
	"time"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/agent/limits"
)

// heldBudget is a budget record saved at at for a destination made at
// created and never paused: degraded to 10/s, held an hour from then.
func heldBudget(at, created time.Time) SavedBudget {
	return SavedBudget{Created: created, Saved: budget.Saved{State: budget.Degraded, Rate: 10, HoldUntil: at.Add(time.Hour), At: at,
		Last: budget.Transition{At: at, From: budget.Healthy, To: budget.Degraded, Cause: "HTTP 429"}}}
}

var budgetLimits = limits.Limits{RatePerSecond: 100, Burst: 100, MaxInFlight: 8}

// A budget restored by the rebuild is taken up when the destination is
// configured, unless it was saved for another destination of that name
// (deleted and made again) or an operator resumed it since (the resume
// ended the hold). Both are told by the config's own times, not by
// comparing the agent's clock with the control plane's.
func TestRestoredBudgetsTakenUpWhenConfigured(t *testing.T) {
	s, _ := newSched()
	created := t0.Add(-time.Hour)
	s.RestoreBudget("kept", 0, heldBudget(t0.Add(-time.Minute), created))
	s.NoteCreated("kept", 0, created)
	s.NoteResume("kept", 0, time.Time{})
	s.SetLimits("kept", 0, budgetLimits)
	if snap := s.Snapshot("kept")[0]; snap.State != budget.Degraded || snap.CurrentRate != 10 || !snap.HoldUntil.Equal(t0.Add(59*time.Minute)) {
		t.Fatalf("restored: %s at %v/s, hold until %v; want degraded at 10/s, held until %v", snap.State, snap.CurrentRate, snap.HoldUntil, t0.Add(59*time.Minute))
	}

	// Saved (by a clock running ahead) after the new one was made: still
	// the old one's.
	s.RestoreBudget("remade", 0, heldBudget(t0.Add(time.Minute), created))
	s.NoteCreated("remade", 0, t0.Add(-time.Second))
	s.SetLimits("remade", 0, budgetLimits)
	if snap := s.Snapshot("remade")[0]; snap.State != budget.Healthy || snap.CurrentRate != 100 || !snap.HoldUntil.IsZero() {
		t.Fatalf("a record of another destination of the name was taken up: %s at %v/s, hold until %v", snap.State, snap.CurrentRate, snap.HoldUntil)
	}

	// Resumed since (by a clock running behind: before the record's time).
	s.RestoreBudget("resumed", 0, heldBudget(t0.Add(-time.Minute), created))
	s.NoteCreated("resumed", 0, created)
	s.NoteResume("resumed", 0, t0.Add(-2*time.Minute))
	s.SetLimits("resumed", 0, budgetLimits)
	if snap := s.Snapshot("resumed")[0]; snap.State != budget.Degraded || !snap.HoldUntil.IsZero() {
		t.Fatalf("after a resume the record did not know: %s, hold until %v; want degraded, no hold", snap.State, snap.HoldUntil)
	}
}

// Only configured destinations' budget changes are handed to the owner to
// save, and a deleted destination's never (its record would outlive it).
func TestChangedBudgetsOfConfiguredDestinationsOnly(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("orders", 0, budgetLimits)
	appendTo(s, 0, lid("orders", "acme", "u1"), ev(1))
	a := mustPick(t, s)
	s.ForgetDestination("orders")
	s.Observe(a, 429, true, time.Minute, "HTTP 429")
	if got := s.ChangedBudgets(0); len(got) != 0 {
		t.Fatalf("a deleted destination's budget change is to be saved: %+v", got)
	}

	s.SetLimits("billing", 0, budgetLimits)
	appendTo(s, 0, lid("billing", "acme", "u1"), ev(2))
	a = mustPick(t, s)
	s.Observe(a, 429, true, time.Minute, "HTTP 429")
	got := s.ChangedBudgets(0)
	if len(got) != 1 || got[0].Destination != "billing" || !got[0].Saved.HoldUntil.Equal(clk.Now().Add(time.Minute)) || !got[0].Created.IsZero() {
		t.Fatalf("changed budgets %+v, want billing's, held a minute", got)
	}
	if again := s.ChangedBudgets(0); len(again) != 0 {
		t.Fatalf("handed out twice: %+v", again)
	}
}
