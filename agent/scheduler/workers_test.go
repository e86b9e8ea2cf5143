package scheduler

import (
	"fmt"
	"testing"

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
