// Package eventually is the one polling wait of Rivora's tests: for a
// condition that another goroutine or process makes true, where no event
// can be awaited directly (a partner's request log, a Consul key, an
// agent's report).
package eventually

import (
	"testing"
	"time"
)

// Every is how often True polls.
const Every = 10 * time.Millisecond

// True polls cond until it holds, failing the test with what it waited for
// once timeout passed.
func True(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	if err := Within(timeout, cond); err != nil {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// ErrTimeout is Within's answer when cond never held.
var ErrTimeout = errTimeout{}

type errTimeout struct{}

func (errTimeout) Error() string { return "condition did not hold in time" }

// Within polls cond until it holds (nil) or timeout passes (ErrTimeout),
// for callers that report the failure themselves.
func Within(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return ErrTimeout
		}
		time.Sleep(Every)
	}
	return nil
}
