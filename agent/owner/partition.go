// Package owner runs one partition for the agent that holds its ownership
// grant: it is the single writer of the partition's pending store (tier 2:
// the LANES_p stream and LEDGER_p ledger). It rebuilds the scheduler's view
// from the store, moves newly accepted events from INGEST into their lanes,
// records every attempt outcome, hands dead letters to the archive, and
// reclaims the space of delivered events.
//
// Each of those is one type that owns its state and lock (Partition wires
// them and runs their loops):
//   - laneWriter (writer.go): the lane store's one writer, the registered
//     mark and the fast-path gate;
//   - mover (mover.go): INGEST → lanes, in INGEST order, through the writer;
//   - reclaimer (reclaim.go): done records and space reclaim;
//   - deadLetters (deadletters.go): the ledger → archive hand-off queue;
//   - eventCache (outcome.go): the bytes of events kept in memory.
//
// Every write to the store goes through fence (this file): checked against
// the lease, and, in the ledger, stamped with its epoch.
package owner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent/archive"
	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/history"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/ownership"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/agent/subscriptions"
	"github.com/rivora/rivora/lanes"
)

// Deps are what a partition owner works with; all are shared by the agent's
// partitions.
type Deps struct {
	JS        jetstream.JetStream
	Scheduler *scheduler.Scheduler
	Registry  *destinations.Registry
	// Subscriptions are the cell's subscriptions: an event a subscription
	// routed is delivered with its URL, secret and headers, held while it
	// is paused, and dead-lettered (reason deleted) once it is gone.
	Subscriptions *subscriptions.Table
	// Applied is the config version this agent has applied (nil: 0): an
	// event accepted under a newer one waits for it before its
	// destination or subscription is taken for deleted.
	Applied func() uint64
	History *history.History
	Archive archive.Archive
	Clock   clock.Clock
	Log     *slog.Logger
	// DedupWindow is the lane store's duplicate window (a crash between
	// moving an event and acking INGEST stores it once).
	DedupWindow time.Duration
	// Replicas is the partition streams' replica count in a cell.
	Replicas int
	// Forwarded checks the events edges forwarded into INGEST against the
	// cell's idempotency records before they are moved (nil: moved
	// unchecked).
	Forwarded ForwardedCheck
	// Durable is the store's group commit (--fsync; nil: none): a move
	// syncs the lanes' copies before INGEST forgets its own, and reclaim
	// syncs the ledger's dead letters before it purges their lane events.
	Durable *natsd.Syncer
	// SnapshotDir holds the pending snapshots a clean stop writes, one
	// file per partition (snapshot.go; "": none, every start scans).
	SnapshotDir string
	// StoreStallTimeout is how long the partition may go without a
	// confirmed write before Run gives up with ErrStoreStalled (0:
	// DefaultStoreStallTimeout; see stall.go).
	StoreStallTimeout time.Duration
	// MoverStallTimeout is how long INGEST may hold messages for the
	// partition that its mover takes none of before Run restarts it with
	// ErrMoverStalled (0: DefaultMoverStallTimeout; see moverwatch.go).
	MoverStallTimeout time.Duration
}

// Partition owns partition p's pending store. It holds no state of its
// own beyond its wiring: the streams, the lease (through fence) and the
// parts that each own a piece of the partition's state. Run runs every
// part's loop in one group; the first to fail stops the others.
type Partition struct {
	p      int
	lease  *ownership.Lease
	deps   Deps
	log    *slog.Logger
	fence  *fence
	lanes  jetstream.Stream
	ledger jetstream.Stream
	// directGet and msgGet are the lane store's direct get subject and
	// its leader's message get subject (loadStored).
	directGet, msgGet string

	cache   *eventCache
	writer  *laneWriter
	mover   *mover
	reclaim *reclaimer
	dead    *deadLetters
	budgets *budgetKeeper

	snap snapshotTaker
	// deleting are the subscriptions a forced delete archived here, whose
	// config is on its way.
	deleting deletingSubscriptions

	// stalled is closed when watchStore gave the store up: the writer
	// stops waiting for acks that will not come.
	stalled chan struct{}
}

