package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/limits"
)

// Two slow destinations, each allowed as many attempts in flight as there
// are workers, do not take every worker: the last ones stay for a
// destination with none in flight, which gets an attempt out at once.
// No more attempts are handed out than there are workers.
func TestSlowDestinationsLeaveAWorkerToOthers(t *testing.T) {
	s, _ := newSched()
	const workers = 16
	s.LimitWorkers(workers)
	wide := limits.Limits{RatePerSecond: 1e9, Burst: 1 << 20, MaxInFlight: workers}
	for _, d := range []string{"slow1", "slow2", "fresh"} {
		s.SetLimits(d, 0, wide)
	}
	for i := range 2 * workers {
		appendTo(s, 0, lid("slow1", "c1", fmt.Sprintf("k%02d", i)), ev(uint64(i+1)))
		appendTo(s, 0, lid("slow2", "c1", fmt.Sprintf("k%02d", i)), ev(uint64(100+i+1)))
	}
	held := map[string][]*Attempt{}
	for {
		a, _ := s.next()
		if a == nil {
			break
		}
		held[a.Lane.ID.Destination] = append(held[a.Lane.ID.Destination], a)
	}
	if slow := len(held["slow1"]) + len(held["slow2"]); slow != workers-reserveOf(workers) {
		t.Fatalf("the slow destinations hold %d workers, want %d of %d (the rest kept for others)", slow, workers-reserveOf(workers), workers)
	}
	// A fresh destination's event goes out at once.
	appendTo(s, 0, lid("fresh", "c1", "k"), ev(1000))
	a, _ := s.next()
	if a == nil || a.Lane.ID.Destination != "fresh" {
		t.Fatalf("with the slow destinations holding their workers, next = %v; want the fresh destination's event", a)
	}
	held["fresh"] = append(held["fresh"], a)
	// Its second lane waits: it has one in flight, and only the reserve
	// is left.
	appendTo(s, 0, lid("fresh", "c1", "k2"), ev(1001))
	if a, _ := s.next(); a != nil {
		t.Fatalf("next = %s, want none: the reserve is for destinations with nothing in flight", a.Lane.ID)
	}
	// Every worker busy: nothing is handed out, even to a destination with
	// nothing in flight.
	s.SetLimits("other", 0, wide)
	fill := reserveOf(workers) - 1
	for i := range fill {
		s.SetLimits(fmt.Sprintf("other%d", i), 0, wide)
		appendTo(s, 0, lid(fmt.Sprintf("other%d", i), "c1", "k"), ev(uint64(2000+i)))
		if a, _ := s.next(); a == nil {
			t.Fatalf("destination other%d with nothing in flight got no worker", i)
		}
	}
	appendTo(s, 0, lid("other", "c1", "k"), ev(3000))
	if w, busy := s.Workers(); busy != workers {
		t.Fatalf("workers %d, busy %d; want all %d busy", w, busy, workers)
	}
	if a, _ := s.next(); a != nil {
		t.Fatalf("every worker busy, next = %s; want none", a.Lane.ID)
	}
	// A slow attempt ends (settled, then its worker free): the freed
	// worker goes to the destination with nothing in flight, not back to
	// the slow ones.
	done := held["slow1"][0]
	if _, err := s.Settle(done, Settlement{Kind: Advance}); err != nil {
		t.Fatal(err)
	}
	s.Done(done)
	if a, _ := s.next(); a == nil || a.Lane.ID.Destination != "other" {
		t.Fatalf("after a slow attempt ended, next = %v; want destination other's event", a)
	}
	checkInvariants(t, s)
}

