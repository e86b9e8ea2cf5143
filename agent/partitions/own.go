package partitions

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/agent/ownership"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// The loops below act on the decisions of s.states (lifecycle.go): that is
// where a partition's phase changes, here is where its locks are taken and
// released and where it is opened, run and handed off.
//
// The scheduler holds the lanes of one open of a partition at a time: only
// openLoop opens, several partitions at once but never one partition twice
// at once (the next open of a partition starts only once the goroutine of
// its previous open returned), and an open that is not to run is detached
// before its goroutine returns; a run is detached before it leaves running
// or handingOff (its run goroutine detaches it before it reports lost or
// failed; a handoff detaches it first and reports last), so the next open
// of the same partition finds the scheduler without it.

const (
	// lockRetry and openRetry are how often a lock held by another agent is
	// tried again, and a partition whose lock is held here but whose
	// streams do not answer yet is opened again.
	lockRetry = 250 * time.Millisecond
	openRetry = 250 * time.Millisecond

	// handoffWait bounds how long a graceful handoff waits for attempts in
	// flight; after it the lock is released anyway and their outcomes are
	// not recorded (the new owner sends those events again).
	handoffWait = 15 * time.Second

	// cutCheckEvery is how often cutLoop asks whether a cut partition's
	// store is writable again; cutCheckTimeout bounds one question.
	cutCheckEvery   = time.Second
	cutCheckTimeout = 2 * time.Second
)