// Open creates the partition's streams and rebuilds the scheduler's view
// of it. Call Run next.
//
// lease is this agent's grant of the partition: every ledger write checks
// it and carries its epoch, and the partition stops when it is lost.
func Open(ctx context.Context, p int, deps Deps, lease *ownership.Lease) (*Partition, error) {
	o := &Partition{
		p:       p,
		lease:   lease,
		deps:    deps,
		log:     deps.Log.With("partition", p),
		fence:   &fence{p: p, lease: lease, js: deps.JS},
		cache:   &eventCache{},
		stalled: make(chan struct{}),
	}
	if err := o.createLaneStore(ctx); err != nil {
		return nil, fmt.Errorf("partition %d: create lane store: %w", p, err)
	}
	if err := o.createLedger(ctx); err != nil {
		return nil, fmt.Errorf("partition %d: create ledger: %w", p, err)
	}
	if err := o.resetMoverConsumer(ctx); err != nil {
		return nil, fmt.Errorf("partition %d: reset mover consumer: %w", p, err)
	}
	ingest, err := o.createMoverConsumer(ctx)
	if err != nil {
		return nil, fmt.Errorf("partition %d: create mover consumer: %w", p, err)
	}
	o.wire(ingest)
	if err := o.rebuild(ctx); err != nil {
		return nil, fmt.Errorf("partition %d: rebuild: %w", p, err)
	}
	return o, nil
}

// wire creates the parts, once the streams exist.
func (o *Partition) wire(ingest jetstream.Consumer) {
	o.directGet = apiSubject(o.deps.JS, "DIRECT.GET."+lanes.LanesStream(o.p))
	o.msgGet = apiSubject(o.deps.JS, "STREAM.MSG.GET."+lanes.LanesStream(o.p))
	o.writer = newLaneWriter(o.p, o.deps.JS, o.fence, o.deps.Scheduler, o.cache, o.log)
	o.writer.abandon = o.stalled
	o.writer.ackWait = o.ackWait()
	o.writer.recent = newRecentIDs(o.deps.DedupWindow, o.lastWrite(), o.deps.Clock.Now)
	o.mover = &mover{
		p: o.p, ingest: ingest, writer: o.writer, check: o.deps.Forwarded, marks: newForwardMarks(o.p, o.deps.JS, o.deps.Replicas, o.log),
		durable: o.deps.Durable, log: o.log,
	}
	o.reclaim = newReclaimer(o.p, o.lanes, o.ledger, o.fence, o.deps.Scheduler, o.writer.registered, o.deps.Durable, o.log)
	o.reclaim.keep = newDedupKeep(o.deps.DedupWindow, o.lastSeq(), o.lastWrite())
	o.dead = newDeadLetters(o.p, o.ledger, o.fence, o.deps.Archive, o.log)
	o.budgets = newBudgetKeeper(o.p, o.fence, o.ledger, o.deps.Scheduler, o.log)
}

// lastWrite is when the lane store was last written before this owner
// (zero: never): the ids the stream's dedup window holds from before are
// at most that recent.
func (o *Partition) lastWrite() time.Time {
	info := o.lanes.CachedInfo()
	if info == nil || info.State.LastSeq == 0 {
		return time.Time{}
	}
	if info.State.LastTime.IsZero() {
		return o.deps.Clock.Now() // unknown: as if just written
	}
	return info.State.LastTime
}

// lastSeq is the lane store's last sequence before this owner (0: none).
func (o *Partition) lastSeq() uint64 {
	if info := o.lanes.CachedInfo(); info != nil {
		return info.State.LastSeq
	}
	return 0
}

