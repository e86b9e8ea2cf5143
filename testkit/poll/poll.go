// Package poll is the one poll loop of Rivora's tests and benchmarks: it
// waits for a condition that another goroutine or process makes true,
// where no event can be awaited directly (a partner's request log, a
// Consul key, an agent's report, a child process becoming ready).
//
// Until is the loop; True, Within and Check are its shapes for a test
// (fail with what was awaited), a bool condition, and a check that says
// why it does not hold yet.
package poll

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Every is how often True and Within poll.
const Every = 10 * time.Millisecond

// TimeoutError is Until's error when its limit passed: Last is what the
// check said last.
type TimeoutError struct {
	Limit time.Duration
	Last  error
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("not within %s (last: %v)", e.Limit, e.Last)
}

func (e *TimeoutError) Unwrap() error { return e.Last }

// giveUp marks a check's error that no waiting can fix.
type giveUp struct{ err error }

func (g giveUp) Error() string { return g.err.Error() }

// GiveUp makes Until return err at once.
func GiveUp(err error) error { return giveUp{err} }

// Until is the one poll loop: it calls check every interval until check
// returns nil, check gives up (GiveUp: Until returns that error), ctx ends
// (ctx's error, with check's last), or limit passes (0: no limit; a
// *TimeoutError). A limit already past still checks once.
func Until(ctx context.Context, limit, interval time.Duration, check func() error) error {
	var deadline time.Time
	if limit > 0 {
		deadline = time.Now().Add(limit)
	}
	for {
		err := check()
		var stop giveUp
		switch {
		case err == nil:
			return nil
		case errors.As(err, &stop):
			return stop.err
		case !deadline.IsZero() && time.Now().After(deadline):
			return &TimeoutError{Limit: limit, Last: err}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}

// Check calls check every interval until it returns nil, and returns
// check's last error when timeout passes first (a timeout already past
// still checks once); a check that gives up ends it at once.
func Check(timeout, interval time.Duration, check func() error) error {
	timeout = max(timeout, time.Nanosecond) // Until reads 0 as "no limit"
	err := Until(context.Background(), timeout, interval, check)
	var te *TimeoutError
	if errors.As(err, &te) {
		return te.Last
	}
	return err
}

// ErrTimeout is Within's answer when cond never held.
var ErrTimeout = errors.New("condition did not hold in time")

// Within polls cond every Every until it holds (nil) or timeout passes
// (ErrTimeout), for callers that report the failure themselves.
func Within(timeout time.Duration, cond func() bool) error {
	return Check(timeout, Every, func() error {
		if cond() {
			return nil
		}
		return ErrTimeout
	})
}

// True polls cond until it holds, failing the test with what it waited for
// once timeout passed.
func True(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	if err := Within(timeout, cond); err != nil {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}
