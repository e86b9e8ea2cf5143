package budget_test

import (
	"testing"
	"time"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/internal/rates"
)

func at(ms int) time.Time { return time.Unix(1_000_000, 0).Add(time.Duration(ms) * time.Millisecond) }

func TestHalvingAtMostOncePerSecond(t *testing.T) {
	b := budget.NewBudget(400, 400, budget.DefaultAIMD(), at(0))
	b.Throttled(at(0), 0, "HTTP 429")
	if b.Rate() != 200 || b.State() != budget.Degraded {
		t.Fatalf("after first 429: rate %v state %s, want 200 degraded", b.Rate(), b.State())
	}
	for ms := 1; ms < 1000; ms += 10 {
		b.Throttled(at(ms), 0, "HTTP 429")
	}
	if b.Rate() != 200 {
		t.Fatalf("429s within the same second cut again: rate %v", b.Rate())
	}
	b.Throttled(at(1000), 0, "HTTP 429")
	if b.Rate() != 100 {
		t.Fatalf("429 one second later: rate %v, want 100", b.Rate())
	}
	for s := 2; s < 15; s++ {
		b.Throttled(at(s*1000), 0, "HTTP 429")
	}
	if b.Rate() != 0.5 {
		t.Fatalf("rate fell to %v, want the 0.5 floor", b.Rate())
	}
}

func TestCutAppliesNowNotAfterTheBurst(t *testing.T) {
	b := budget.NewBudget(100, 100, budget.DefaultAIMD(), at(0))
	b.Throttled(at(0), 0, "HTTP 503")
	taken := 0
	for b.Take(at(0)) {
		taken++
	}
	if taken > 50 {
		t.Fatalf("took %d tokens right after a cut to 50/s", taken)
	}
}

func TestRetryAfterHoldsTheDestination(t *testing.T) {
	b := budget.NewBudget(100, 10, budget.DefaultAIMD(), at(0))
	b.Throttled(at(0), 5*time.Second, "HTTP 429")
	if b.Take(at(4999)) {
		t.Fatal("attempt allowed during Retry-After")
	}
	if w := b.Wait(at(1000)); w != 4*time.Second {
		t.Fatalf("Wait during hold = %s, want 4s", w)
	}
	if !b.Take(at(5000)) {
		t.Fatal("attempt refused after Retry-After passed")
	}
}

// When a Retry-After hold ends, what the bucket earned meanwhile is not
// spent at once: one second of the cut rate goes, not the burst.
func TestAHoldsEndIsNoHerd(t *testing.T) {
	b := budget.NewBudget(100, 200, budget.DefaultAIMD(), at(0))
	b.Throttled(at(0), 10*time.Second, "HTTP 429")
	taken := 0
	for b.Take(at(10_000)) {
		taken++
	}
	if want := int(b.Rate()); taken != want {
		t.Fatalf("%d attempts at once when the hold ended, want one second of the cut rate: %d", taken, want)
	}
}

func TestParkedProbesOncePerSecondThenRecovers(t *testing.T) {
	b := budget.NewBudget(50, 50, budget.DefaultAIMD(), at(0))
	for s := 0; s <= 20; s++ {
		b.Throttled(at(s*1000), 0, "HTTP 503")
	}
	if b.State() != budget.Parked {
		t.Fatalf("state after 20s of failures = %s, want parked", b.State())
	}
	probes := 0
	for ms := 20_000; ms < 30_000; ms += 10 {
		if b.Take(at(ms)) {
			probes++
			b.Throttled(at(ms), 0, "HTTP 503")
		}
	}
	if probes < 9 || probes > 10 {
		t.Fatalf("%d probes in 10s while parked, want one per second", probes)
	}
	if !b.Succeeded(at(30_000)) {
		t.Fatal("a successful probe did not report recovery")
	}
	if b.State() != budget.Degraded {
		t.Fatalf("state after probe success = %s, want degraded (climbing)", b.State())
	}
	for s := 31; s < 80; s++ {
		b.Succeeded(at(s * 1000))
	}
	if b.State() != budget.Healthy || b.Rate() != 50 {
		t.Fatalf("after 50s clean: state %s rate %v, want healthy at 50", b.State(), b.Rate())
	}
	tr := b.Transitions()
	if len(tr) < 3 || tr[len(tr)-1].To != budget.Healthy {
		t.Fatalf("transitions not recorded: %+v", tr)
	}
}

func TestAdditiveIncrease(t *testing.T) {
	b := budget.NewBudget(400, 400, budget.DefaultAIMD(), at(0))
	b.Throttled(at(0), 0, "HTTP 429") // 200
	b.Succeeded(at(500))              // within a second of the cut: no raise yet
	if got := b.Rate(); got != 200 {
		t.Fatalf("rate raised within a second of the cut: %v", got)
	}
	b.Succeeded(at(1500)) // +5% of the 400 ceiling per clean second
	if got := b.Rate(); got != 220 {
		t.Fatalf("rate after 1 clean second = %v, want 220", got)
	}
}