// apiTimeout and consumerTimeout bound one JetStream API call while a
// partition opens.
const (
	apiTimeout       = 3 * time.Second
	consumerTimeout  = 15 * time.Second
	deleteTryTimeout = 4 * time.Second
)

// bounded runs one call under its own timeout: in a cell, a stream whose
// leader just died answers only once its replicas elected another
// (seconds), and the caller retries sooner than JetStream's default 5s
// timeout would. Consumer calls get longer: a new consumer elects its own
// leader.
func bounded(ctx context.Context, timeout time.Duration, call func(ctx context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return call(cctx)
}

func (o *Partition) createLaneStore(ctx context.Context) error {
	return bounded(ctx, apiTimeout, func(ctx context.Context) (err error) {
		o.lanes, err = o.deps.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        lanes.LanesStream(o.p),
			Description: fmt.Sprintf("Tier 2: pending events of partition %d, one subject per lane.", o.p),
			Subjects:    []string{lanes.LanesFilter(o.p)},
			Storage:     jetstream.FileStorage,
			Replicas:    max(o.deps.Replicas, 1),
			Duplicates:  o.deps.DedupWindow,
			AllowDirect: true,
		})
		return err
	})
}

func (o *Partition) createLedger(ctx context.Context) error {
	return bounded(ctx, apiTimeout, func(ctx context.Context) (err error) {
		o.ledger, err = o.deps.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        lanes.LedgerStream(o.p),
			Description: fmt.Sprintf("Tier 2: attempt state and unarchived dead letters of partition %d.", o.p),
			Subjects:    []string{lanes.LedgerFilter(o.p)},
			Storage:     jetstream.FileStorage,
			Replicas:    max(o.deps.Replicas, 1),
			AllowRollup: true,
		})
		return err
	})
}

// MoverName is the durable name of partition p's INGEST consumer (the
// mover's).
func MoverName(p int) string { return fmt.Sprintf("mover-%d", p) }

// resetMoverConsumer deletes the durable mover. Messages a previous owner
// fetched but never moved are held by it until their AckWait ends, and
// would then arrive behind events accepted later on the same lanes. This
// owner is the mover's only user, so it starts from a fresh consumer:
// INGEST (a work queue) keeps every unacked message, and they all come
// again, in order, now.
//
// A delete is answered by the consumer's leader. When that leader sits on
// the server the partition is being taken from (cut off from the cell),
// the delete is done but never answered: so each try is short, and the
// next one finds the consumer gone.
func (o *Partition) resetMoverConsumer(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, consumerTimeout)
	defer cancel()
	for {
		err := bounded(ctx, deleteTryTimeout, func(ctx context.Context) error {
			return o.deps.JS.DeleteConsumer(ctx, lanes.IngestStream, MoverName(o.p))
		})
		if err == nil || errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil
		}
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
}

func (o *Partition) createMoverConsumer(ctx context.Context) (ingest jetstream.Consumer, err error) {
	err = bounded(ctx, consumerTimeout, func(ctx context.Context) (err error) {
		ingest, err = o.deps.JS.CreateOrUpdateConsumer(ctx, lanes.IngestStream, jetstream.ConsumerConfig{
			Durable:       MoverName(o.p),
			Description:   fmt.Sprintf("Moves partition %d's accepted events into lanes.", o.p),
			FilterSubject: lanes.IngestFilter(o.p),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       30 * time.Second,
			MaxAckPending: 20_000,
		})
		return err
	})
	return ingest, err
}

// Run moves events and reclaims space until ctx ends. The scheduler and
// delivery workers run beside it (owned by the agent).
//
// The first loop to fail (a failed write, a lost lease, a store that
// stalled: ErrStoreStalled) stops the others, and Run returns its error.
func (o *Partition) Run(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	loops := []func(context.Context) error{o.writer.run, o.mover.run, o.reclaim.run, o.dead.run, o.budgets.run, o.holdLease, o.watchStore, o.watchMover}
	var wg sync.WaitGroup
	errs := make(chan error, len(loops))
	for _, loop := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := loop(ctx); err != nil {
				errs <- err
				stop()
			}
		}()
	}
	wg.Wait()
	close(errs)
	err := errors.Join(collect(errs)...)
	if err == nil {
		o.saveSnapshot(ctx)
	}
	return err
}

