package ingest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// queued queues n calls of customer's, of events events each, behind
// the turns already taken, and names them customer1, customer2, ….
func queued(t *testing.T, tr *turns, calls map[*turnCall]string, customer string, n, events int) {
	t.Helper()
	for i := range n {
		c := tr.take(customer, events)
		if c == nil {
			t.Fatalf("%s's call %d let in at once; every turn is taken", customer, i+1)
		}
		calls[c] = fmt.Sprintf("%s%d", customer, i+1)
	}
}

// letIn ends n calls of events events one by one and lists the waiting
// calls let in (one each time).
func letIn(t *testing.T, tr *turns, calls map[*turnCall]string, n, events int) string {
	t.Helper()
	var order []string
	for range n {
		tr.leave(events)
		var let []string
		for c, name := range calls {
			select {
			case <-c.in:
				let = append(let, name)
				delete(calls, c)
			default:
			}
		}
		if len(let) != 1 {
			t.Fatalf("one call ended, %d let in (%v), want 1", len(let), let)
		}
		order = append(order, let[0])
	}
	return strings.Join(order, " ")
}

// A customer's flood of batches waits behind its own calls: another
// customer's call is let in at the next free turn but one, before the
// flood's next batch.
func TestTurnsLetAnotherCustomerPastAFlood(t *testing.T) {
	tr := newTurns(2000)
	for range 2 {
		if c := tr.take("flood", 1000); c != nil {
			t.Fatal("a call waited with room and nobody waiting")
		}
	}
	calls := map[*turnCall]string{}
	queued(t, tr, calls, "flood", 50, 1000)
	queued(t, tr, calls, "quiet", 1, 1)
	if got := letIn(t, tr, calls, 2, 1000); got != "flood1 quiet1" {
		t.Errorf("let in %q, want flood1 quiet1: the quiet customer's one event goes before the flood's second waiting batch", got)
	}
}

// Turns are fair by events: a customer of batches of 100 and one of
// batches of 10, both waiting, get as many events in.
func TestTurnsAreFairByEvents(t *testing.T) {
	tr := newTurns(1)
	if tr.take("big", 100) != nil {
		t.Fatal("the first call waited")
	}
	calls := map[*turnCall]string{}
	queued(t, tr, calls, "big", 3, 100)
	queued(t, tr, calls, "small", 30, 10)
	var order []string
	for _, events := range []int{100, 100, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10} {
		order = append(order, letIn(t, tr, calls, 1, events))
	}
	want := "big1 small1 small2 small3 small4 small5 small6 small7 small8 small9 small10 big2"
	if got := strings.Join(order, " "); got != want {
		t.Errorf("let in\n %s\nwant\n %s", got, want)
	}
}

// Calls go in while their events fit; a call that does not fit waits
// for room, and smaller calls behind it do not pass it; a call larger
// than the limit goes in alone.
func TestTurnsHoldEventsWithinTheLimit(t *testing.T) {
	tr := newTurns(100)
	if tr.take("a", 60) != nil || tr.take("b", 40) != nil {
		t.Fatal("calls of 60 and 40 events waited under a limit of 100")
	}
	calls := map[*turnCall]string{}
	queued(t, tr, calls, "c", 1, 50)
	queued(t, tr, calls, "d", 1, 1)
	if n := tr.waitingCalls(); n != 2 {
		t.Fatalf("%d calls waiting, want 2: 50 more events do not fit beside 100, and one waits behind them", n)
	}
	tr.leave(40) // 60 in: c's 50 does not fit, and d waits behind it
	if n := tr.waitingCalls(); n != 2 {
		t.Fatalf("%d calls waiting, want 2: c's 50 events do not fit beside 60, and d's one does not pass c", n)
	}
	tr.leave(60) // nothing in: c's 50 go in, then d's one
	for c, name := range calls {
		select {
		case <-c.in:
		default:
			t.Fatalf("%s still waits with room for it", name)
		}
	}
	if got := tr.take("e", 49); got != nil {
		t.Fatal("49 events waited beside 51 under a limit of 100")
	}
	tr.leave(50)
	tr.leave(1)
	tr.leave(49)
	if got := tr.take("huge", 500); got != nil {
		t.Fatal("a call larger than the limit waited with nothing in")
	}
	if got := tr.take("f", 1); got == nil {
		t.Fatal("a call went in beside one already over the limit")
	}
}

