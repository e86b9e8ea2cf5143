package scheduler

import (
	"testing"
	"time"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/agent/limits"
)

// heldBudget is a budget record saved at at: degraded to 10/s, held an
// hour from then.
func heldBudget(at time.Time) budget.Saved {
	return budget.Saved{State: budget.Degraded, Rate: 10, HoldUntil: at.Add(time.Hour), At: at,
		Last: budget.Transition{At: at, From: budget.Healthy, To: budget.Degraded, Cause: "HTTP 429"}}
}

var budgetLimits = limits.Limits{RatePerSecond: 100, Burst: 100, MaxInFlight: 8}

// A budget restored by the rebuild is taken up when the destination is
// configured, unless it is older than the destination (one deleted and
// made again under its name) or an operator resumed it since it was saved
// (the resume ended the hold).
func TestRestoredBudgetsTakenUpWhenConfigured(t *testing.T) {
	s, _ := newSched()
	s.RestoreBudget("kept", 0, heldBudget(t0.Add(-time.Minute)))
	s.NoteCreated("kept", 0, t0.Add(-time.Hour))
	s.SetLimits("kept", 0, budgetLimits)
	if snap := s.Snapshot("kept")[0]; snap.State != budget.Degraded || snap.CurrentRate != 10 || !snap.HoldUntil.Equal(t0.Add(59*time.Minute)) {
		t.Fatalf("restored: %s at %v/s, hold until %v; want degraded at 10/s, held until %v", snap.State, snap.CurrentRate, snap.HoldUntil, t0.Add(59*time.Minute))
	}

	s.RestoreBudget("remade", 0, heldBudget(t0.Add(-time.Minute)))
	s.NoteCreated("remade", 0, t0.Add(-time.Second))
	s.SetLimits("remade", 0, budgetLimits)
	if snap := s.Snapshot("remade")[0]; snap.State != budget.Healthy || snap.CurrentRate != 100 || !snap.HoldUntil.IsZero() {
		t.Fatalf("a record older than its destination was taken up: %s at %v/s, hold until %v", snap.State, snap.CurrentRate, snap.HoldUntil)
	}

	s.RestoreBudget("resumed", 0, heldBudget(t0.Add(-time.Minute)))
	s.NoteResume("resumed", 0, t0.Add(-time.Second))
	s.SetLimits("resumed", 0, budgetLimits)
	if snap := s.Snapshot("resumed")[0]; snap.State != budget.Degraded || !snap.HoldUntil.IsZero() {
		t.Fatalf("after a resume newer than the record: %s, hold until %v; want degraded, no hold", snap.State, snap.HoldUntil)
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
	if len(got) != 1 || got[0].Destination != "billing" || !got[0].Saved.HoldUntil.Equal(clk.Now().Add(time.Minute)) {
		t.Fatalf("changed budgets %+v, want billing's, held a minute", got)
	}
	if again := s.ChangedBudgets(0); len(again) != 0 {
		t.Fatalf("handed out twice: %+v", again)
	}
}
