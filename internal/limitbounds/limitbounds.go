// Package limitbounds holds the bounds of a destination's whole-number
// limits (burst, max_attempts, max_in_flight): the control plane checks
// every limit against them (API, overrides, the limits file) and
// rivoractl states and checks them on its flags, so the two never
// disagree. It imports nothing, as internal/rates (a rate's bounds) does.
package limitbounds

const (
	// MaxBurst is the largest burst.
	MaxBurst = 1_000_000
	// MaxAttempts is the most attempts an event may be given.
	MaxAttempts = 10_000
	// MaxInFlight is the most attempts in flight at once.
	MaxInFlight = 10_000
)
