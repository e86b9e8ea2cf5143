package scheduler

// The tests of this package settle attempts through these shorthands for
// Settle and Observe, named after the settlements they make.

// Succeeded settles a delivered head: the lane advances.
func (s *Scheduler) Succeeded(a *Attempt) Outcome { return s.mustSettle(a, Settlement{Kind: Advance}) }

// Dead settles a head already recorded as a dead letter: the lane advances.
func (s *Scheduler) Dead(a *Attempt) Outcome { return s.mustSettle(a, Settlement{Kind: AdvanceDead}) }

// Retry settles a failed head that waits until head.NotBefore.
func (s *Scheduler) Retry(a *Attempt, head Head) {
	s.mustSettle(a, Settlement{Kind: Retry, Head: head})
}

// Release settles an attempt that was not made.
func (s *Scheduler) Release(a *Attempt) { s.mustSettle(a, Settlement{Kind: Release}) }

func (s *Scheduler) mustSettle(a *Attempt, st Settlement) Outcome {
	out, err := s.Settle(a, st)
	if err != nil {
		panic(err)
	}
	return out
}

// OtherwiseHealthy is what the latest Observe of a answered.
func (s *Scheduler) OtherwiseHealthy(a *Attempt) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.otherwiseHealthy(a)
}
