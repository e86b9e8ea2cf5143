// Package rates holds the bounds of an event rate (events per second):
// a destination's rate_per_second, wherever limits are checked (API,
// overrides, the limits file), a dead-letter replay's pace, and the rate
// an agent's budget may be set to. The rule lives here once and imports
// nothing, so the control plane, the agent and the CLI share it.
package rates

import "fmt"

const (
	// Min is the slowest rate: one event in 1,000 s. Below it, a wait
	// for the next token outlasts any window (and, near 1e-10, overflows
	// a time.Duration).
	Min = 0.001
	// Max is the fastest rate.
	Max = 1e6
)

// Valid reports whether r is a rate from Min to Max (NaN and ±Inf are
// not).
func Valid(r float64) bool { return r >= Min && r <= Max }

// Clamp returns r held within Min and Max (NaN becomes Min): for a rate
// that was checked already, so that one that slipped through never
// stalls or unpaces anything.
func Clamp(r float64) float64 {
	if !(r >= Min) {
		return Min
	}
	return min(r, Max)
}

// Bound says what a rate must be, for error messages.
func Bound() string {
	return fmt.Sprintf("a number of events per second at least %g (one event in %g s) and at most %g", Min, 1/Min, Max)
}
