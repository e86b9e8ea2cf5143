package ingest

import (
	"context"
	"sync"

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
// virtual time at which its customer's earlier waiting calls end (each
// call costs its events), and room goes to the smallest tag (a smaller
// call behind it does not pass it). Nobody waiting, a call costs one
// lock and no allocation.
type turns struct {
	limit int

	mu sync.Mutex
	// running is the events of the calls let in.
	running int
	// clock is the tag of the call let in last: a customer that starts
	// waiting starts there, not behind what others waited before.
	clock uint64
	// queues are the waiting calls by customer; a customer without
	// waiting calls has no queue.
	queues  map[string]*turnQueue
	waiting int
}

// turnQueue is one customer's waiting calls, in arrival order.
type turnQueue struct {
	// finish is the tag at which the customer's last waiting call ends.
	finish uint64
	calls  []*turnCall
}

type turnCall struct {
	start  uint64
	events int
	// in is closed when the call is let in (let set).
	in  chan struct{}
	let bool
}

func newTurns(limit int) *turns {
	if limit <= 0 {
		limit = DefaultConcurrentEvents
	}
	return &turns{limit: limit, queues: map[string]*turnQueue{}}
}

// enter waits for a turn of customer's for a call of events events, until
// ctx ends (its error then). Every nil return must be matched by one
// leave of as many events.
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
	t.mu.Lock()
	if c.let {
		// Let in as ctx ended: the turn is given on.
		t.mu.Unlock()
		t.leave(events)
		return ctx.Err()
	}
	t.drop(customer, c)
	t.mu.Unlock()
	return ctx.Err()
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
	q := t.queues[customer]
	if q == nil {
		q = &turnQueue{finish: t.clock}
		t.queues[customer] = q
	}
	c := &turnCall{start: max(q.finish, t.clock), events: events, in: make(chan struct{})}
	q.finish = c.start + uint64(events)
	q.calls = append(q.calls, c)
	t.waiting++
	waitingPublishes.Inc()
	return c
}

// drop takes a call that stopped waiting out of customer's queue.
func (t *turns) drop(customer string, c *turnCall) {
	q := t.queues[customer]
	for i, w := range q.calls {
		if w == c {
			q.calls = append(q.calls[:i], q.calls[i+1:]...)
			break
		}
	}
	t.waiting--
	waitingPublishes.Dec()
	if len(q.calls) == 0 {
		delete(t.queues, customer)
	}
}

// fits reports a call of events events may go in now: within the
// limit, or alone.
func (t *turns) fits(events int) bool {
	return t.running == 0 || t.running+events <= t.limit
}

// leave ends a call of events events let in by enter and lets the
// waiting calls in, smallest tag first, while they fit.
func (t *turns) leave(events int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.running -= max(events, 1)
	for t.waiting > 0 {
		var next string
		var nq *turnQueue
		for customer, q := range t.queues {
			if nq == nil || q.calls[0].start < nq.calls[0].start || (q.calls[0].start == nq.calls[0].start && customer < next) {
				next, nq = customer, q
			}
		}
		c := nq.calls[0]
		if !t.fits(c.events) {
			// The next call waits for room: smaller calls do not pass it.
			return
		}
		nq.calls[0] = nil
		nq.calls = nq.calls[1:]
		t.waiting--
		waitingPublishes.Dec()
		if len(nq.calls) == 0 {
			delete(t.queues, next)
		}
		t.clock = c.start
		t.running += c.events
		c.let = true
		close(c.in)
	}
}
