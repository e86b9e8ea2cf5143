package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"connectrpc.com/connect"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// DefaultConcurrentEvents is --max-concurrent-events' default: enough
// events at once to keep the streams' writes in groups (a PublishBatch
// of the largest size and more), few enough that an event let in waits
// behind little work.
const DefaultConcurrentEvents = 1024

var waitingPublishes = promauto.NewGauge(prometheus.GaugeOpts{
	Name: "rivora_ingest_waiting_publishes",
	Help: "Publish and PublishBatch calls waiting their customer's turn: the gateway was at --max-concurrent-events.",
})

// turns lets publishes of at most limit events in all be accepted at once
// (a larger batch alone) and, beyond that, lets the waiting calls in by
// customer, fairly by events: a customer flooding the gateway with
// batches waits behind its own calls, while another customer's call is
// let in at the next free turn. Every call handed to the gateway passes
// the same queues (the streams, the server's CPU); without turns a
// flood's hundreds of calls would be there first, each worth up to
// --max-batch events, and every other customer's event would wait behind
// all of them.
//
// The order is start-time fair queuing: a waiting call is tagged with the
// virtual time at which its customer's earlier calls end (each call costs
// its events, a fan-out's deliveries charged once known), at the earliest
// the tag let in last, and room goes to the smallest tag, the earlier
// arrival on a tie (a smaller call behind it does not pass it). While
// anyone waits, a customer's last tag outlives its queue until the clock
// passes it, so one that keeps a single call waiting still moves back by
// each call's cost; once nobody waits, every tag is forgotten (tags order
// waiting calls only). Nobody waiting, a call costs one lock and no
// allocation.
type turns struct {
	limit int

	mu sync.Mutex
	// running is the events of the calls let in (a fan-out's deliveries
	// once charged).
	running int
	// clock is the tag of the call let in last: a customer that starts
	// waiting starts there, not behind what others waited before.
	clock uint64
	// arrivals numbers the waiting calls, for ties.
	arrivals uint64
	// queues are the customers with waiting calls and, while any call
	// waits, those whose last tag is still ahead of clock.
	queues  map[string]*turnQueue
	waiting int
}

// turnQueue is one customer's waiting calls, in arrival order.
type turnQueue struct {
	// finish is the tag at which the customer's last call ends.
	finish uint64
	calls  []*turnCall
}

type turnCall struct {
	start, arrival uint64
	events         int
	// in is closed when the call is let in (let set).
	in  chan struct{}
	let bool
}

// before reports whether c goes in before d.
func (c *turnCall) before(d *turnCall) bool {
	return c.start < d.start || c.start == d.start && c.arrival < d.arrival
}

func newTurns(limit int) *turns {
	if limit <= 0 {
		limit = DefaultConcurrentEvents
	}
	return &turns{limit: limit, queues: map[string]*turnQueue{}}
}

// enter waits for a turn of customer's for a call of events events, until
// ctx ends (its error then). Every nil return must be matched by one
// leave of as many events (and of those charged since).
func (t *turns) enter(ctx context.Context, customer string, events int) error {
	c := t.take(customer, events)
	if c == nil {
		return nil
	}
	select {
	case <-c.in:
		return nil
	case <-ctx.Done():
	}
	t.giveUp(customer, c)
	return ctx.Err()
}

// giveUp ends customer's call c that stopped waiting: out of its queue,
// or, let in meanwhile, its room given back; the calls behind it that fit
// now go in.
func (t *turns) giveUp(customer string, c *turnCall) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.let {
		t.running -= c.events
	} else {
		t.drop(customer, c)
	}
	t.admit()
}

// take lets a call in at once (nil) while nobody waits and its events
// fit, else queues it behind customer's waiting calls.
func (t *turns) take(customer string, events int) *turnCall {
	events = max(events, 1)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.waiting == 0 && t.fits(events) {
		t.running += events
		return nil
	}
	q := t.queue(customer)
	t.arrivals++
	c := &turnCall{start: max(q.finish, t.clock), arrival: t.arrivals, events: events, in: make(chan struct{})}
	q.finish = c.start + uint64(events)
	q.calls = append(q.calls, c)
	t.waiting++
	waitingPublishes.Inc()
	return c
}

// queue is customer's queue, made if it has none. t.mu is held.
func (t *turns) queue(customer string) *turnQueue {
	q := t.queues[customer]
	if q == nil {
		q = &turnQueue{finish: t.clock}
		t.queues[customer] = q
	}
	return q
}

// charge counts extra events for a call of customer's let in: the
// deliveries its fan-outs make beyond its events. They are in already
// (a call never waits for more room while it holds some), so the calls
// after it wait longer, customer's own the longest while others wait.
func (t *turns) charge(customer string, extra int) {
	if extra <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.running += extra
	if t.waiting > 0 {
		q := t.queue(customer)
		q.finish = max(q.finish, t.clock) + uint64(extra)
	}
}

// drop takes a call that stopped waiting out of customer's queue, and
// its cost out of the tags of the customer's calls behind it: a call
// given up (a client's deadline) does not push its retry back. t.mu is
// held.
func (t *turns) drop(customer string, c *turnCall) {
	q := t.queues[customer]
	at := slices.Index(q.calls, c)
	q.calls = slices.Delete(q.calls, at, at+1)
	back := func(tag uint64) uint64 { return max(tag, t.clock+uint64(c.events)) - uint64(c.events) }
	for _, w := range q.calls[at:] {
		w.start = back(w.start)
	}
	q.finish = back(q.finish)
	t.waiting--
	waitingPublishes.Dec()
}

// fits reports a call of events events may go in now: within the
// limit, or alone. t.mu is held.
func (t *turns) fits(events int) bool {
	return t.running == 0 || t.running+events <= t.limit
}

// leave ends a call let in by enter, of events events with those charged
// since, and lets the waiting calls in.
func (t *turns) leave(events int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.running -= max(events, 1)
	t.admit()
}

// admit lets the waiting calls in, the first by tag first, while they
// fit, and forgets the customers with no waiting call whose last tag the
// clock has passed — all of them once nobody waits (tags order waiting
// calls only). t.mu is held.
func (t *turns) admit() {
	defer func() {
		if t.waiting == 0 {
			clear(t.queues)
		}
	}()
	for t.waiting > 0 {
		var next *turnQueue
		for customer, q := range t.queues {
			switch {
			case len(q.calls) == 0:
				if q.finish <= t.clock {
					delete(t.queues, customer)
				}
			case next == nil || q.calls[0].before(next.calls[0]):
				next = q
			}
		}
		c := next.calls[0]
		if !t.fits(c.events) {
			// The next call waits for room: smaller calls do not pass it.
			return
		}
		next.calls[0] = nil
		next.calls = next.calls[1:]
		t.waiting--
		waitingPublishes.Dec()
		t.clock = c.start
		t.running += c.events
		c.let = true
		close(c.in)
	}
}

// turnError is the answer of a call whose context ended while it waited
// its turn (err, ctx's error): canceled or deadline exceeded, as the
// context's, saying what it waited for.
func turnError(ctx context.Context, err error, limit int) error {
	code := connect.CodeDeadlineExceeded
	if errors.Is(ctx.Err(), context.Canceled) {
		code = connect.CodeCanceled
	}
	return connect.NewError(code, fmt.Errorf("ended while waiting its turn: the events being accepted were at --max-concurrent-events (%d), and earlier calls went first: %w", limit, err))
}
