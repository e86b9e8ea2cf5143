// Package scheduler decides which lane head is attempted next. It owns the
// in-memory view of every pending lane of the partitions this agent owns:
// destination → customer → lanes. It is a scheduler, not the source of
// truth: the partition owner rebuilds it from the lane store and ledger at
// any time.
//
// Rules it enforces:
//   - only a lane's head is ever in flight; a lane waiting for a retry holds
//     only itself;
//   - no token in the destination's budget, no attempt: the dispatcher sleeps
//     until the next token instead of polling;
//   - a destination never has more than max_in_flight attempts out, and
//     when the delivery workers are counted (LimitWorkers) no more attempts
//     are handed out than there are workers, the last few kept for
//     destinations with none in flight: slow destinations holding many
//     attempts each cannot starve the others (workers.go);
//   - within a destination, customers with due lanes share attempts by weight
//     (deficit round robin), and within a customer due first attempts go
//     before due retries, oldest first, but while both wait every ninth
//     pick is a retry (firstsPerRetry), so a retried lane never waits for
//     the whole backlog;
//   - a paused subscription's lanes are held, out of every queue, and
//     come back on resume oldest head first (subscription.go); lanes are
//     queued per customer whatever their subscription, so a customer's
//     many subscriptions to a destination give it one share, not many;
//   - a lane held by its parked destination (its head's last failure was the
//     destination's) waits for the destination, not for its own retry time:
//     one probe a second is taken, customers with held lanes in turn (each
//     its held lane whose window closes first: probeLane), and a parked
//     destination has one attempt out at a time (inFlightCap); the probe's
//     success releases every held lane at once, oldest head first, paced
//     by the budget; a held lane whose window closes is handed out at
//     once, without a token, marked Expired;
//   - a destination not configured yet holds its lanes; one the config
//     does not have (ForgetDestination, ForgetUnknown) hands its heads
//     out without a token, at most deletedInFlight at a time, for the
//     owner to dead-letter (Attempt.Unconfigured): never held for ever;
//   - an operator's view of many lanes (ListLanes) holds the lock one
//     chunk of lanes at a time, so it costs delivery no more than a short
//     wait however many lanes there are; an operator's skip (TakeHead)
//     takes a head out of play like a dispatched attempt, so it is
//     reported like one.
//
// Each destination keeps its pending lanes twice: by subject (lanes) and
// in a slice (order, Lane.pos) that ListLanes walks; a lane is in both or
// in neither. Each of its customers counts its lanes by the subscription
// that routed them (customer.routed), so that a refused skip names the
// subscriptions of a lane key by looking up a lane per subscription,
// never by walking the destination's lanes.
//
// Whether a failure that is the destination's counts against the event's
// max_attempts is otherwiseHealthy's rule, answered by Observe; the
// verdict (agent/verdict) applies it.
package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/rivora/rivora/agent/clock"
)

// Attempt is a lane head handed to a delivery worker.
type Attempt struct {
	Lane      *Lane
	Entry     Entry
	Head      Head // state before this attempt
	Number    int  // 1-based attempt number
	StartedAt time.Time
	// Unconfigured: the destination is not in the config this agent
	// applied (ForgetDestination, ForgetUnknown): the head was handed out
	// without a token for the owner to judge, never to be sent. Its
	// event becomes a dead letter (reason deleted) unless it was accepted
	// under a config this agent has not applied yet.
	Unconfigured bool
	// EarlyProbe: the destination is parked and this lane was taken before
	// its own retry time to probe whether the destination is back. Like
	// any failure that is the destination's while it is not otherwise
	// healthy (see otherwiseHealthy), a failed probe costs no attempt.
	EarlyProbe bool
	// Expired: the head was held by its parked destination until its
	// window closed. Nothing is to be sent: the owner dead-letters it
	// (reason window), or reports Retry with a later WindowEnd when a pause
	// moved the window on.
	Expired bool
	// BudgetWait is how long the head was due before it was handed out:
	// waiting for a token of its destination's budget (or a free
	// in-flight slot, its customer's turn, or a free delivery worker). 0 for a probe or an
	// expired head.
	BudgetWait time.Duration
	// settled: Settle ended this attempt (guarded by the scheduler's mu).
	settled bool
	// worker: handed out on Attempts, so it holds a delivery worker until
	// Done (guarded by the scheduler's mu).
	worker bool
}

