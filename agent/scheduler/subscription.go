package scheduler

import (
	"cmp"
	"slices"
	"time"
)

// A paused subscription holds its lanes (lanes.ID.Subscription) the way a
// paused destination holds all of its lanes: they keep their events and
// their heads' state, none is handed out, and nothing is charged. Unlike a
// destination's pause, which skips the whole destination when picking, a
// subscription's lanes share their customer's queues with the lanes of
// its other subscriptions: so a paused subscription's lanes leave the
// queues (state laneSubPaused, in no queue, heap or list) and come back
// on resume, oldest head first, paced by the destination's budget.
// Fairness is untouched: lanes are queued per customer whatever their
// subscription.

// SetSubscriptionPaused holds (paused) or lets go the lanes of one
// subscription's events, which go to destinationID. Nothing pending
// moves; a head in flight finishes its attempt and is held after it. A
// resume needs no destinationID (a deleted subscription's lanes are let
// go so that their events reach the owner, which dead-letters them).
func (s *Scheduler) SetSubscriptionPaused(destinationID, subscriptionID string, paused bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	held, was := s.pausedSubs[subscriptionID]
	switch {
	case paused && !was:
		s.pausedSubs[subscriptionID] = destinationID
		s.holdSubscription(destinationID, subscriptionID)
	case !paused && was:
		delete(s.pausedSubs, subscriptionID)
		s.releaseSubscription(held, subscriptionID, s.clock.Now())
	}
	s.wake()
}

// PausedSubscriptions lists the subscriptions whose lanes are held.
func (s *Scheduler) PausedSubscriptions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.pausedSubs))
	for id := range s.pausedSubs {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// subscriptionPaused reports whether l belongs to a paused subscription.
// s.mu is held.
func (s *Scheduler) subscriptionPaused(l *Lane) bool {
	if l.ID.Subscription == "" || len(s.pausedSubs) == 0 {
		return false
	}
	_, paused := s.pausedSubs[l.ID.Subscription]
	return paused
}

// holdForSubscription holds an idle lane of a paused subscription; false
// when its subscription is not paused. s.mu is held.
func (s *Scheduler) holdForSubscription(l *Lane) bool {
	if !s.subscriptionPaused(l) {
		return false
	}
	l.state = laneSubPaused
	return true
}

// holdSubscription takes a subscription's lanes that are not in flight
// out of play. s.mu is held.
func (s *Scheduler) holdSubscription(destinationID, subscriptionID string) {
	d := s.dests[destinationID]
	if d == nil {
		return
	}
	for _, l := range d.lanes {
		if l.ID.Subscription != subscriptionID || l.state == laneInFlight || l.state == laneSubPaused {
			continue
		}
		s.unplay(l)
		l.state = laneSubPaused
	}
}

// releaseSubscription puts a resumed subscription's held lanes back in
// play, oldest head first, so that within a customer they go in the
// order their events were accepted. s.mu is held.
func (s *Scheduler) releaseSubscription(destinationID, subscriptionID string, now time.Time) {
	d := s.dests[destinationID]
	if d == nil {
		return
	}
	var held []*Lane
	for _, l := range d.lanes {
		if l.ID.Subscription == subscriptionID && l.state == laneSubPaused {
			held = append(held, l)
		}
	}
	slices.SortFunc(held, func(a, b *Lane) int { return cmp.Compare(a.entries[0].Seq, b.entries[0].Seq) })
	for _, l := range held {
		l.state = laneIdle
		s.schedule(l, now)
	}
}

// PendingOf is the number of events pending for one subscription at its
// destination. It walks the destination's lanes: for the control plane
// before it deletes a subscription, not a hot path.
func (s *Scheduler) PendingOf(destinationID, subscriptionID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dests[destinationID]
	if d == nil {
		return 0
	}
	n := 0
	for _, l := range d.lanes {
		if l.ID.Subscription == subscriptionID {
			n += len(l.entries)
		}
	}
	return n
}

// TakeSubscription removes every lane of one subscription at its
// destination that is not in flight and returns their entries (for
// archiving when the subscription is deleted with force), and what it
// left to the attempts in flight; the destination's other lanes are
// untouched.
func (s *Scheduler) TakeSubscription(destinationID, subscriptionID string) (map[*Lane][]Entry, Left) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dests[destinationID]
	if d == nil {
		return nil, Left{}
	}
	taken := make(map[*Lane][]Entry)
	var left Left
	for _, l := range d.lanes {
		if l.ID.Subscription != subscriptionID {
			continue
		}
		if l.state == laneInFlight {
			left.add(l)
			continue
		}
		s.unplay(l)
		l.state = laneIdle
		d.pending -= len(l.entries)
		l.cust.pending -= len(l.entries)
		s.unindex(l)
		taken[l] = l.takeEntries()
		s.forget(l)
	}
	s.removeIfIdle(d)
	return taken, left
}
