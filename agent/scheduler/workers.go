package scheduler

// The delivery workers are shared by every destination. Were each free to
// take workers up to its max_in_flight, two slow partners (32 in flight
// each by default, 10 s timeouts) would hold all 64 workers, and every
// other destination's attempts would wait seconds for one: "a failing
// destination costs only itself" would hold for one slow partner, not for
// two. So once the workers are counted, the scheduler hands out no more
// attempts than there are workers (an attempt never waits for a worker
// behind slow ones), and keeps the last reserveOf(workers) of them for
// destinations with nothing in flight: slow partners holding many
// attempts each cannot starve any other destination. (As many slow
// partners as workers, one attempt each, still fill the pool.)

// LimitWorkers tells the scheduler how many delivery workers take its
// attempts (0: not counted, as when a test takes them itself). Each
// worker calls Done when it is free again.
func (s *Scheduler) LimitWorkers(workers int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.workers = max(workers, 0)
	s.wake()
}

// Done frees the worker that took a from Attempts, once it is finished
// with it (settled or not).
func (s *Scheduler) Done(a *Attempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freeWorker(a) {
		s.wake()
	}
}

// freeWorker counts a's worker free, once; it reports whether a held
// one. s.mu is held.
func (s *Scheduler) freeWorker(a *Attempt) bool {
	if !a.worker {
		return false
	}
	a.worker = false
	s.busy--
	return true
}

// reserveOf is how many of workers only a destination with nothing in
// flight may take: an eighth, at least one.
func reserveOf(workers int) int { return max(workers/8, 1) }

// workersReserved reports whether d, which has attempts in flight, must
// leave the free workers to destinations with none. s.mu is held.
func (s *Scheduler) workersReserved(d *destination) bool {
	return s.workers > 0 && d.inFlight > 0 && s.busy >= s.workers-reserveOf(s.workers)
}

// Workers is how many delivery workers there are (0: not counted) and
// how many hold an attempt.
func (s *Scheduler) Workers() (workers, busy int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.workers, s.busy
}