func collect(ch <-chan error) []error {
	var out []error
	for err := range ch {
		out = append(out, err)
	}
	return out
}

// Detach makes the scheduler forget the partition's lanes (no new attempt
// starts; attempts in flight finish). Use it, not Scheduler.DropPartition,
// for a partition that runs: its space reclaim must know that the
// scheduler's low water no longer covers its events, and its writer must
// register nothing more there.
func (o *Partition) Detach() {
	o.takeSnapshot()
	o.reclaim.detach()
	o.writer.detach()
	o.budgets.collect() // Run's end saves them
	o.deps.Scheduler.DropPartition(o.p)
}

// holdLease ends the partition when its lease is lost.
func (o *Partition) holdLease(ctx context.Context) error {
	select {
	case <-o.lease.Lost():
		return o.fence.check()
	case <-ctx.Done():
		return nil
	}
}

// Owned reports whether this agent may still deliver the partition's
// events: check it right before each send.
func (o *Partition) Owned() bool { return o.lease.Valid() }

// ---- fencing ---------------------------------------------------------------

// ErrFenced means this agent no longer owns the partition: nothing more
// may be written or delivered for it here.
var ErrFenced = errors.New("partition ownership lost")

// EpochHeader carries the fencing epoch of the owner that wrote a ledger
// entry.
const EpochHeader = "Rivora-Epoch"

// fence is the partition's lease as the store's writes see it: a write
// goes out only while the lease is valid, and a ledger write carries the
// lease's epoch, so that a rebuild can tell (and ignore) the late writes
// of an owner fenced off by a newer one. The lease decides; the fence
// keeps one fact beside it: when the store last confirmed a write
// (watchStore judges a stall by it).
type fence struct {
	p     int
	lease *ownership.Lease
	js    jetstream.JetStream

	// confirmedAt is when the store last took a write of this owner's
	// (Unix ns), or watchStore found it writable.
	confirmedAt atomic.Int64
}

// confirm records that the store took a write at now.
func (f *fence) confirm(now time.Time) { f.confirmedAt.Store(now.UnixNano()) }

// lastConfirmed is when the store last took a write.
func (f *fence) lastConfirmed() time.Time { return time.Unix(0, f.confirmedAt.Load()) }

// check returns ErrFenced once the lease is no longer valid.
func (f *fence) check() error {
	if f.lease.Valid() {
		return nil
	}
	return fmt.Errorf("%w (partition %d, epoch %d): %v", ErrFenced, f.p, f.lease.Epoch, f.lease.Cause())
}

func (f *fence) stamp(msg *nats.Msg) {
	msg.Header.Set(EpochHeader, strconv.FormatUint(f.lease.Epoch, 10))
}

// publish writes a ledger message under the lease: checked, then stamped
// with its epoch.
func (f *fence) publish(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	f.stamp(msg)
	ack, err := f.js.PublishMsg(ctx, msg)
	if err == nil {
		f.confirm(time.Now())
	}
	return ack, err
}

// appendLedger writes m to the ledger and returns the write's ledger
// sequence.
func (f *fence) appendLedger(ctx context.Context, subject string, m proto.Message) (uint64, error) {
	data, err := proto.Marshal(m)
	if err != nil {
		return 0, err
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	ack, err := f.publish(ctx, msg)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// epochOf is the epoch a ledger entry was written under (0: written before
// epochs were recorded).
func epochOf(msg jetstream.Msg) uint64 {
	e, _ := strconv.ParseUint(msg.Headers().Get(EpochHeader), 10, 64)
	return e
}
