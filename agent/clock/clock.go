// Package clock is the time source of the budget, scheduler and retry code:
// the real wall clock in production, a manual clock in their unit tests so
// timing assertions are exact and instant.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once, d from now.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of time.Timer the scheduler uses.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

func (Real) Now() time.Time { return time.Now() }

func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// Manual is a clock that moves only when told to. Timers fire during
// Advance, in deadline order.
type Manual struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

// NewManual returns a manual clock reading start.
func NewManual(start time.Time) *Manual { return &Manual{now: start} }

func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

func (m *Manual) NewTimer(d time.Duration) Timer {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := &manualTimer{clock: m, at: m.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- m.now
		t.fired = true
		return t
	}
	m.timers = append(m.timers, t)
	return t
}

// Advance moves the clock forward by d, firing every timer that falls due.
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = m.now.Add(d)
	kept := m.timers[:0]
	for _, t := range m.timers {
		if !t.at.After(m.now) {
			t.fired = true
			t.c <- m.now
			continue
		}
		kept = append(kept, t)
	}
	m.timers = kept
}

type manualTimer struct {
	clock *Manual
	at    time.Time
	c     chan time.Time
	fired bool
}

func (t *manualTimer) C() <-chan time.Time { return t.c }

func (t *manualTimer) Stop() bool {
	m := t.clock
	m.mu.Lock()
	defer m.mu.Unlock()
	if t.fired {
		return false
	}
	for i, other := range m.timers {
		if other == t {
			m.timers = append(m.timers[:i], m.timers[i+1:]...)
			break
		}
	}
	t.fired = true
	return true
}
