// Package partitions is the set of partitions this agent is assigned: it
// takes their locks, opens them (owner.Open), runs them and hands them
// off, and it is where the rest of the agent finds an open partition
// (ingest's local append, delivery, the operators' calls). It owns the
// cell's partition count, the lifecycle of every partition here
// (lifecycle.go decides, the loops of own.go act) and their goroutines.
package partitions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/agent/ownership"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/agent/upstream"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Config is what the set needs.
type Config struct {
	// Name is the agent's, in its reports to the control plane.
	Name string
	// Deps open a partition (owner.Open); Deps.Scheduler is the agent's.
	Deps   owner.Deps
	Locker ownership.Locker
	// Upstream is told which partitions this agent holds.
	Upstream *upstream.Planes
	// Configure configures again the destinations of partition p in the
	// scheduler once it opened (dropping a partition from the scheduler
	// forgets them).
	Configure func(p int)
	Log       *slog.Logger
}

// Set is the partitions this agent is assigned. Run runs its loops;
// Shutdown hands off what still runs once the agent drained.
type Set struct {
	cfg    Config
	log    *slog.Logger
	locker ownership.Locker
	deps   owner.Deps
	sched  *scheduler.Scheduler

	// states is the lifecycle of the partitions assigned here;
	// lockLoop, openLoop, the partitions' run goroutines and their
	// handoffs act on its decisions (own.go).
	states *lifecycle
	// running holds the partitions' run goroutines and handoffs:
	// Shutdown waits for them.
	running sync.WaitGroup
	// count is the cell's partition count (0 until the first config).
	count atomic.Int32
	// ready: every partition assigned here ran once the first config
	// came (see Ready).
	ready atomic.Bool
}

// New returns the set, empty until Assign.
func New(cfg Config) *Set {
	return &Set{
		cfg: cfg, log: cfg.Log, locker: cfg.Locker, deps: cfg.Deps, sched: cfg.Deps.Scheduler,
		states: newLifecycle(stallTimeout(cfg.Deps)),
	}
}

// Run takes and gives back locks, opens the partitions whose lock is held
// here and tells the control plane which ones it holds, until ctx ends.
// The partitions it opened keep running after it returns, until
// Shutdown.
func (s *Set) Run(ctx context.Context) error {
	var loops sync.WaitGroup
	loops.Go(func() { s.lockLoop(ctx) })
	loops.Go(func() { s.openLoop(ctx, s.open) })
	loops.Go(func() { s.reportOwned(ctx) })
	loops.Go(func() { s.cutLoop(ctx) })
	<-ctx.Done()
	s.ready.Store(false)
	loops.Wait()
	s.ready.Store(false)
	return nil
}

// Shutdown hands off every partition still running (attempts in flight
// finish, inFlightWait at most; the partition flushes, its lock is
// released) and waits for every goroutine of the set's partitions but
// those of attempts abandoned in flight. The agent calls it once Run
// returned and its workers stopped or were waited for long enough.
func (s *Set) Shutdown(inFlightWait time.Duration) {
	for _, run := range s.states.stop() {
		s.handOff(run, inFlightWait)
	}
	s.running.Wait()
}

// stallTimeout is the store stall timeout the partitions run with.
func stallTimeout(deps owner.Deps) time.Duration {
	if deps.StoreStallTimeout > 0 {
		return deps.StoreStallTimeout
	}
	return owner.DefaultStoreStallTimeout
}

// Cut lists the partitions given up here because their store could not be
// written from here, until it can (lifecycle), lowest first.
func (s *Set) Cut() []uint32 { return s.states.cutList() }

// FixCount records the cell's partition count from the control plane's
// config. Partitions are fixed for a cell: a count other than the one
// already fixed is an error.
func (s *Set) FixCount(n int) error {
	if n <= 0 {
		return fmt.Errorf("partition_count %d", n)
	}
	if have := int(s.count.Load()); have != 0 && have != n {
		return fmt.Errorf("the control plane says %d partitions but this agent's data uses %d; partitions are fixed for a cell", n, have)
	}
	s.count.Store(int32(n))
	return nil
}

// Count is the cell's partition count (0 until the first config).
func (s *Set) Count() int { return int(s.count.Load()) }

// Assign makes want the set of partitions assigned here. Opening rebuilds
// from the store, which takes seconds for a large backlog: Run's loops do
// it beside the caller. Withdrawn partitions that run are handed off.
func (s *Set) Assign(want map[int]bool) {
	for _, run := range s.states.assign(want) {
		s.log.Info("partition reassigned; handing it off", "partition", run.p)
		s.handOff(run, handoffWait)
	}
}

// Ready reports whether every partition assigned here ran once since the
// first config came, and Run has not ended.
func (s *Set) Ready() bool { return s.ready.Load() }

// Broken describes the partitions assigned here that do not run because
// they failed (their store did not open, or a write failed and they are
// being reopened), lowest first; empty when none is.
func (s *Set) Broken() []string { return s.states.broken() }

// Partition returns partition p while it runs here, else nil.
func (s *Set) Partition(p int) *owner.Partition {
	if run := s.states.run(p); run != nil {
		return run.part
	}
	return nil
}