// Scheduler is safe for concurrent use. Run dispatches attempts on the
// channel returned by Attempts; workers report each outcome back.
type Scheduler struct {
	clock clock.Clock
	kick  chan struct{}
	out   chan *Attempt

	mu    sync.Mutex
	dests map[string]*destination
	ring  []*destination // destinations with due lanes
	// ringClass counts ring's destinations per priority class.
	ringClass [numClasses]int
	parked    map[*destination]bool
	rr        int
	waiting   laneHeap
	expired   []*Lane // lanes in laneExpired, oldest window first
	// deadlines: window ends of held heads, whatever their state.
	deadlines deadlineHeap
	// born counts the lanes ever made (laneSlot.born).
	born uint64
	// pausedSubs are the paused subscriptions, each with its destination
	// (subscription.go).
	pausedSubs map[string]string
	// workers counts the delivery workers (0: not counted); busy the
	// attempts handed out on Attempts and not Done, customerBusy those
	// of each customer, bigCustomers how many customers hold half the
	// workers or more and bigBusy how many workers they hold (workers.go).
	workers, busy         int
	customerBusy          map[string]int
	bigCustomers, bigBusy int
	// othersDue, othersBy and othersAt say when pick looks for other
	// customers' attempts first (othersFirst, noteOthers); othersWaiting
	// that the last look found one held back by the reserve
	// (reservedForOthers).
	othersDue     bool
	othersBy      string
	othersAt      time.Time
	othersWaiting bool
	// byEventID: per partition, which lane holds each pending event
	// (Find). One index per partition, so that dropping a partition (a
	// handoff, the agent's stop) forgets its millions of ids at once,
	// not one by one (findindex.go).
	byEventID map[int]*eventIndex
	// unsavedBudgets: per partition, the destinations whose budget
	// changed since its owner last saved them (budgets.go).
	unsavedBudgets map[int][]*destination
	// restoredBudgets: per partition, the budgets its rebuild restored
	// for destinations not configured yet (budgets.go).
	restoredBudgets map[int]map[string]SavedBudget
}

// New returns an empty scheduler.
func New(clk clock.Clock) *Scheduler {
	return &Scheduler{
		clock:  clk,
		kick:   make(chan struct{}, 1),
		out:    make(chan *Attempt, 16),
		dests:  make(map[string]*destination),
		parked: make(map[*destination]bool),

		customerBusy: make(map[string]int),

		pausedSubs: make(map[string]string),
	}
}

// Attempts is where Run hands out attempts; each must be settled exactly
// once (Settle), and, when workers are counted (LimitWorkers), ended by
// Done once its worker is free.
func (s *Scheduler) Attempts() <-chan *Attempt { return s.out }

func (s *Scheduler) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run dispatches attempts until ctx ends.
func (s *Scheduler) Run(ctx context.Context) error {
	for {
		if ctx.Err() != nil {
			s.releaseUnsent()
			return nil
		}
		a, wait := s.next()
		if a != nil {
			select {
			case s.out <- a:
				continue
			case <-ctx.Done():
				s.giveBack(a)
				s.releaseUnsent()
				return nil
			}
		}
		var timer clock.Timer
		var timerC <-chan time.Time
		if wait > 0 {
			timer = s.clock.NewTimer(wait)
			timerC = timer.C()
		}
		select {
		case <-s.kick:
		case <-timerC:
		case <-ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			s.releaseUnsent()
			return nil
		}
	}
}

// next makes due what is due and picks the attempt to hand out, counting
// the worker it will hold; else it says how long Run may sleep (0: until
// kicked).
func (s *Scheduler) next() (*Attempt, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.promote(now)
	a, wait := s.pick(now)
	if a != nil {
		s.holdWorker(a)
	}
	return a, wait
}

// giveBack settles an attempt that was never handed to a worker:
// released, its lane due again unchanged.
func (s *Scheduler) giveBack(a *Attempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a.settled = true
	s.release(a)
	s.freeWorker(a)
	s.wake()
}

// releaseUnsent gives back attempts still waiting in the hand-off buffer
// when dispatching stops.
func (s *Scheduler) releaseUnsent() {
	for {
		select {
		case a := <-s.out:
			s.giveBack(a)
		default:
			return
		}
	}
}
