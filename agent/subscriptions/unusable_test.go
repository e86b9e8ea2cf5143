package subscriptions

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/heldtime"
	"github.com/rivora/rivora/agent/retry"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/routing"
)

const (
	goodSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	// badSecret is one this agent does not parse; its tail must never
	// show in an error.
	badSecret = "whsec_!!hunter2-not-base64"
)

// unusableSet is a snapshot with a filter this agent does not load, a
// secret it does not parse, a previous secret it does not parse (and
// that one paused by its customer), among good ones.
func unusableSet(filter, secret, previous string) []*rivorav1.Subscription {
	return []*rivorav1.Subscription{
		{Id: "sub_good", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Filter: "data.amount > 1", Secret: goodSecret},
		{Id: "sub_filter", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Filter: filter},
		{Id: "sub_secret", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Secret: secret},
		{Id: "sub_previous", CustomerId: "zeta", DestinationId: "erp", Types: []string{"*"}, Secret: goodSecret, Paused: true,
			PreviousSecret: previous, PreviousSecretExpiresAt: timestamppb.New(time.Now().Add(time.Hour))},
		{Id: "sub_plain", CustomerId: "zeta", DestinationId: "erp", Types: []string{"*"}},
	}
}

// One subscription's filter that does not load, or secret, no longer
// fails the whole set: every subscription is installed, the bad ones
// with why (naming them, never the secret). A bad secret holds its
// subscription as paused (no signer); a bad filter does not hold it.
// A later config of them that loads makes them usable; one its customer
// paused stays paused.
func TestTableInstallsUnusableSubscriptionsAmongGoodOnes(t *testing.T) {
	tab := NewTable()
	installed := tab.Replace(time.Now(), unusableSet("data >", badSecret, badSecret))
	if len(installed) != 5 || tab.Len() != 5 {
		t.Fatalf("Replace installed %d (table %d), want all 5", len(installed), tab.Len())
	}
	for _, id := range []string{"sub_good", "sub_plain"} {
		if s, _ := tab.Get(id); s.Unusable != nil || s.UnusableHeld || (id == "sub_good" && (s.Signer == nil || s.Filter == nil)) {
			t.Fatalf("%s beside unusable ones = %+v; want usable", id, s)
		}
	}
	f, _ := tab.Get("sub_filter")
	if f.Unusable == nil || !strings.Contains(f.Unusable.Error(), `subscription "sub_filter"`) || f.UnusableHeld || f.Paused || len(f.UnusableStretches) != 0 {
		t.Fatalf("sub_filter = %+v; want unusable with an error naming it, not held", f)
	}
	for _, id := range []string{"sub_secret", "sub_previous"} {
		s, _ := tab.Get(id)
		if s.Unusable == nil || !strings.Contains(s.Unusable.Error(), `subscription "`+id+`"`) || !s.UnusableHeld || !s.Held() || s.Signer != nil {
			t.Fatalf("%s = %+v; want unusable with an error naming it, held as paused, no signer", id, s)
		}
		// Paused stays the customer's: only sub_previous's paused it.
		if s.Paused != (id == "sub_previous") {
			t.Fatalf("%s: Paused %v; want the customer's value, not this agent's hold", id, s.Paused)
		}
		if strings.Contains(s.Unusable.Error(), "hunter2") {
			t.Fatalf("%s's error %q shows its secret", id, s.Unusable)
		}
		if len(s.UnusableStretches) != 1 || !s.UnusableStretches[0].End.IsZero() {
			t.Fatalf("%s's stretches %v, want one that lasts", id, s.UnusableStretches)
		}
	}
	held, _ := tab.Get("sub_secret")

	// A delta: sub_good changes beside them, still unusable (the held
	// one's stretch goes on).
	next := unusableSet("data >", badSecret, badSecret)
	next[0].Types = []string{"order.*"}
	if n := len(tab.Update(time.Now(), next, nil)); n != 5 {
		t.Fatalf("Update changed %d, want 5", n)
	}
	if s, _ := tab.Get("sub_good"); s.Types[0] != "order.*" || s.Unusable != nil {
		t.Fatalf("sub_good after an Update beside unusable ones = %+v", s)
	}
	if again, _ := tab.Get("sub_secret"); len(again.UnusableStretches) != 1 || !again.UnusableStretches[0].Start.Equal(held.UnusableStretches[0].Start) {
		t.Fatalf("sub_secret, still unusable, has stretches %v; want the first going on", again.UnusableStretches)
	}

	// Configs that load mend them.
	tab.Update(time.Now(), unusableSet("data.amount > 100", goodSecret, goodSecret), nil)
	for _, id := range []string{"sub_filter", "sub_secret", "sub_previous"} {
		s, _ := tab.Get(id)
		if s.Unusable != nil || s.UnusableHeld {
			t.Fatalf("%s after a config that loads = %+v; want usable", id, s)
		}
	}
	if f, _ := tab.Get("sub_filter"); f.Filter == nil || !matches(f, "order.created", amount(150)) || matches(f, "order.created", amount(50)) {
		t.Fatal("sub_filter's loaded filter does not answer as written")
	}
	mended, _ := tab.Get("sub_secret")
	if mended.Held() || mended.Signer == nil || len(mended.UnusableStretches) != 1 || mended.UnusableStretches[0].End.IsZero() {
		t.Fatalf("sub_secret mended = %+v; want not paused, a signer, its stretch ended", mended)
	}
	if !held.UnusableStretches[0].End.IsZero() {
		t.Fatal("mending changed the stretches of the value published before")
	}
	if s, _ := tab.Get("sub_previous"); !s.Paused || !s.Held() || s.Signer == nil {
		t.Fatalf("sub_previous, paused by its customer, mended = %+v; want still paused, with a signer", s)
	}
}