// One customer's destinations at a hanging endpoint, holding half the
// workers or more, yield to another customer: its due attempts go
// first, and every worker freed by the greedy customer's hung attempts
// goes to it while the greedy customer holds half. With nobody else
// waiting, the greedy customer keeps every worker busy.
func TestOneCustomersDestinationsLeaveWorkersToOthers(t *testing.T) {
	s, _ := newSched()
	const workers = 16
	s.LimitWorkers(workers)
	wide := limits.Limits{RatePerSecond: 1e9, Burst: 1 << 20, MaxInFlight: workers}
	for i := range 2 * workers {
		d := fmt.Sprintf("hang%02d", i)
		s.SetLimits(d, 0, wide)
		appendTo(s, 0, lid(d, "greedy", "k1"), ev(uint64(i+1)))
		appendTo(s, 0, lid(d, "greedy", "k2"), ev(uint64(2*workers+i+1)))
	}
	byCustomer := map[string][]*Attempt{}
	take := func() int {
		n := 0
		for {
			a, _ := s.next()
			if a == nil {
				return n
			}
			byCustomer[a.Lane.ID.Customer] = append(byCustomer[a.Lane.ID.Customer], a)
			n++
		}
	}
	if n := take(); n != workers {
		t.Fatalf("the greedy customer alone was handed %d attempts, want every worker's (%d)", n, workers)
	}
	s.SetLimits("bystander", 0, wide)
	for i := range workers {
		appendTo(s, 0, lid("bystander", "other", fmt.Sprintf("k%02d", i)), ev(uint64(100+i)))
	}
	// The greedy customer's hung attempts end one by one: while it holds
	// half the workers or more, none goes back to it.
	ends := workers / 2
	for i := range ends {
		done := byCustomer["greedy"][i]
		if _, err := s.Settle(done, Settlement{Kind: Advance}); err != nil {
			t.Fatal(err)
		}
		s.Done(done)
		take()
	}
	// The first freed worker goes to other's destination (nothing in
	// flight); the next ones fill the reserve back (other's destination
	// has one in flight, and the reserve is not greedy's while other
	// waits); every one after goes to other.
	if greedy, other := len(byCustomer["greedy"]), len(byCustomer["other"]); greedy != workers || other != ends-reserveOf(workers) {
		t.Fatalf("after %d of greedy's attempts ended: greedy was handed %d attempts in all, other %d; want %d and %d", ends, greedy, other, workers, ends-reserveOf(workers))
	}
	if _, busy := s.Workers(); busy != workers-reserveOf(workers) {
		t.Fatalf("busy %d, want all but the reserve (%d)", busy, workers-reserveOf(workers))
	}
	checkInvariants(t, s)
}

// While a customer is big, another customer's destination waiting for a
// budget token does not hold the big customer back, and goes first again
// once its token comes.
func TestAnotherCustomersTokenComesFirstWhenItComes(t *testing.T) {
	s, clk := newSched()
	const workers = 16
	s.LimitWorkers(workers)
	wide := limits.Limits{RatePerSecond: 1e9, Burst: 1 << 20, MaxInFlight: workers}
	for i := range workers {
		d := fmt.Sprintf("hang%02d", i)
		s.SetLimits(d, 0, wide)
		appendTo(s, 0, lid(d, "greedy", "k1"), ev(uint64(i+1)))
		appendTo(s, 0, lid(d, "greedy", "k2"), ev(uint64(workers+i+1)))
	}
	for range workers / 2 {
		if a, _ := s.next(); a == nil || a.Lane.ID.Customer != "greedy" {
			t.Fatalf("next = %v, want one of greedy's", a)
		}
	}
	s.SetLimits("metered", 0, limits.Limits{RatePerSecond: 1, Burst: 1, MaxInFlight: workers})
	for i := range 3 {
		appendTo(s, 0, lid("metered", "other", fmt.Sprintf("k%d", i)), ev(uint64(100+i)))
	}
	want := []string{"other", "greedy", "greedy"}
	for i, customer := range want {
		if a, _ := s.next(); a == nil || a.Lane.ID.Customer != customer {
			t.Fatalf("pick %d: next = %v, want one of %s's", i, a, customer)
		}
	}
	clk.Advance(time.Second)
	if a, _ := s.next(); a == nil || a.Lane.ID.Customer != "other" {
		t.Fatalf("with the other customer's token come: next = %v, want its attempt", a)
	}
	checkInvariants(t, s)
}

