package scheduler

import (
	"container/heap"
	"errors"
	"fmt"
	"slices"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/lanes"
)

// Why TakeHead refuses.
var (
	// ErrNoLane: the lane has no pending event here.
	ErrNoLane = errors.New("lane has no pending events here")
	// ErrHeadInFlight: the head is being attempted; its outcome decides
	// (the error returned is a *HeadInFlightError, which says whether
	// the destination is parked).
	ErrHeadInFlight = errors.New("lane head is in flight")
	// ErrHeadMoved: the head is not the event the caller expected (the
	// error returned is a *HeadMovedError, which names the head).
	ErrHeadMoved = errors.New("lane head is not the expected event")
)

// HeadMovedError is TakeHead's refusal when the lane's head is another
// event than the one expected.
type HeadMovedError struct{ Head string }

func (e *HeadMovedError) Error() string { return "lane head is " + e.Head + ", not the expected event" }

// Is makes errors.Is(err, ErrHeadMoved) hold.
func (e *HeadMovedError) Is(target error) bool { return target == ErrHeadMoved }

// HeadInFlightError is TakeHead's refusal of a head being attempted.
type HeadInFlightError struct {
	// DestinationParked: the destination is parked (and not paused), so
	// its probes (one a second, one out at a time) send the same held
	// head again as soon as each attempt ends, and a partner that hangs
	// holds each until the destination's timeout: the head is seldom out
	// of flight until the destination is paused. Otherwise the attempt
	// ends within the timeout, and the lane then waits for its retry time
	// or moves on (a paused destination sends it no more).
	DestinationParked bool
}

func (e *HeadInFlightError) Error() string { return ErrHeadInFlight.Error() }

// Is makes errors.Is(err, ErrHeadInFlight) hold.
func (e *HeadInFlightError) Is(target error) bool { return target == ErrHeadInFlight }

// OtherSubscriptionsError is TakeHead's refusal (ErrNoLane) when the lane
// named has nothing pending but the same customer's lane key has, routed
// otherwise: a lane is named by its subscription too, and `lanes list`
// shows it with its SUBSCRIPTION.
type OtherSubscriptionsError struct {
	// Subscriptions route the lanes that have events, sorted; "" is the
	// lane of events published to the destination.
	Subscriptions []string
}

func (e *OtherSubscriptionsError) Error() string {
	return fmt.Sprintf("%v; the lane key has pending events under subscriptions %q", ErrNoLane, e.Subscriptions)
}

// Is makes errors.Is(err, ErrNoLane) hold.
func (e *OtherSubscriptionsError) Is(target error) bool { return target == ErrNoLane }

// TakeHead takes a lane's head out of play as if it were handed out, so
// an operator can skip it: nothing is sent; the caller dead-letters it and
// reports Dead (or Release, when that fails), and the lane advances.
// expectEventID, when set, must be the head's event id, so a skip decided
// on a listing never skips the event behind it. A head in flight is
// refused: its attempt's outcome decides.
func (s *Scheduler) TakeHead(id lanes.ID, expectEventID string) (*Attempt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dests[id.Destination]
	if d == nil {
		return nil, ErrNoLane
	}
	l := d.lanes[id.Subject(d.partition)]
	switch {
	case l == nil || len(l.entries) == 0:
		return nil, d.noLane(id)
	case l.state == laneInFlight:
		return nil, &HeadInFlightError{DestinationParked: !d.paused && d.budget != nil && d.budget.State() == budget.Parked}
	case expectEventID != "" && l.eventID(&l.entries[0]) != expectEventID:
		return nil, &HeadMovedError{Head: l.eventID(&l.entries[0])}
	}
	s.unplay(l)
	l.state = laneInFlight
	d.inFlight++
	return &Attempt{Lane: l, Entry: l.entry(0), Head: l.head, Number: l.head.Attempts + 1, StartedAt: s.clock.Now()}, nil
}

// noLane is TakeHead's refusal for a lane with nothing pending: an
// *OtherSubscriptionsError when the same customer's lane key has events
// under another subscription (or none). It looks up one lane per
// subscription that routes lanes of the customer here (customer.routed),
// and the lane published to the destination itself: never a walk over
// the destination's lanes, which at a million of them held the lock
// every delivery of the partition waits for for tens of milliseconds.
// Called under the lock.
func (d *destination) noLane(id lanes.ID) error {
	c := d.customers[id.Customer]
	if c == nil || c.lanes == 0 {
		return ErrNoLane // nothing of the customer's pending
	}
	var subs []string
	pending := func(sub string) {
		if sub == id.Subscription {
			return
		}
		other := id
		other.Subscription = sub
		if l := d.lanes[other.Subject(d.partition)]; l != nil && len(l.entries) > 0 {
			subs = append(subs, sub)
		}
	}
	pending("")
	for sub := range c.routed {
		pending(sub)
	}
	if len(subs) == 0 {
		return ErrNoLane
	}
	slices.Sort(subs)
	return &OtherSubscriptionsError{Subscriptions: subs}
}

// unplay takes a lane that is not in flight out of its queue.
func (s *Scheduler) unplay(l *Lane) {
	switch l.state {
	case laneWaiting:
		heap.Remove(&s.waiting, l.heapIdx)
	case laneDue:
		s.undue(l)
	case laneExpired:
		s.dropExpired(l)
	}
}
