package webhook

import "time"

// WithClock returns a copy of v that reads the current time from now. It
// exists so receivers (and their tests) can verify recorded deliveries, such
// as published test vectors, whose timestamps are far in the past. On a nil
// Verifier it returns one that answers ErrNoKey, as WithTolerance does,
// rather than panicking.
func (v *Verifier) WithClock(now func() time.Time) *Verifier {
	var c Verifier
	if v != nil {
		c = *v
	}
	c.now = now
	return &c
}
