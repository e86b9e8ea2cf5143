package budget_test

import (
	"testing"
	"time"

	"github.com/rivora/rivora/agent/budget"
)

func TestNoAttemptWithoutToken(t *testing.T) {
	now := time.Unix(0, 0)
	b := budget.New(2, 3, now)
	for i := range 3 {
		if !b.Take(now) {
			t.Fatalf("take %d of a full burst of 3 refused", i+1)
		}
	}
	if b.Take(now) {
		t.Fatal("took a 4th token from an empty bucket")
	}
	if w := b.Wait(now); w != 500*time.Millisecond {
		t.Fatalf("Wait at 2/s = %s, want 500ms", w)
	}
	if b.Take(now.Add(499 * time.Millisecond)) {
		t.Fatal("token before it was earned")
	}
	if !b.Take(now.Add(500 * time.Millisecond)) {
		t.Fatal("token not available when Wait said it would be")
	}
}

func TestRateHoldsOverTime(t *testing.T) {
	now := time.Unix(0, 0)
	b := budget.New(20, 1, now)
	b.Take(now)
	taken := 0
	for ms := 1; ms <= 10_000; ms++ {
		if b.Take(now.Add(time.Duration(ms) * time.Millisecond)) {
			taken++
		}
	}
	if taken != 200 {
		t.Fatalf("20/s over 10s gave %d tokens, want 200", taken)
	}
}

func TestSetLimitsKeepsEarnedTokensCapped(t *testing.T) {
	now := time.Unix(0, 0)
	b := budget.New(10, 100, now)
	b.SetLimits(1, 5, now)
	if got := b.Tokens(now); got != 5 {
		t.Fatalf("tokens after lowering burst to 5 = %v", got)
	}
}
