// Package limits holds the words a destination's delivery limits are said
// in: its rate, burst and in-flight cap (Limits) and its priority class
// (Class). It is a leaf: the destinations config that sets them and the
// scheduler that applies them both import it, so neither imports the
// other for a word.
package limits

// Limits are the scheduler's share of a destination's limits.
type Limits struct {
	RatePerSecond float64
	Burst         int
	MaxInFlight   int
}

// Class is a destination's priority class: due attempts of a higher class
// are handed out first. Budgets still bound every destination, so a high
// class cannot take more than its own budget.
type Class int

// Priority classes, highest first.
const (
	High Class = iota
	Normal
	Low
)
