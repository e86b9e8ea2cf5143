package webhook

import "time"

// WithClock returns a copy of v that reads the current time from now. It
// exists so receivers (and their tests) can verify recorded deliveries, such
// as published test vectors, whose timestamps are far in the past.
func (v *Verifier) WithClock(now func() time.Time) *Verifier {
	c := *v
	c.now = now
	return &c
}