func TestSetLimitsWhileDegradedKeepsTheCut(t *testing.T) {
	b := budget.NewBudget(100, 10, budget.DefaultAIMD(), at(0))
	b.Throttled(at(0), 0, "timeout")
	b.SetLimits(400, 10, at(10))
	if b.Rate() != 50 || b.Ceiling() != 400 {
		t.Fatalf("rate %v ceiling %v, want 50 and 400", b.Rate(), b.Ceiling())
	}
	h := budget.NewBudget(100, 10, budget.DefaultAIMD(), at(0))
	h.SetLimits(4, 10, at(10))
	if h.Rate() != 4 {
		t.Fatalf("healthy budget rate after SetLimits(4) = %v", h.Rate())
	}
}

// A rate under the floor never reaches the bucket: not at creation, not
// on a change to a degraded budget (which keeps the lower of its cut rate
// and the new one) (issue 22).
func TestRateHeldAtTheFloor(t *testing.T) {
	b := budget.NewBudget(1e-300, 1, budget.DefaultAIMD(), at(0))
	if b.Rate() != rates.Min {
		t.Fatalf("NewBudget(1e-300): rate %v, want %v", b.Rate(), rates.Min)
	}
	b = budget.NewBudget(50, 50, budget.DefaultAIMD(), at(0))
	b.Throttled(at(0), 0, "HTTP 429")
	b.SetLimits(5e-324, 50, at(10))
	if b.Rate() != rates.Min {
		t.Fatalf("degraded, SetLimits(5e-324): rate %v, want %v", b.Rate(), rates.Min)
	}
	if b.Ceiling() != rates.Min {
		t.Fatalf("ceiling %v, want %v", b.Ceiling(), rates.Min)
	}
}

// An operator's lower rate applies at once: the tokens on hand are capped
// at a second of it, not spent at the old pace first (a probe found 40
// events through in 0.4 s after a cut to 1/s, with 168 tokens on hand).
// A raise keeps the tokens.
func TestALowerRateCapsTheTokensOnHand(t *testing.T) {
	b := budget.NewBudget(200, 200, budget.DefaultAIMD(), at(0))
	b.SetLimits(1, 200, at(10))
	if got := b.Tokens(at(10)); got > 1.0001 {
		t.Fatalf("tokens after the cut to 1/s = %v, want at most 1", got)
	}
	taken := 0
	for b.Take(at(10)) {
		taken++
	}
	if taken != 1 {
		t.Fatalf("attempts allowed right after the cut to 1/s: %d, want 1", taken)
	}
	r := budget.NewBudget(10, 200, budget.DefaultAIMD(), at(0))
	before := r.Tokens(at(10))
	r.SetLimits(50, 200, at(10))
	if got := r.Tokens(at(10)); got != before {
		t.Fatalf("tokens after a raise = %v, want %v kept", got, before)
	}
}

// A destination with a success every few seconds climbs back from a cut
// as fast in time as a busy one: each success counts the clean seconds
// since the last (up to ten), not one.
func TestSparseSuccessesClimbBackInTime(t *testing.T) {
	b := budget.NewBudget(50, 50, budget.DefaultAIMD(), at(0))
	b.Failed(at(0), "HTTP 503")
	b.Failed(at(1000), "HTTP 503")
	if b.State() != budget.Degraded || b.Rate() > 13 {
		t.Fatalf("after two cuts: %s at %v, want degraded at 12.5", b.State(), b.Rate())
	}
	// One success every 5 s: 5 clean seconds each, 2.5/s per second.
	ms := 1000
	for i := range 4 {
		ms += 5000
		b.Succeeded(at(ms))
		if b.State() == budget.Healthy {
			if i < 2 {
				t.Fatalf("healthy after %d sparse successes, want the climb to take 3", i+1)
			}
			break
		}
	}
	if b.State() != budget.Healthy || b.Rate() != 50 {
		t.Fatalf("after 20 clean seconds with a success every 5: %s at %v, want healthy at 50", b.State(), b.Rate())
	}
}

// The latest failure is kept with its cause, whether it cut the rate or
// not: a degraded destination that fails otherwise now says so.
func TestLastFailureKeepsTheNewestCause(t *testing.T) {
	b := budget.NewBudget(50, 50, budget.DefaultAIMD(), at(0))
	if f := b.LastFailure(); !f.At.IsZero() {
		t.Fatalf("a new budget's last failure: %+v, want none", f)
	}
	b.Failed(at(0), "connection refused")
	b.Throttled(at(200), 0, "HTTP 429") // within CutEvery: no cut, still recorded
	if f := b.LastFailure(); f.Cause != "HTTP 429" || !f.At.Equal(at(200)) {
		t.Fatalf("last failure = %+v, want the 429 at +200ms", f)
	}
	if tr := b.Transitions(); tr[len(tr)-1].Cause != "connection refused" {
		t.Fatalf("last transition's cause = %q, want the first failure's", tr[len(tr)-1].Cause)
	}
}

// A success counts only the clean time since the last cut: one success
// right after a 429's cut does not undo it.
func TestOneSuccessDoesNotUndoACut(t *testing.T) {
	b := budget.NewBudget(50, 50, budget.DefaultAIMD(), at(0))
	b.Succeeded(at(8000)) // healthy, raises nothing
	b.Throttled(at(9000), 0, "HTTP 429")
	cut := b.Rate()
	b.Succeeded(at(10_000)) // one clean second after the cut
	if got, want := b.Rate(), cut+0.05*50; got > want+1e-9 || b.State() == budget.Healthy {
		t.Fatalf("after a 429's cut to %v and one success a second later: %s at %v, want at most %v (one second's climb)", cut, b.State(), got, want)
	}
}
