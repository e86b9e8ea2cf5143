// Package backoff is the one exponential back-off for retry loops: a wait
// that starts at Initial, doubles after each failure up to Max, and starts
// over after a success (Reset).
package backoff

import (
	"context"
	"time"
)

// Backoff is the state of one retry loop; the zero value waits Initial.
// It is not safe for concurrent use: each loop owns its own.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	next    time.Duration
}

// Next returns the wait before the next try and doubles the one after it,
// up to Max.
func (b *Backoff) Next() time.Duration {
	if b.next == 0 {
		b.next = b.Initial
	}
	d := b.next
	b.next = min(2*b.next, b.Max)
	return d
}

// Reset makes the next wait Initial again (call it after a success).
func (b *Backoff) Reset() { b.next = 0 }

// Sleep waits d or until ctx ends; it reports whether the full wait passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