// WaitingDeadLetters calls visit with each dead letter waiting for the
// archive in the ledger of a partition running here, partition by
// partition, each in ledger order (owner.Partition.WaitingDeadLetters).
// It returns the partitions it read, sorted, and the others it could not
// read, with why (unreadLedgers), so that an answer made of what it
// visited says what it lacks.
func (s *Set) WaitingDeadLetters(visit func(dl *rivorav1.DeadLetter)) (read []uint32, unread []*rivorav1.UnreadLedger) {
	runs, why := s.states.ledgers()
	for _, p := range slices.Sorted(maps.Keys(runs)) {
		runs[p].part.WaitingDeadLetters(visit)
		read = append(read, uint32(p))
	}
	return read, unreadLedgers(s.cfg.Name, s.Count(), read, why)
}

// notHeldHere is why a partition this agent does not hold was not read:
// in a cell, asked directly, an agent answers for its own partitions only.
const notHeldHere = "not owned by this agent; ask the control plane, which reads every agent's ledgers"

// unreadLedgers groups by why the partitions of count that were not read:
// those assigned here (why: not open yet, or failing), named with agent,
// and every other one, not held here, with no agent (an agent does not
// know another's partitions; the control plane, merging every agent's
// answer, leaves these to the answer of the agent that holds them).
func unreadLedgers(agent string, count int, read []uint32, why map[int]string) (unread []*rivorav1.UnreadLedger) {
	byReason := make(map[string]*rivorav1.UnreadLedger)
	for p := range count {
		if slices.Contains(read, uint32(p)) {
			continue
		}
		reason, name := why[p], agent
		if _, ok := why[p]; !ok {
			reason, name = notHeldHere, ""
		}
		u := byReason[reason]
		if u == nil {
			u = &rivorav1.UnreadLedger{Agent: name, Reason: reason}
			byReason[reason] = u
			unread = append(unread, u)
		}
		u.Partitions = append(u.Partitions, uint32(p))
	}
	return unread
}

// OpeningDestination reports whether the partition of a destination is
// this agent's but not running yet (its lanes are being rebuilt): what
// the scheduler shows of the destination meanwhile is not its state.
func (s *Set) OpeningDestination(destinationID string) bool {
	n := s.Count()
	return n > 0 && s.states.opening(lanes.Partition(destinationID, n))
}

// OfDestination returns the partition of a destination while it runs
// here, else nil (and nil before the first config).
func (s *Set) OfDestination(destinationID string) *owner.Partition {
	n := s.Count()
	if n == 0 {
		return nil
	}
	return s.Partition(lanes.Partition(destinationID, n))
}

// Attempting returns partition p while it runs here and counts an attempt
// in flight on it, so a handoff waits for it: call done once its outcome
// is recorded. ok is false (and nothing counted) when p does not run here.
func (s *Set) Attempting(p int) (part *owner.Partition, done func(), ok bool) {
	run, ok := s.states.attempting(p)
	if !ok {
		return nil, nil, false
	}
	return run.part, run.inFlight.Done, true
}

// AppendLocal stores events of a partition this agent owns straight into
// its lanes (the ingest gateway's fast path, ingest.LocalStore); owned is
// false when it does not own p, or the partition is being released.
func (s *Set) AppendLocal(ctx context.Context, p int, events []ingest.LocalEvent) ([]ingest.Stored, bool, error) {
	part := s.Partition(p)
	if part == nil {
		return nil, false, nil
	}
	items := make([]owner.Item, len(events))
	for i, ev := range events {
		items[i] = owner.Item{Event: ev.Event, Data: ev.Data, MsgID: ev.MsgID, Fingerprint: ev.Fingerprint}
	}
	at, err := part.Append(ctx, items)
	if errors.Is(err, owner.ErrNotOwned) && len(at) == 0 {
		return nil, false, nil
	}
	stored := make([]ingest.Stored, len(at))
	for i, a := range at {
		stored[i] = ingest.Stored{Stream: a.Stream, Seq: a.Seq, Duplicate: a.Duplicate}
	}
	return stored, true, err
}

// Held lists the partitions whose lock this agent holds, whatever their
// phase (being locked, opened, run or handed off): their streams are
// written from here until the lock is released.
func (s *Set) Held() []int { return s.states.held() }

// Owns tells whether partition p runs here now (ingest.LocalStore).
func (s *Set) Owns(p int) bool { return s.Partition(p) != nil }

// MayHold is false only when partition p runs here and certainly did not
// store msgID within the dedup window (owner.Partition.MayHold)
// (ingest.LocalStore).
func (s *Set) MayHold(p int, msgID string) bool {
	part := s.Partition(p)
	return part == nil || part.MayHold(msgID)
}

// WaitsInIngest reports whether INGEST may hold an event of partition p
// that its owner has not moved into its lanes yet: true when p does not
// run here (owner.Partition.WaitsInIngest) (ingest.LocalStore).
func (s *Set) WaitsInIngest(ctx context.Context, p int) (bool, error) {
	part := s.Partition(p)
	if part == nil {
		return true, nil
	}
	return part.WaitsInIngest(ctx)
}

// ArchivePending dead-letters a destination's pending events (reason
// "deleted"), or only those of one of its subscriptions (subscriptionID
// not ""), and says how many, and what it left to attempts in flight;
// nothing when its partition is not here.
func (s *Set) ArchivePending(ctx context.Context, destinationID, subscriptionID string) (owner.Archived, error) {
	part := s.OfDestination(destinationID)
	if part == nil {
		return owner.Archived{}, nil
	}
	if subscriptionID != "" {
		return part.ArchiveSubscription(ctx, destinationID, subscriptionID)
	}
	return part.ArchiveDestination(ctx, destinationID)
}