// Another customer's lane on a shared destination whose in-flight cap
// the big customer holds goes first when a slot there frees, not the big
// customer's attempts on its other destinations.
func TestAnotherCustomersLaneTakesAFreedSlotFirst(t *testing.T) {
	s, _ := newSched()
	const workers = 16
	s.LimitWorkers(workers)
	wide := limits.Limits{RatePerSecond: 1e9, Burst: 1 << 20, MaxInFlight: workers}
	s.SetLimits("shared", 0, limits.Limits{RatePerSecond: 1e9, Burst: 1 << 20, MaxInFlight: 2})
	for _, k := range []string{"a", "b", "c"} {
		appendTo(s, 0, lid("shared", "greedy", k), ev(uint64(len(k)+int(k[0]))))
	}
	var shared []*Attempt
	for range 2 {
		shared = append(shared, mustNext(t, s))
	}
	for i := range 40 {
		d := fmt.Sprintf("hang%02d", i)
		s.SetLimits(d, 0, wide)
		appendTo(s, 0, lid(d, "greedy", "k1"), ev(uint64(100+i)))
		appendTo(s, 0, lid(d, "greedy", "k2"), ev(uint64(200+i)))
	}
	for range 10 {
		mustNext(t, s)
	}
	appendTo(s, 0, lid("shared", "other", "x"), ev(1000))
	if a, _ := s.next(); a == nil || a.Lane.ID.Customer != "greedy" {
		t.Fatalf("with shared at its cap: next = %v, want one of greedy's (the others' look found nothing to take)", a)
	}
	if _, err := s.Settle(shared[0], Settlement{Kind: Advance}); err != nil {
		t.Fatal(err)
	}
	s.Done(shared[0])
	if a, _ := s.next(); a == nil || a.Lane.ID.Customer != "other" || a.Lane.ID.Destination != "shared" {
		t.Fatalf("a slot on shared freed: next = %v, want other's lane there", a)
	}
	checkInvariants(t, s)
}

// With a big customer holding most workers, another customer's slow
// destination still leaves the reserve to destinations with nothing in
// flight.
func TestTheReserveHoldsBesideABigCustomer(t *testing.T) {
	s, _ := newSched()
	const workers = 16
	s.LimitWorkers(workers)
	wide := limits.Limits{RatePerSecond: 1e9, Burst: 1 << 20, MaxInFlight: workers}
	for i := range 10 {
		d := fmt.Sprintf("hang%02d", i)
		s.SetLimits(d, 0, wide)
		appendTo(s, 0, lid(d, "greedy", "k1"), ev(uint64(100+i)))
		mustNext(t, s)
	}
	s.SetLimits("slow", 0, wide)
	for i := range 10 {
		appendTo(s, 0, lid("slow", "c", fmt.Sprintf("k%d", i)), ev(uint64(300+i)))
	}
	n := 0
	for {
		a, _ := s.next()
		if a == nil {
			break
		}
		n++
	}
	if n != workers-reserveOf(workers)-10 {
		t.Fatalf("the slow destination took %d workers beside greedy's 10, want %d (the reserve left)", n, workers-reserveOf(workers)-10)
	}
	s.SetLimits("fresh", 0, wide)
	appendTo(s, 0, lid("fresh", "e", "k"), ev(999))
	if a, _ := s.next(); a == nil || a.Lane.ID.Destination != "fresh" {
		t.Fatalf("a destination with nothing in flight: next = %v, want its event (the reserve)", a)
	}
	checkInvariants(t, s)
}

// mustNext is the next attempt, its worker counted (next); the test fails
// without one.
func mustNext(t *testing.T, s *Scheduler) *Attempt {
	t.Helper()
	a, wait := s.next()
	if a == nil {
		t.Fatalf("next: no attempt (wait %v), want one", wait)
	}
	return a
}
