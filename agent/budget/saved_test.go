package budget_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/budget"
)

// saveAndRestore passes b's saved state through JSON (as the ledger keeps
// it) into a new budget at the configured rate, as a restart makes it.
func saveAndRestore(t *testing.T, b *budget.Budget, rate float64, burst int, now time.Time) *budget.Budget {
	t.Helper()
	data, err := json.Marshal(b.Save(now))
	if err != nil {
		t.Fatal(err)
	}
	var s budget.Saved
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	restored := budget.NewBudget(rate, burst, budget.DefaultAIMD(), now)
	restored.Restore(s, now)
	return restored
}

// A degraded budget comes back degraded at its cut rate, its learned
// ceiling and hold kept, and lets through what it would have without the
// restart.
func TestARestoredBudgetKeepsItsCutAndHold(t *testing.T) {
	b := budget.NewBudget(200, 200, budget.DefaultAIMD(), at(0))
	for ms := 0; ms < 1000; ms += 5 { // busy: 200 attempts, all held back after the burst
		b.Take(at(ms))
	}
	b.Throttled(at(1000), 30*time.Second, "HTTP 429")
	if b.State() != budget.Degraded || b.HoldUntil() != at(31000) {
		t.Fatalf("before: %s, hold until %v", b.State(), b.HoldUntil())
	}
	r := saveAndRestore(t, b, 200, 200, at(5000))
	if r.State() != budget.Degraded || r.Rate() != b.Rate() || !r.HoldUntil().Equal(at(31000)) || r.Learned() != b.Learned() {
		t.Fatalf("restored: %s at %v/s (learned %v), hold until %v; want degraded at %v/s (learned %v), hold until %v",
			r.State(), r.Rate(), r.Learned(), r.HoldUntil(), b.Rate(), b.Learned(), at(31000))
	}
	if r.Take(at(30999)) {
		t.Fatal("a restored budget let an attempt through during the hold")
	}
	taken, live := 0, 0
	for r.Take(at(31000)) {
		taken++
	}
	for b.Take(at(31000)) {
		live++
	}
	if taken != live {
		t.Fatalf("%d attempts at once after the hold, %d without the restart", taken, live)
	}
	if tr := r.Transitions(); len(tr) != 1 || tr[0].To != budget.Degraded || tr[0].Cause != "HTTP 429" || !tr[0].At.Equal(at(1000)) {
		t.Fatalf("restored transitions %+v, want the cut's", tr)
	}
	// The climb goes on from the cut rate.
	if r.Succeeded(at(33000)); r.Rate() <= b.Rate() {
		t.Fatalf("no climb after a restored cut: %v/s", r.Rate())
	}
}

// A parked budget comes back parked: one probe (the first at once), and
// the configured rate only after a probe gets through and the climb.
func TestARestoredParkedBudgetProbes(t *testing.T) {
	b := budget.NewBudget(100, 100, budget.DefaultAIMD(), at(0))
	for s := 0; s <= 21; s++ {
		b.Failed(at(s*1000), "HTTP 503")
	}
	if b.State() != budget.Parked {
		t.Fatalf("before: %s", b.State())
	}
	r := saveAndRestore(t, b, 100, 100, at(60_000))
	if r.State() != budget.Parked {
		t.Fatalf("restored %s, want parked", r.State())
	}
	if !r.Take(at(60_000)) || r.Take(at(60_500)) || !r.Take(at(61_000)) {
		t.Fatal("a restored parked budget does not probe once a second, the first at once")
	}
	if !r.Succeeded(at(61_100)) || r.State() != budget.Degraded || r.Rate() >= 100 {
		t.Fatalf("after a probe got through: %s at %v/s, want degraded below 100/s", r.State(), r.Rate())
	}
}

// A healthy budget's record restores nothing but a hold that has not
// ended; a hold that ended restores nothing.
func TestARestoredHealthyBudget(t *testing.T) {
	b := budget.NewBudget(100, 100, budget.DefaultAIMD(), at(0))
	r := saveAndRestore(t, b, 100, 100, at(10))
	if r.State() != budget.Healthy || r.Rate() != 100 || !r.HoldUntil().IsZero() {
		t.Fatalf("restored %s at %v/s, hold until %v; want healthy at 100/s, no hold", r.State(), r.Rate(), r.HoldUntil())
	}
	b.Throttled(at(0), 5*time.Second, "HTTP 503")
	r = saveAndRestore(t, b, 100, 100, at(6000))
	if !r.HoldUntil().IsZero() {
		t.Fatalf("an ended hold was restored: %v", r.HoldUntil())
	}
}

// A degraded budget is saved at its cut; the successes after it are not
// saved (only the climb moves). Restored later, it is not failing since
// its cut: its next 429 cuts again, it does not park.
func TestARestoredDegradedBudgetIsNotFailing(t *testing.T) {
	b := budget.NewBudget(200, 200, budget.DefaultAIMD(), at(0))
	b.Throttled(at(1000), 0, "HTTP 429")
	saved := b.Save(at(1000))
	r := budget.NewBudget(200, 200, budget.DefaultAIMD(), at(40_000))
	r.Restore(saved, at(40_000))
	r.Throttled(at(40_100), 0, "HTTP 429")
	if r.State() != budget.Degraded {
		t.Fatalf("a restored degraded budget is %s after one 429", r.State())
	}
}

// A restored hold is at most as long as a partner may ask for, however
// far ahead the clock that saved it ran.
func TestARestoredHoldIsBounded(t *testing.T) {
	b := budget.NewBudget(100, 100, budget.DefaultAIMD(), at(0))
	s := b.Save(at(0))
	s.State, s.HoldUntil = budget.Degraded, at(0).Add(5*time.Hour)
	b.Restore(s, at(0))
	if want := at(0).Add(budget.MaxHold); !b.HoldUntil().Equal(want) {
		t.Fatalf("restored hold until %v, want at most %v", b.HoldUntil(), want)
	}
}