// A filter this agent cannot load fails every event of the
// subscription's types: the subscription gets none, each counted as a
// filter error (as a filter failing at run time); nothing is held for it.
func TestAFilterThatDidNotLoadFailsEveryEvent(t *testing.T) {
	tab := NewTable()
	tab.Replace(time.Now(), unusableSet("data >", goodSecret, goodSecret))
	s, _ := tab.Get("sub_filter")
	counted := filterErrors.WithLabelValues("sub_filter")
	before := testutil.ToFloat64(counted)
	for _, amt := range []float64{0, 150} {
		if matches(s, "order.created", amount(amt)) {
			t.Fatalf("a subscription whose filter did not load matched an event of amount %v", amt)
		}
	}
	if got := testutil.ToFloat64(counted) - before; got != 2 {
		t.Fatalf("filter errors counted %v, want 2", got)
	}
	if good, _ := tab.Get("sub_good"); !matches(good, "order.created", amount(150)) {
		t.Fatal("the good subscription beside it did not match")
	}
}

// A stretch held unusable counts against an event's window as a pause.
func TestHeldPausesMergeTheUnusableStretches(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	s := &Subscription{
		Pauses:            retry.Pauses{{Start: m(10), End: m(30)}},
		UnusableStretches: retry.Pauses{{Start: m(20), End: m(40)}, {Start: m(50)}},
	}
	// Paused 10–30 and held 20–40 make 10–40; held from 50 on.
	if got, want := s.PausedBetween(m(0), m(60)), 40*time.Minute; got != want {
		t.Fatalf("PausedBetween = %v, want %v", got, want)
	}
	if got, want := s.HeldPauses().Between(m(0), m(60)), 40*time.Minute; got != want {
		t.Fatalf("HeldPauses().Between = %v, want %v", got, want)
	}
}

// The stretches a previous run of the agent kept (Recall) carry on at
// each subscription's first config: one still held keeps its open
// stretch, one that loads now closes it; one not in the first whole
// config is forgotten.
func TestTableCarriesOnTheStretchesAPreviousRunKept(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	restart := t0.Add(3 * time.Hour)
	before := retry.Pauses{{Start: t0}}
	tab := NewTable()
	tab.Recall(map[string]heldtime.Held{"sub_still": {Stretches: before}, "sub_mended": {Stretches: before}, "sub_gone": {Stretches: before}})
	tab.Replace(restart, []*rivorav1.Subscription{
		{Id: "sub_still", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Secret: badSecret},
		{Id: "sub_mended", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Secret: goodSecret},
	})
	if still, _ := tab.Get("sub_still"); len(still.UnusableStretches) != 1 || !still.UnusableStretches[0].Start.Equal(t0) || !still.UnusableStretches[0].End.IsZero() {
		t.Fatalf("a subscription still held after the restart has stretches %v; want the one from %v going on", still.UnusableStretches, t0)
	}
	if mended, _ := tab.Get("sub_mended"); mended.PausedBetween(t0, restart.Add(time.Hour)) != 3*time.Hour {
		t.Fatalf("a subscription that loads at the restart has stretches %v; want the one from %v ended then", mended.UnusableStretches, t0)
	}
	tab.Update(restart.Add(time.Minute), []*rivorav1.Subscription{{Id: "sub_gone", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Secret: badSecret}}, nil)
	if gone, _ := tab.Get("sub_gone"); len(gone.UnusableStretches) != 1 || !gone.UnusableStretches[0].Start.Equal(restart.Add(time.Minute)) {
		t.Fatalf("a subscription not in the first config came back with stretches %v; want one of its own", gone.UnusableStretches)
	}
}

func amount(v float64) func() routing.Input {
	return func() routing.Input { return routing.Input{Data: map[string]any{"amount": v}} }
}

// A subscription whose secret breaks and mends more often than the table
// keeps stretches for keeps them all covered: the oldest two fold into
// one, so the time since its first break still holds a pending event's
// window (a little more than it was held, never less).
func TestUnusableStretchesFoldTheOldest(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	tab := NewTable()
	sub := func(secret string) []*rivorav1.Subscription {
		return []*rivorav1.Subscription{{Id: "sub_flaky", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Secret: secret}}
	}
	// Held 10i–10i+5 for i in 0..19: 20 stretches, 100 minutes.
	for i := range 20 {
		tab.Update(m(10*i), sub(badSecret), nil)
		tab.Update(m(10*i+5), sub(goodSecret), nil)
	}
	s, _ := tab.Get("sub_flaky")
	st := s.UnusableStretches
	if len(st) != maxUnusableStretches {
		t.Fatalf("%d stretches kept, want %d", len(st), maxUnusableStretches)
	}
	if !st[0].Start.Equal(m(0)) || !st[0].End.Equal(m(45)) {
		t.Fatalf("oldest stretch %v, want the first five folded: 0–45", st[0])
	}
	if last := st[len(st)-1]; !last.Start.Equal(m(190)) || !last.End.Equal(m(195)) {
		t.Fatalf("latest stretch %v, want 190–195 as it was", last)
	}
	if got := s.PausedBetween(m(0), m(200)); got < 100*time.Minute {
		t.Fatalf("PausedBetween over every stretch = %v, want at least the 100 minutes it was held", got)
	}
}
