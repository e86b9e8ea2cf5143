package scheduler

import (
	"maps"
	"slices"
	"time"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/agent/limits"
)

// numClasses is one past the lowest priority class.
const numClasses = limits.Low + 1

type destination struct {
	id         string
	partition  int
	configured bool
	limits     limits.Limits
	budget     *budget.Budget
	// budgetUnsaved: the budget changed since its owner last saved it;
	// createdAt: when the control plane made it (budgets.go).
	budgetUnsaved bool
	createdAt     time.Time
	class         limits.Class
	paused        bool
	// resumedAt is the destination's last resume the scheduler was told
	// of (NoteResume; resumeNoted: it was told once).
	resumedAt   time.Time
	resumeNoted bool
	statuses    statusRing // last attempt statuses
	// certRefusedAt is the last attempt whose partner refused the new
	// client certificate in the handshake (NoteCertificateRefused).
	certRefusedAt time.Time
	rates         rateRing // the last 15 minutes' attempts and rates
	inFlight      int
	lanes         map[string]*Lane
	// order holds the same lanes as lanes, in a slice (Lane.pos) that
	// ListLanes walks in chunks, each with a copy of what the walk sorts
	// and filters on (laneSlot); walks are the walks under way over it.
	order     []laneSlot
	walks     []*laneWalk
	customers map[string]*customer
	weights   map[string]float64
	active    []*customer // customers with due lanes, in DRR order
	cursor    int
	due       int
	pending   int
	inRing    bool
	// probedCustomer is the customer whose held lane probed d last, while
	// parked (probeLane).
	probedCustomer string
	// peakLanes is the most lanes d had since it last shrank.
	peakLanes int
	// oddIDs are the event ids of its lanes' entries that are not UUIDs
	// (see entry).
	oddIDs map[entryKey]string
	// cached are the encoded events the owner's bounded cache keeps for its
	// lanes' entries (see entry); cachedPeak is the most it held since it
	// last shrank.
	cached     map[entryKey]string
	cachedPeak int
	// dropped: DropPartition forgot this destination; outcomes of its
	// attempts still in flight must not put its lanes back in play.
	dropped bool
	// deleted: ForgetDestination (or ForgetUnknown) was called while
	// something of it was pending or in flight; its heads go to the owner
	// without a token (Attempt.Unconfigured), and it is removed when the
	// last of it is gone.
	deleted bool

	// lastSuccess and faults feed otherwiseHealthy; customerFaults and
	// customerSuccesses (by customer id) feed onlyItsCustomers;
	// customerGone (the customers answered 410) and customerSuccesses
	// feed goneOnlyItsCustomers.
	lastSuccess       time.Time
	faults            recentMarks[*Lane]
	customerFaults    recentMarks[string]
	customerSuccesses recentMarks[string]
	customerGone      recentMarks[string]
}

// statusRing keeps a destination's last attempt statuses.
type statusRing struct {
	buf  [16]int
	n    int
	next int
}

func (r *statusRing) add(status int) {
	r.buf[r.next] = status
	r.next = (r.next + 1) % len(r.buf)
	r.n = min(r.n+1, len(r.buf))
}

// list returns the statuses oldest first.
func (r *statusRing) list() []int {
	out := make([]int, 0, r.n)
	for i := range r.n {
		out = append(out, r.buf[(r.next-r.n+i+len(r.buf))%len(r.buf)])
	}
	return out
}

func (s *Scheduler) destination(id string, partition int) *destination {
	d := s.dests[id]
	if d == nil {
		d = &destination{
			class:     limits.Normal,
			id:        id,
			partition: partition,
			lanes:     make(map[string]*Lane),
			customers: make(map[string]*customer),
			weights:   make(map[string]float64),
			rates:     rateRing{since: slotOf(s.clock.Now())},
		}
		s.dests[id] = d
	}
	return d
}

// shrinkFrom is the fewest lanes a destination must have had for shrink
// to bother: below it what drained lanes leave is at most ~100 KB, and a
// destination whose few hundred lanes drain and fill again all the time
// (BenchmarkDeliveryCycle) would otherwise regrow its map and slice on
// every round.
const shrinkFrom = 1024

// shrink gives back the memory of lanes that drained once at most a
// quarter of the most lanes d had are left: Go maps and slices keep their
// capacity, so a destination that once had a million lanes would keep
// ~100 B per lane long after they drained. Copying at a quarter keeps the
// cost per drained lane constant.
func (d *destination) shrink() {
	if d.peakLanes < shrinkFrom || len(d.lanes) > d.peakLanes/4 {
		return
	}
	d.lanes = resized(d.lanes)
	d.customers = resized(d.customers)
	d.order = slices.Clone(d.order)
	if len(d.oddIDs) == 0 {
		d.oddIDs = nil
	}
	d.peakLanes = len(d.lanes)
}

// shrinkCached gives back the memory of cached events delivered, as
// shrink does for lanes: once at most a quarter of the most it held is
// left (a burst of a hundred thousand cached events leaves a map of
// megabytes behind), and not below shrinkFrom, so that a shallow backlog,
// each event cached, delivered and forgotten, makes no map per event.
func (d *destination) shrinkCached() {
	if d.cachedPeak < shrinkFrom || len(d.cached) > d.cachedPeak/4 {
		return
	}
	if len(d.cached) == 0 {
		d.cached = nil
	} else {
		d.cached = resized(d.cached)
	}
	d.cachedPeak = len(d.cached)
}