// lockLoop takes the locks of the partitions assigned here, as soon as
// their previous owner lets go (or its lock-delay ends), and gives back the
// locks that are no longer wanted or were lost. openLoop opens them; a
// partition is owned, and no one else's, from the moment its lock is held.
func (s *Set) lockLoop(ctx context.Context) {
	waiting := make(map[int]bool) // logged as held by another agent
	t := time.NewTicker(lockRetry)
	defer t.Stop()
	for ctx.Err() == nil {
		for _, lease := range s.states.toRelease() {
			s.releaseLease(lease)
			s.states.lockReleased(lease)
		}
		pending := s.states.toLock()
		for _, p := range pending {
			s.lock(ctx, p, waiting)
		}
		for p := range waiting {
			if !slices.Contains(pending, p) {
				delete(waiting, p)
			}
		}
		select {
		case <-s.states.wakeLock:
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// lock tries once to take partition p's lock.
func (s *Set) lock(ctx context.Context, p int, waiting map[int]bool) {
	lease, err := s.locker.TryAcquire(ctx, p)
	switch {
	case err == nil:
		delete(waiting, p)
		if !s.states.lockTaken(lease) {
			s.releaseLease(lease) // withdrawn meanwhile
		}
	case errors.Is(err, ownership.ErrHeld):
		if !waiting[p] {
			waiting[p] = true
			s.log.Info("partition assigned here is still locked by its previous owner; waiting", "partition", p)
		}
	case errors.Is(err, ownership.ErrNoSession):
		// Our session lapsed; the locker is replacing it.
	default:
		s.log.Warn("acquire partition lock", "partition", p, "error", err)
	}
}

// maxParallelOpens bounds how many partitions open at once. A restart
// opens every partition of the agent at the same moment, each rebuild
// reading its ledger (round trips to NATS) and its snapshot or lane store
// (CPU): opened one after another, a 16-partition agent at 10M pending
// took 87 s. A few at once overlap one's waits with another's work and use
// every core; more would only contend for the scheduler's lock and the
// disk.
var maxParallelOpens = max(4, runtime.GOMAXPROCS(0))

// openResult is what an open goroutine reports to openLoop.
type openResult struct {
	p   int
	err error
}

// openLoop opens the partitions whose lock is held here, up to
// maxParallelOpens at once, and opens one again openRetry after its open
// failed (its streams may be electing leaders). It returns once ctx ended
// and every open it started returned. open is s.open (tests pass another).
func (s *Set) openLoop(ctx context.Context, open func(ctx context.Context, p int) error) {
	lastLog := make(map[int]time.Time) // one warning per partition every 5s
	retryAt := make(map[int]time.Time) // not opened again before
	inOpen := make(map[int]bool)       // partitions whose open goroutine runs
	results := make(chan openResult, maxParallelOpens)
	for ctx.Err() == nil {
		waiting := false // a partition to open waits for its retry time or a free slot
		for _, p := range s.states.toOpen() {
			if inOpen[p] {
				continue
			}
			if time.Now().Before(retryAt[p]) || len(inOpen) >= maxParallelOpens {
				waiting = true
				continue
			}
			inOpen[p] = true
			go func() { results <- openResult{p: p, err: open(ctx, p)} }()
		}
		if s.states.settled() && s.count.Load() > 0 {
			s.ready.Store(true)
		}
		var again <-chan time.Time
		if waiting {
			again = time.After(openRetry)
		}
		select {
		case r := <-results:
			s.openReturned(r, inOpen, retryAt, lastLog)
		case <-s.states.wakeOpen:
		case <-again:
		case <-ctx.Done():
		}
	}
	// The agent's shutdown waits for the opens under way (Run waits for
	// this loop): a partition opened meanwhile is handed off by Shutdown.
	for len(inOpen) > 0 {
		s.openReturned(<-results, inOpen, retryAt, lastLog)
	}
}

// openReturned records, in openLoop, that the open of r.p returned.
func (s *Set) openReturned(r openResult, inOpen map[int]bool, retryAt, lastLog map[int]time.Time) {
	delete(inOpen, r.p)
	if r.err == nil {
		delete(retryAt, r.p)
		return
	}
	retryAt[r.p] = time.Now().Add(openRetry)
	if time.Since(lastLog[r.p]) > 5*time.Second {
		lastLog[r.p] = time.Now()
		s.log.Warn("open partition; retrying while holding its lock", "partition", r.p, "error", r.err)
	}
}

// open opens and starts partition p, whose lock this agent holds, unless
// it is no longer locked here. It makes one attempt: in a cell that just
// lost an agent, the partition's streams answer only once their replicas
// have elected a new leader, and openLoop tries again shortly, still
// holding the lock. Only openLoop opens, never the same partition twice
// at once; the rebuild holds no lock of the agent's, so delivery and
// ingest for other partitions go on meanwhile.
func (s *Set) open(ctx context.Context, p int) error {
	lease, ok := s.states.startOpen(p)
	if !ok {
		return nil
	}
	part, err := owner.Open(ctx, p, s.deps, lease)
	if err != nil {
		s.sched.DropPartition(p)
		s.states.openFailed(lease, errors.Is(err, owner.ErrFenced))
		if !errors.Is(err, owner.ErrFenced) {
			s.states.troubled(p, "its store does not open; retrying (the agent's log has the error)")
		}
		return err
	}
	s.cfg.Configure(p)
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	run := &partitionRun{p: p, part: part, lease: lease, cancel: cancel, done: make(chan struct{})}
	if !s.states.opened(run) {
		// Released or lost while it was rebuilding.
		part.Detach()
		cancel()
		return nil
	}
	s.log.Info("partition owned", "partition", p, "epoch", lease.Epoch)
	s.running.Go(func() { s.runPartition(pctx, run) })
	return nil
}

// runPartition runs an opened partition until its handoff cancels ctx, its
// lease is lost, or it fails.
func (s *Set) runPartition(ctx context.Context, run *partitionRun) {
	defer close(run.done)
	defer run.cancel()
	err := run.part.Run(ctx)
	switch {
	case err == nil || ctx.Err() != nil:
		// Handed off: the handoff waits for done.
	case errors.Is(err, owner.ErrFenced):
		// Lost (checked first: a stalled store may also have lost its
		// lease, and then no handoff may wait for attempts): stop at
		// once; nothing more is written or sent here.
		s.log.Warn("partition ownership lost; stopped", "partition", run.p, "error", err)
		run.part.Detach()
		s.states.runLost(run)
	case errors.Is(err, owner.ErrStoreStalled):
		// Cut off from the store's quorum: give the partition up, as a
		// handoff does, so an agent that reaches the quorum takes it.
		s.log.Warn("partition store unreachable; giving the partition up until it can be written again", "partition", run.p, "error", err)
		if s.states.runStalled(run) {
			s.handOff(run, handoffWait)
		}
	case errors.Is(err, owner.ErrMoverLeaderChanged), errors.Is(err, owner.ErrStoreLeaderMoving):
		// Routine (a rolling restart moves leaders): rebuild the
		// partition, whose fresh consumer hands everything over in order.
		s.log.Warn("a leader of the partition's streams moved under it; reopening it", "partition", run.p, "error", err)
		run.part.Detach()
		s.states.runFailed(run, run.part.StoreConfirmed())
		s.states.troubled(run.p, "a leader of its streams moved; reopening (routine while agents restart; the agent's log has the error)")
	default:
		// A write failed, or the mover stopped: rebuild the partition
		// from its store.
		s.log.Error("partition failed; reopening it", "partition", run.p, "error", err)
		run.part.Detach()
		s.states.runFailed(run, run.part.StoreConfirmed())
		why := "a write failed; reopening (the agent's log has the error)"
		if errors.Is(err, owner.ErrMoverStopped) || errors.Is(err, owner.ErrMoverStalled) {
			why = "its mover stopped taking INGEST's events; reopening (the agent's log has the figures)"
		}
		s.states.troubled(run.p, why)
	}
}

// cutLoop asks, every cutCheckEvery, whether the store of each partition
// given up here as cut can be written from here again (owner.Writable);
// the lifecycle lifts the mark once it could for the stall timeout.
func (s *Set) cutLoop(ctx context.Context) {
	t := time.NewTicker(cutCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		for _, p := range s.states.cutPartitions() {
			cctx, cancel := context.WithTimeout(ctx, cutCheckTimeout)
			writable := owner.Writable(cctx, s.deps.JS, p)
			cancel()
			if ctx.Err() != nil {
				return
			}
			s.states.writableCheck(p, writable)
			if writable && !slices.Contains(s.states.cutPartitions(), p) {
				s.log.Info("partition store writable again from here; the partition may be taken again", "partition", p)
			}
		}
	}
}

// handOff starts the graceful handoff of a partition s.states moved to
// handingOff: it is detached from the scheduler at once (no new attempt
// starts, and its reclaim no longer trusts the scheduler), then handoff
// runs beside the caller.
func (s *Set) handOff(run *partitionRun, inFlightWait time.Duration) {
	run.part.Detach()
	s.running.Go(func() { s.handoff(run, inFlightWait) })
}

// handoff: attempts in flight finish (inFlightWait at most), the
// partition flushes, and the lock is released; the next owner rebuilds
// from the stream. Until it ends, the partition is not locked again here.
func (s *Set) handoff(run *partitionRun, inFlightWait time.Duration) {
	drained := make(chan struct{})
	// Not one of s.running: past the wait, the attempts are abandoned,
	// and a Shutdown does not wait for them either. This goroutine ends
	// with them (their own timeouts bound them).
	go func() {
		run.inFlight.Wait()
		close(drained)
	}()
	t := time.NewTimer(inFlightWait)
	defer t.Stop()
	select {
	case <-drained:
	case <-t.C:
		s.log.Warn("handoff: attempts still in flight; releasing anyway (their events are sent again)", "partition", run.p)
	}
	run.cancel()
	<-run.done
	s.releaseLease(run.lease)
	s.states.handedOff(run)
}

func (s *Set) releaseLease(lease *ownership.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := lease.Release(ctx); err != nil {
		s.log.Warn("release partition lock", "partition", lease.P, "error", err)
	}
}

// reportOwned tells the control plane which partitions this agent holds:
// on every change, and every few seconds (a restarted control plane
// learns it again).
func (s *Set) reportOwned(ctx context.Context) {
	httpClient := s.cfg.Upstream.HTTPClient(5 * time.Second)
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.states.ownedChanged:
		case <-t.C:
		case <-ctx.Done():
			return
		}
		client := s.cfg.Upstream.Client(httpClient, s.cfg.Upstream.URL())
		_, err := client.ReportOwned(ctx, connect.NewRequest(&rivorav1.ReportOwnedRequest{
			AgentName: s.cfg.Name, Session: s.locker.Session(), Partitions: s.states.owned(), Cut: s.states.cutList(),
		}))
		if err != nil && ctx.Err() == nil {
			s.log.Debug("report owned partitions", "error", err)
		}
	}
}