// A customer that keeps one call waiting at a time, its others let in,
// still moves back by each call's cost: another customer's call waiting
// all along goes in within a turn or two, whatever the names.
func TestTurnsStarveNobody(t *testing.T) {
	for _, names := range [][2]string{{"acme", "zeta"}, {"zeta", "acme"}} {
		busy, patient := names[0], names[1]
		tr := newTurns(200)
		tr.take(busy, 100)
		tr.take(busy, 100)
		w := tr.take(busy, 100)
		q := tr.take(patient, 1)
		let := false
		for round := 0; round < 3 && !let; round++ {
			tr.leave(100)
			select {
			case <-q.in:
				let = true
			default:
			}
			select {
			case <-w.in:
				w = tr.take(busy, 100)
			default:
			}
		}
		if !let {
			t.Errorf("%s's one event waited three turns behind %s's batches, each taken while it waited", patient, busy)
		}
	}
}

// A waiting call that gives up lets the calls behind it in that fit.
func TestTurnsGivingUpLetsTheNextIn(t *testing.T) {
	tr := newTurns(100)
	tr.take("a", 60)
	b := tr.take("b", 50)
	calls := map[*turnCall]string{}
	queued(t, tr, calls, "c", 1, 1) // fits, but behind b
	tr.giveUp("b", b)
	for c, name := range calls {
		select {
		case <-c.in:
		default:
			t.Fatalf("%s still waits, with 40 events of room, after the call before it gave up", name)
		}
	}
	if n := tr.waitingCalls(); n != 0 {
		t.Fatalf("%d calls waiting", n)
	}
}

// Calls a customer gave up (a client's deadline, then its retry) do not
// push its next call back; a fan-out charged while nobody waits leaves
// no tag behind.
func TestTurnsForgetWhatWasGivenUp(t *testing.T) {
	tr := newTurns(100)
	tr.take("flood", 100)
	calls := map[*turnCall]string{}
	queued(t, tr, calls, "flood", 20, 100)
	for range 50 {
		tr.giveUp("quiet", tr.take("quiet", 10))
	}
	queued(t, tr, calls, "quiet", 1, 10)
	if got := letIn(t, tr, calls, 2, 100); got != "flood1 quiet1" {
		t.Errorf("let in %q, want flood1 quiet1: fifty calls given up pushed the next one back", got)
	}

	idle := newTurns(10)
	idle.take("fanout", 10)
	first := idle.take("fanout", 1) // waits: the customer has a tag
	idle.leave(10)
	<-first.in
	idle.charge("fanout", 1000) // nobody waits: no tag
	idle.leave(1001)
	idle.take("other", 10)
	c := idle.take("fanout", 1)
	calls = map[*turnCall]string{c: "fanout1"}
	queued(t, idle, calls, "other", 3, 10)
	if got := letIn(t, idle, calls, 1, 10); got != "fanout1" {
		t.Errorf("let in %q, want fanout1: a fan-out charged while nobody waited still counted", got)
	}
}

// A fan-out's deliveries charged beyond its events hold room: the next
// call waits until they are given back.
func TestTurnsChargeFanOuts(t *testing.T) {
	tr := newTurns(10)
	if tr.take("a", 1) != nil {
		t.Fatal("the first call waited")
	}
	tr.charge("a", 9)
	if tr.take("b", 1) == nil {
		t.Fatal("a call went in beside a fan-out holding all the room")
	}
	tr.leave(10)
	if n := tr.waitingCalls(); n != 0 {
		t.Fatalf("%d calls waiting once the fan-out gave its room back", n)
	}
}

// A waiting call whose context ends leaves its queue, answering the
// context's error; the turns it did not take stay free for the others.
func TestTurnsWaitEndsWithItsContext(t *testing.T) {
	tr := newTurns(1)
	if err := tr.enter(context.Background(), "a", 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tr.enter(ctx, "b", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("a waiting call whose context ended answered %v, want context.Canceled", err)
	}
	if n := tr.waitingCalls(); n != 0 {
		t.Fatalf("%d calls still waiting after the only waiting one gave up", n)
	}
	tr.leave(1)
	if err := tr.enter(context.Background(), "c", 1); err != nil {
		t.Fatalf("the one turn is free again, yet: %v", err)
	}
	if c := tr.take("d", 1); c == nil {
		t.Fatal("a second call let in with a limit of one")
	}
}

// waitingCalls is how many calls wait (for tests).
func (t *turns) waitingCalls() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.waiting
}