// resized copies m into a map made for its size (maps.Clone would copy
// its capacity too).
func resized[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	maps.Copy(out, m)
	return out
}

// SetLimits configures a destination; until it is configured its lanes are
// held (unless it was forgotten: ForgetDestination, ForgetUnknown). Changes
// apply in place: nothing pending moves.
func (s *Scheduler) SetLimits(destinationID string, partition int, lim limits.Limits) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	d := s.destination(destinationID, partition)
	lim.MaxInFlight = max(lim.MaxInFlight, 1)
	if d.budget == nil {
		d.budget = budget.NewBudget(lim.RatePerSecond, lim.Burst, budget.DefaultAIMD(), now)
		s.takeRestoredBudget(d)
	} else {
		d.budget.SetLimits(lim.RatePerSecond, lim.Burst, now)
	}
	d.limits = lim
	d.configured, d.deleted = true, false
	s.noteOthers("") // its lanes may go now (workers.go)
	s.wake()
}

// SetClass sets a destination's priority class.
func (s *Scheduler) SetClass(destinationID string, partition int, class limits.Class) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.destination(destinationID, partition)
	if d.inRing {
		s.ringClass[d.class]--
	}
	d.class = min(max(class, limits.High), limits.Low)
	if d.inRing {
		s.ringClass[d.class]++
	}
	s.wake()
}

// SetPaused stops (or resumes) every attempt to a destination, retries
// included. Nothing pending moves; on resume each lane goes on from where
// it was, paced by the budget.
//
// A resume (paused, then not) is an operator's "go now": it also ends a
// Retry-After hold and makes due every lane held back by the
// destination's failures (their backoffs included; the budget paces
// them). Without it, a partner's long Retry-After held its lanes with no
// way out but skipping their heads.
func (s *Scheduler) SetPaused(destinationID string, partition int, paused bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.destination(destinationID, partition)
	resumed := d.paused && !paused
	d.paused = paused
	if resumed && d.budget != nil {
		now := s.clock.Now()
		before := d.budget.Changes()
		d.budget.EndHold()
		s.noteBudget(d, before)
		s.releaseHeld(d, now)
	}
	s.noteOthers("") // its lanes may go now (workers.go)
	s.wake()
}

// NoteResume gives the scheduler when the destination was last resumed
// (its config's last pause interval's end; zero while it lasts): another
// end than it knew, while not paused, is a resume as SetPaused's (it ends
// a Retry-After hold and makes the held lanes due). A pause and a resume
// close together may reach an agent as one config change in which the
// destination never looks paused; the resume's time still moved. The
// first time a destination's resume is noted only records it: a restart
// is no resume.
func (s *Scheduler) NoteResume(destinationID string, partition int, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.destination(destinationID, partition)
	if !d.resumeNoted {
		d.resumeNoted, d.resumedAt = true, at
		return
	}
	if at.Equal(d.resumedAt) {
		return
	}
	d.resumedAt = at
	if at.IsZero() || d.paused || d.budget == nil {
		return // a pause began (its interval has no end yet)
	}
	before := d.budget.Changes()
	d.budget.EndHold()
	s.noteBudget(d, before)
	s.releaseHeld(d, s.clock.Now())
	s.wake()
}

// SetWeights replaces a destination's customer weights (unlisted: 1).
func (s *Scheduler) SetWeights(destinationID string, partition int, weights map[string]float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.destination(destinationID, partition)
	d.weights = make(map[string]float64, len(weights))
	for c, w := range weights {
		d.weights[c] = max(w, 0.01)
	}
	for id, c := range d.customers {
		if w, ok := d.weights[id]; ok {
			c.weight = w
		} else {
			c.weight = 1
		}
	}
	s.wake()
}

// SetWeight sets a customer's share of a destination (default 1).
func (s *Scheduler) SetWeight(destinationID, customerID string, partition int, weight float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	weight = max(weight, 0.01)
	d := s.destination(destinationID, partition)
	d.weights[customerID] = weight
	if c := d.customers[customerID]; c != nil {
		c.weight = weight
	}
	s.wake()
}

// nextLane picks by deficit round robin over customers with due lanes,
// passing over each customer passOver names (if not nil; it names some of
// them at most, never all).
func (d *destination) nextLane(passOver func(customer string) bool) *Lane {
	for {
		if d.cursor >= len(d.active) {
			d.cursor = 0
		}
		c := d.active[d.cursor]
		if passOver != nil && passOver(c.id) {
			d.cursor++
			continue
		}
		if c.deficit < 1 {
			c.deficit += c.weight
			if c.deficit < 1 {
				d.cursor++
				continue
			}
		}
		l := c.take()
		c.deficit--
		d.due--
		if c.due() == 0 {
			c.active = false
			c.deficit = 0
			d.active = append(d.active[:d.cursor], d.active[d.cursor+1:]...)
		} else if c.deficit < 1 {
			d.cursor++
		}
		return l
	}
}
