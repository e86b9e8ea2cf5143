package scheduler

import (
	"testing"
	"time"

	"github.com/rivora/rivora/agent/limits"
)

// BudgetWait is how long a head was due before it was handed out: for a
// destination at 2/s, the second lane waits for the next token.
func TestBudgetWait(t *testing.T) {
	s, clk := newSched()
	s.SetLimits("d1", 0, limits.Limits{RatePerSecond: 2, Burst: 1, MaxInFlight: 1000})
	appendTo(s, 0, lid("d1", "c1", "a"), ev(1), ev(3))
	appendTo(s, 0, lid("d1", "c1", "b"), ev(2))
	a := mustPick(t, s)
	wantAttempt(t, a, lid("d1", "c1", "a"), 1, 1)
	if a.BudgetWait != 0 {
		t.Fatalf("first attempt BudgetWait = %v, want 0 (a token was there)", a.BudgetWait)
	}
	clk.Advance(100 * time.Millisecond)
	s.Succeeded(a) // lane a's next head is due from now
	clk.Advance(400 * time.Millisecond)
	b := mustPick(t, s)
	wantAttempt(t, b, lid("d1", "c1", "b"), 2, 1)
	if b.BudgetWait != 500*time.Millisecond {
		t.Fatalf("second lane BudgetWait = %v, want 500ms (due at t0, the token at t0+500ms)", b.BudgetWait)
	}
	clk.Advance(500 * time.Millisecond)
	next := mustPick(t, s)
	wantAttempt(t, next, lid("d1", "c1", "a"), 3, 1)
	if next.BudgetWait != 900*time.Millisecond {
		t.Fatalf("lane a's next head BudgetWait = %v, want 900ms (due after the success at t0+100ms, the token at t0+1s)", next.BudgetWait)
	}
	checkInvariants(t, s)
}
