// Package owner runs one partition for the agent that holds its ownership
// grant: it is the single writer of the partition's pending store (tier 2:
// the LANES_p stream and LEDGER_p ledger). It rebuilds the scheduler's view
// from the store, moves newly accepted events from INGEST into their lanes,
// records every attempt outcome, hands dead letters to the archive, and
// reclaims the space of delivered events.
package owner

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/archive"
	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/history"
	"github.com/rivora/rivora/agent/lanes"
	"github.com/rivora/rivora/agent/ownership"
	"github.com/rivora/rivora/agent/retry"
	"github.com/rivora/rivora/agent/scheduler"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

var (
	attemptsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rivora_delivery_attempts_total",
		Help: "Delivery attempts by destination and outcome class (2xx, 3xx, 4xx, 5xx, error).",
	}, []string{"destination", "class"})
	deadTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rivora_deadletters_total",
		Help: "Events that became dead letters, by destination and reason.",
	}, []string{"destination", "reason"})
	archivedTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rivora_deadletters_archived_total",
		Help: "Dead letters written to the archive.",
	})
	unarchived = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "rivora_deadletters_unarchived",
		Help: "Dead letters held in the ledgers, waiting for the archive.",
	})
	movedTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rivora_lanes_moved_events_total",
		Help: "Events moved from INGEST into lanes.",
	})
)

// Deps are what a partition owner works with; all are shared by the agent's
// partitions.
type Deps struct {
	JS        jetstream.JetStream
	Scheduler *scheduler.Scheduler
	Registry  *destinations.Registry
	History   *history.History
	Archive   archive.Archive
	Clock     clock.Clock
	Log       *slog.Logger
	// DedupWindow is the lane store's duplicate window (a crash between
	// moving an event and acking INGEST stores it once).
	DedupWindow time.Duration
	// Replicas is the partition streams' replica count in a cell.
	Replicas int
}

// Partition owns partition p's pending store.
type Partition struct {
	p      int
	lease  *ownership.Lease
	deps   Deps
	log    *slog.Logger
	lanes  jetstream.Stream
	ledger jetstream.Stream
	ingest jetstream.Consumer

	// registeredThrough is the highest lane-store sequence the scheduler
	// knows; anything above it is stored but not yet registered and must
	// never be reclaimed.
	registeredThrough atomic.Uint64

	reclaimMu     sync.Mutex
	doneSeqs      []uint64          // delivered or dead since the last done record
	reclaimLanes  map[string]uint64 // lane subject → highest done seq, for space reclaim above the floor
	reclaimLedger []string          // ledger subjects to purge
	doneRecords   []doneRecord      // done records in the ledger, oldest first

	// deadQueue holds dead letters waiting for the archive; they are durable
	// in the ledger, so the queue may grow while the archive is down.
	deadMu     sync.Mutex
	deadQueue  []queuedDead
	deadReady  chan struct{}
	unarchived map[string]int // per destination: in the ledger, not yet archived

	// deadWriteMu makes a dead letter's ledger write and its place in the
	// archive queue one step, so the queue is in ledger order — and so in
	// lane order, which archive object names keep for replay.
	deadWriteMu sync.Mutex

	appendCh   chan *appendReq
	writerDone chan struct{}

	// The fast-path gate: direct once INGEST held nothing for this
	// partition and nothing was on its way there (forwarding, forwardGen).
	gateMu     sync.Mutex
	direct     bool
	forwarding int
	forwardGen uint64

	// detached is set once the scheduler is told to forget the partition
	// (Detach); from then on, reclaim purges nothing below "low water".
	detached atomic.Bool

	// cachedBytes is the size of the events kept in memory with their
	// scheduler entries; above cacheBudget entries keep only their sequence
	// and delivery loads the event from the lane store.
	cachedBytes atomic.Int64
}

// Open creates the partition's streams and rebuilds the scheduler's view
// of it. Call Run next.
//
// lease is this agent's grant of the partition: every ledger write checks
// it and carries its epoch, and the partition stops when it is lost.
func Open(ctx context.Context, p int, deps Deps, lease *ownership.Lease) (*Partition, error) {
	o := &Partition{
		p:            p,
		lease:        lease,
		deps:         deps,
		log:          deps.Log.With("partition", p),
		reclaimLanes: make(map[string]uint64),
		deadReady:    make(chan struct{}, 1),
		unarchived:   make(map[string]int),
		appendCh:     make(chan *appendReq),
		writerDone:   make(chan struct{}),
	}
	// Each call is bounded: in a cell, a stream whose leader just died
	// answers only once its replicas elected another (seconds), and the
	// caller retries sooner than JetStream's default 5s timeout would.
	// Consumer calls get longer: a new consumer elects its own leader.
	bounded := func(timeout time.Duration, call func(ctx context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return call(cctx)
	}
	err := bounded(apiTimeout, func(ctx context.Context) (err error) {
		o.lanes, err = deps.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        lanes.LanesStream(p),
			Description: fmt.Sprintf("Tier 2: pending events of partition %d, one subject per lane.", p),
			Subjects:    []string{lanes.LanesFilter(p)},
			Storage:     jetstream.FileStorage,
			Replicas:    max(deps.Replicas, 1),
			Duplicates:  deps.DedupWindow,
			AllowDirect: true,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("partition %d: create lane store: %w", p, err)
	}
	err = bounded(apiTimeout, func(ctx context.Context) (err error) {
		o.ledger, err = deps.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        lanes.LedgerStream(p),
			Description: fmt.Sprintf("Tier 2: attempt state and unarchived dead letters of partition %d.", p),
			Subjects:    []string{lanes.LedgerFilter(p)},
			Storage:     jetstream.FileStorage,
			Replicas:    max(deps.Replicas, 1),
			AllowRollup: true,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("partition %d: create ledger: %w", p, err)
	}
	// Messages a previous owner fetched but never moved are held by the
	// durable mover until their AckWait ends, and would then arrive behind
	// events accepted later on the same lanes. This owner is the mover's
	// only user, so it starts from a fresh consumer: INGEST (a work queue)
	// keeps every unacked message, and they all come again, in order, now.
	mover := fmt.Sprintf("mover-%d", p)
	err = bounded(consumerTimeout, func(ctx context.Context) error {
		if err := deps.JS.DeleteConsumer(ctx, lanes.IngestStream, mover); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("partition %d: reset mover consumer: %w", p, err)
	}
	err = bounded(consumerTimeout, func(ctx context.Context) (err error) {
		o.ingest, err = deps.JS.CreateOrUpdateConsumer(ctx, lanes.IngestStream, jetstream.ConsumerConfig{
			Durable:       mover,
			Description:   fmt.Sprintf("Moves partition %d's accepted events into lanes.", p),
			FilterSubject: lanes.IngestFilter(p),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       30 * time.Second,
			MaxAckPending: 20_000,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("partition %d: create mover consumer: %w", p, err)
	}
	if err := o.rebuild(ctx); err != nil {
		return nil, fmt.Errorf("partition %d: rebuild: %w", p, err)
	}
	return o, nil
}

// Run moves events and reclaims space until ctx ends. The scheduler and
// delivery workers run beside it (owned by the agent).
//
// The first loop to fail (a failed write, a lost lease) stops the others,
// and Run returns its error.
func (o *Partition) Run(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	loops := []func(context.Context) error{o.writeLoop, o.move, o.reclaimLoop, o.archiveLoop, o.holdLease}
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
	return errors.Join(collect(errs)...)
}

// Detach makes the scheduler forget the partition's lanes (no new attempt
// starts; attempts in flight finish). Use it, not Scheduler.DropPartition,
// for a partition that runs: its space reclaim must know that the
// scheduler's low water no longer covers its events.
func (o *Partition) Detach() {
	o.detached.Store(true)
	o.deps.Scheduler.DropPartition(o.p)
}

// holdLease ends the partition when its lease is lost.
func (o *Partition) holdLease(ctx context.Context) error {
	select {
	case <-o.lease.Lost():
		return o.fence()
	case <-ctx.Done():
		return nil
	}
}

// apiTimeout and consumerTimeout bound one JetStream API call while a
// partition opens.
const (
	apiTimeout      = 3 * time.Second
	consumerTimeout = 15 * time.Second
)

// ErrMoveGap means INGEST skipped or repeated a message for this
// partition; the partition restarts to move in order.
var ErrMoveGap = errors.New("INGEST delivery out of order; restarting the partition")

// ErrFenced means this agent no longer owns the partition: nothing more
// may be written or delivered for it here.
var ErrFenced = errors.New("partition ownership lost")

// fence returns ErrFenced once the lease is no longer valid.
func (o *Partition) fence() error {
	if o.lease.Valid() {
		return nil
	}
	return fmt.Errorf("%w (partition %d, epoch %d): %v", ErrFenced, o.p, o.lease.Epoch, o.lease.Cause())
}

// Owned reports whether this agent may still deliver the partition's
// events: check it right before each send.
func (o *Partition) Owned() bool { return o.lease.Valid() }

// EpochHeader carries the fencing epoch of the owner that wrote a ledger
// entry.
const EpochHeader = "Rivora-Epoch"

func (o *Partition) stamp(msg *nats.Msg) {
	msg.Header.Set(EpochHeader, strconv.FormatUint(o.lease.Epoch, 10))
}

// epochOf is the epoch a ledger entry was written under (0: written before
// epochs were recorded).
func epochOf(msg jetstream.Msg) uint64 {
	e, _ := strconv.ParseUint(msg.Headers().Get(EpochHeader), 10, 64)
	return e
}

func collect(ch <-chan error) []error {
	var out []error
	for err := range ch {
		out = append(out, err)
	}
	return out
}

// ---- rebuild -------------------------------------------------------------

// rebuild reads the ledger and then scans the lane store, installing every
// pending lane in the scheduler.
func (o *Partition) rebuild(ctx context.Context) error {
	start := time.Now()
	heads := make(map[string]*rivorav1.LaneHead) // lane subject → head state
	deadSeqs := make(map[uint64]bool)
	var dead []queuedDead
	doneSet := make(map[uint64]bool)
	var newest uint64 // the newest epoch seen so far, in ledger order
	stale := 0
	err := scan(ctx, o.ledger, func(msg jetstream.Msg, meta *jetstream.MsgMetadata) error {
		switch epoch := epochOf(msg); {
		case epoch > o.lease.Epoch:
			return fmt.Errorf("%w: the ledger holds an entry (seq %d) written under epoch %d, newer than this owner's %d; another agent owns the partition now (or the lock store was reset)", ErrFenced, meta.Sequence.Stream, epoch, o.lease.Epoch)
		case epoch < newest:
			// Written by an owner that had already lost the partition
			// when a newer owner wrote: ignore it.
			stale++
			return nil
		default:
			newest = epoch
		}
		if msg.Subject() == lanes.DoneSubject(o.p) {
			seqs, err := decodeDone(msg.Data())
			if err != nil {
				return fmt.Errorf("decode done record: %w", err)
			}
			rec := doneRecord{ledgerSeq: meta.Sequence.Stream}
			for _, s := range seqs {
				doneSet[s] = true
				rec.max = max(rec.max, s)
			}
			o.doneRecords = append(o.doneRecords, rec)
			return nil
		}
		_, id, isDead, seq, err := lanes.ParseLedgerSubject(msg.Subject())
		if err != nil {
			o.log.Warn("ignoring malformed ledger entry", "subject", msg.Subject(), "error", err)
			return nil
		}
		if isDead {
			dl := &rivorav1.DeadLetter{}
			if err := proto.Unmarshal(msg.Data(), dl); err != nil {
				return fmt.Errorf("decode dead letter %d: %w", seq, err)
			}
			deadSeqs[seq] = true
			dead = append(dead, queuedDead{dl: dl, ledgerSeq: meta.Sequence.Stream})
			return nil
		}
		h := &rivorav1.LaneHead{}
		if err := proto.Unmarshal(msg.Data(), h); err != nil {
			return fmt.Errorf("decode lane head %s: %w", msg.Subject(), err)
		}
		heads[id.Subject(o.p)] = h
		return nil
	})
	if err != nil {
		return fmt.Errorf("read ledger: %w", err)
	}
	if stale > 0 {
		o.log.Warn("ignored ledger entries of a fenced-off owner", "entries", stale, "epoch", o.lease.Epoch)
	}
	info, err := o.lanes.Info(ctx)
	if err != nil {
		return fmt.Errorf("lane store info: %w", err)
	}
	type rebuilt struct {
		id      lanes.ID
		entries []scheduler.Entry
	}
	found := make(map[string]*rebuilt)
	var order []string
	events := 0
	err = scan(ctx, o.lanes, func(msg jetstream.Msg, meta *jetstream.MsgMetadata) error {
		seq := meta.Sequence.Stream
		subject := msg.Subject()
		if deadSeqs[seq] || doneSet[seq] {
			// Delivered or dead before the restart; its space was not
			// reclaimed yet.
			o.noteReclaim(subject, seq)
			return nil
		}
		ev := &rivorav1.Event{}
		if err := proto.Unmarshal(msg.Data(), ev); err != nil {
			return fmt.Errorf("decode event at seq %d: %w", seq, err)
		}
		r := found[subject]
		if r == nil {
			_, id, err := lanes.ParseSubject(subject)
			if err != nil {
				return err
			}
			r = &rebuilt{id: id}
			found[subject] = r
			order = append(order, subject)
		}
		r.entries = append(r.entries, scheduler.Entry{Seq: seq, EventID: ev.GetEventId(), AcceptedAt: ev.GetAcceptedAt().AsTime(), Event: o.keep(ev)})
		events++
		return nil
	})
	if err != nil {
		return fmt.Errorf("scan lane store: %w", err)
	}
	for _, subject := range order {
		r := found[subject]
		var head scheduler.Head
		h, hasLedger := heads[subject]
		if hasLedger && h.GetSeq() == r.entries[0].Seq {
			head = headFromProto(h)
		}
		o.deps.Scheduler.Restore(o.p, r.id, r.entries, head, hasLedger)
		delete(heads, subject)
	}
	for subject := range heads {
		// Head records of lanes that drained before the crash.
		_, id, err := lanes.ParseSubject(subject)
		if err == nil {
			o.noteLedgerPurge(id.HeadSubject(o.p))
		}
	}
	o.registeredThrough.Store(info.State.LastSeq)
	o.queueDead(dead...)
	if events > 0 || len(dead) > 0 {
		o.log.Info("partition rebuilt", "lanes", len(order), "events", events, "dead_unarchived", len(dead), "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// scan calls fn for every message of a stream, in order.
func scan(ctx context.Context, st jetstream.Stream, fn func(jetstream.Msg, *jetstream.MsgMetadata) error) error {
	cctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	info, err := st.Info(cctx)
	if err != nil {
		return err
	}
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := st.OrderedConsumer(cctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	// Short heartbeats: a consumer lost with a dead stream leader is
	// noticed (and recreated where it left off) in about 2s, not 10s.
	it, err := cons.Messages(jetstream.PullMaxMessages(4096), jetstream.PullExpiry(4*time.Second), jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return err
	}
	defer it.Stop()
	for {
		msg, err := it.Next()
		if err != nil {
			return err
		}
		meta, err := msg.Metadata()
		if err != nil {
			return err
		}
		if err := fn(msg, meta); err != nil {
			return err
		}
		if meta.NumPending == 0 || meta.Sequence.Stream >= info.State.LastSeq {
			return nil
		}
	}
}

func headFromProto(h *rivorav1.LaneHead) scheduler.Head {
	return scheduler.Head{
		Attempts:          int(h.GetAttempts()),
		NotBefore:         h.GetNotBefore().AsTime(),
		LastStatus:        int(h.GetLastStatus()),
		LastError:         h.GetLastError(),
		FirstAttemptAt:    h.GetFirstAttemptAt().AsTime(),
		LastAttemptAt:     h.GetLastAttemptAt().AsTime(),
		HeldByDestination: h.GetHeldByDestination(),
	}
}

// ---- move: INGEST → lanes ------------------------------------------------

const moveBatch = 512

func (o *Partition) move(ctx context.Context) error {
	msgs := make(chan jetstream.Msg, 2*moveBatch)
	cc, err := o.ingest.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-ctx.Done():
		}
	}, jetstream.PullMaxMessages(2*moveBatch), jetstream.PullExpiry(4*time.Second), jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return fmt.Errorf("partition %d: consume INGEST: %w", o.p, err)
	}
	defer cc.Stop()
	// Until INGEST is drained, accepted events queue behind it (see Append).
	drainCheck := time.NewTicker(20 * time.Millisecond)
	defer drainCheck.Stop()
	batch := make([]jetstream.Msg, 0, moveBatch)
	// The mover moves in INGEST order only if INGEST hands every message
	// over once, in order. A message lost on its way (its consumer's
	// leader died mid-delivery) would come back only after AckWait, behind
	// later events of its lane: a gap in the consumer sequence, or a
	// redelivery, restarts the partition, whose fresh consumer hands over
	// every unmoved message again, in order.
	var lastSeq uint64
	inOrder := func(m jetstream.Msg) error {
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("%w: INGEST message metadata: %v", ErrMoveGap, err)
		}
		if meta.NumDelivered > 1 || (lastSeq != 0 && meta.Sequence.Consumer != lastSeq+1) {
			return fmt.Errorf("%w: consumer sequence %d after %d (delivery %d of INGEST seq %d)", ErrMoveGap, meta.Sequence.Consumer, lastSeq, meta.NumDelivered, meta.Sequence.Stream)
		}
		lastSeq = meta.Sequence.Consumer
		return nil
	}
	for {
		select {
		case m := <-msgs:
			if err := inOrder(m); err != nil {
				return err
			}
			batch = append(batch[:0], m)
		case <-drainCheck.C:
			if o.openDirect(ctx) {
				drainCheck.Stop()
			}
			continue
		case <-ctx.Done():
			return nil
		}
	drain:
		for len(batch) < moveBatch {
			select {
			case m := <-msgs:
				if err := inOrder(m); err != nil {
					o.moveBatch(ctx, batch) // what came before the gap is in order
					return err
				}
				batch = append(batch, m)
			default:
				break drain
			}
		}
		o.moveBatch(ctx, batch)
	}
}

// openDirect opens the fast path once nothing for this partition waits in
// INGEST or is on its way there: from then on an accepted event cannot
// overtake an earlier one of its lane. It reports whether the path is open.
func (o *Partition) openDirect(ctx context.Context) bool {
	o.gateMu.Lock()
	if o.direct {
		o.gateMu.Unlock()
		return true
	}
	gen, busy := o.forwardGen, o.forwarding > 0
	o.gateMu.Unlock()
	if busy {
		return false
	}
	info, err := o.ingest.Info(ctx)
	if err != nil || info.NumPending > 0 || info.NumAckPending > 0 {
		return false
	}
	o.gateMu.Lock()
	defer o.gateMu.Unlock()
	if o.forwarding == 0 && o.forwardGen == gen {
		o.direct = true
	}
	return o.direct
}

// moveBatch hands a batch of INGEST messages to the writer and acks those
// it stored; the rest are retried (dedup ids make retries harmless).
func (o *Partition) moveBatch(ctx context.Context, batch []jetstream.Msg) {
	items := make([]Item, 0, len(batch))
	ins := make([]jetstream.Msg, 0, len(batch))
	for _, m := range batch {
		ev := &rivorav1.Event{}
		if err := proto.Unmarshal(m.Data(), ev); err != nil {
			o.log.Error("dropping undecodable INGEST message", "subject", m.Subject(), "error", err)
			_ = m.Term()
			continue
		}
		// The same dedup id as in INGEST (a replayed event has its own).
		id := m.Headers().Get(jetstream.MsgIDHeader)
		if id == "" {
			id = ev.GetEventId()
		}
		items = append(items, Item{Event: ev, Data: m.Data(), MsgID: id})
		ins = append(ins, m)
	}
	backoff := 100 * time.Millisecond
	for len(items) > 0 {
		res := o.submit(ctx, items)
		for _, m := range ins[:res.stored] {
			_ = m.Ack()
		}
		movedTotal.Add(float64(res.stored))
		items, ins = items[res.stored:], ins[res.stored:]
		if len(items) == 0 {
			return
		}
		if errors.Is(res.err, ErrNotOwned) {
			return // INGEST redelivers them to the next owner
		}
		o.log.Warn("lane store write failed; retrying", "error", res.err, "retry_in", backoff)
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, 5*time.Second)
		case <-ctx.Done():
			return
		}
	}
}

// ---- write: the one writer of the lane store -------------------------------

// Item is one event to append to the lane store.
type Item struct {
	Event *rivorav1.Event
	// Data is the encoded Event.
	Data []byte
	// MsgID is the dedup id: the event id, or a replay's own id.
	MsgID string
}

// ErrNotOwned: the partition is not running here (released or stopping).
var ErrNotOwned = errors.New("partition not owned by this agent")

type appendReq struct {
	items []Item
	done  chan appendResult
}

type appendResult struct {
	stored     int    // items[:stored] are stored and registered
	duplicates []bool // per stored item: it was already there
	err        error  // why items[stored:] were not
}

// Append stores events accepted by this agent for this partition. Once the
// partition is open for it, that is the fast path: straight into the
// lanes, one write instead of INGEST then a move. Until then (just after
// the partition opened, while INGEST may still hold older events of the
// same lanes) they go through INGEST, behind those. It returns once they
// are durable, with a duplicate flag per event.
func (o *Partition) Append(ctx context.Context, items []Item) ([]bool, error) {
	o.gateMu.Lock()
	if !o.direct {
		o.forwarding++
		o.forwardGen++
		o.gateMu.Unlock()
		defer func() {
			o.gateMu.Lock()
			o.forwarding--
			o.gateMu.Unlock()
		}()
		return o.forward(ctx, items)
	}
	o.gateMu.Unlock()
	res := o.submit(ctx, items)
	if res.err != nil {
		if res.stored > 0 && !errors.Is(res.err, ErrNotOwned) {
			return res.duplicates, fmt.Errorf("stored %d of %d: %w", res.stored, len(items), res.err)
		}
		return res.duplicates, res.err
	}
	return res.duplicates, nil
}

// forward stores events in INGEST, for the mover.
func (o *Partition) forward(ctx context.Context, items []Item) ([]bool, error) {
	futures := make([]jetstream.PubAckFuture, len(items))
	for i, it := range items {
		msg := nats.NewMsg(lanes.IngestSubject(o.p, it.Event.GetDestinationId()))
		msg.Data = it.Data
		msg.Header.Set(jetstream.MsgIDHeader, it.MsgID)
		f, err := o.deps.JS.PublishMsgAsync(msg)
		if err != nil {
			return nil, err
		}
		futures[i] = f
	}
	dups := make([]bool, len(items))
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			dups[i] = ack.Duplicate
		case err := <-f.Err():
			return dups[:i], err
		case <-ctx.Done():
			return dups[:i], ctx.Err()
		}
	}
	return dups, nil
}

func (o *Partition) submit(ctx context.Context, items []Item) appendResult {
	req := &appendReq{items: items, done: make(chan appendResult, 1)}
	select {
	case o.appendCh <- req:
	case <-o.writerDone:
		return appendResult{err: ErrNotOwned}
	case <-ctx.Done():
		return appendResult{err: ctx.Err()}
	}
	select {
	case res := <-req.done:
		return res
	case <-ctx.Done():
		// The writer still finishes the request; its events are stored and
		// scheduled, only this caller stops waiting.
		return appendResult{err: ctx.Err()}
	}
}

const writeBatch = 2048

// ErrWriteFailed: the lane store refused or lost a write. Which events of
// the writes in flight were stored is unknown, so the partition stops; the
// agent reopens it, and the rebuild from the stream registers exactly what
// is stored, in order. Callers retry with the same dedup ids.
var ErrWriteFailed = errors.New("lane store write failed; partition restarting")

// flight is one group of appends whose writes are out.
type flight struct {
	reqs     []*appendReq
	futures  [][]jetstream.PubAckFuture // per request, per item
	subjects [][]string                 // per request, per item: the lane subject
	err      error                      // a publish was refused
}

// writeLoop is the lane store's single writer. It batches concurrent
// appends (group commit) and keeps several groups in flight; ackLoop
// registers what was stored with the scheduler in stream order, which keeps
// every lane FIFO and the registered mark exact.
func (o *Partition) writeLoop(ctx context.Context) error {
	defer close(o.writerDone)
	flights := make(chan *flight, 32)
	failed := make(chan struct{})
	ackDone := make(chan error, 1)
	go func() { ackDone <- o.ackLoop(flights, failed) }()
	// stop closes the pipeline and waits until every caller was answered.
	stop := func() error {
		close(flights)
		return <-ackDone
	}
	for {
		var batch []*appendReq
		select {
		case req := <-o.appendCh:
			batch = append(batch, req)
		case <-failed:
			return stop()
		case <-ctx.Done():
			stop()
			return nil
		}
		n := len(batch[0].items)
	drain:
		for n < writeBatch {
			select {
			case req := <-o.appendCh:
				batch = append(batch, req)
				n += len(req.items)
			default:
				break drain
			}
		}
		flights <- o.publish(batch)
	}
}

// publish sends every item of a group to the lane store without waiting.
func (o *Partition) publish(batch []*appendReq) *flight {
	f := &flight{reqs: batch, futures: make([][]jetstream.PubAckFuture, len(batch)), subjects: make([][]string, len(batch))}
	f.err = o.fence()
	for r, req := range batch {
		f.futures[r] = make([]jetstream.PubAckFuture, 0, len(req.items))
		f.subjects[r] = make([]string, 0, len(req.items))
		if f.err != nil {
			continue
		}
		for _, it := range req.items {
			ev := it.Event
			id := lanes.ID{Destination: ev.GetDestinationId(), Customer: ev.GetCustomerId(), Key: ev.GetLaneKey()}
			subject := id.Subject(o.p)
			f.subjects[r] = append(f.subjects[r], subject)
			msg := nats.NewMsg(subject)
			msg.Data = it.Data
			msg.Header.Set(jetstream.MsgIDHeader, it.MsgID)
			fut, err := o.deps.JS.PublishMsgAsync(msg)
			if err != nil {
				f.err = err
				break
			}
			f.futures[r] = append(f.futures[r], fut)
		}
	}
	return f
}

// ackLoop waits for the writes of each group in order, registers what was
// stored and answers the callers. On the first failure it closes failed,
// answers every caller still waiting with ErrWriteFailed, and returns the
// failure once flights is closed.
func (o *Partition) ackLoop(flights <-chan *flight, failed chan<- struct{}) error {
	var failure error
	for f := range flights {
		if failure != nil {
			for _, req := range f.reqs {
				req.done <- appendResult{err: ErrWriteFailed}
			}
			continue
		}
		if err := o.settle(f); err != nil {
			o.log.Error("lane store write failed; restarting the partition", "error", err)
			failure = fmt.Errorf("%w: %v", ErrWriteFailed, err)
			close(failed)
		}
	}
	return failure
}

// settle waits for one group's acks and registers it; all or nothing.
func (o *Partition) settle(f *flight) error {
	fail := func(err error) error {
		for _, req := range f.reqs {
			req.done <- appendResult{err: ErrWriteFailed}
		}
		return err
	}
	if f.err != nil {
		return fail(f.err)
	}
	type stored struct {
		seq uint64
		dup bool
	}
	acks := make([][]stored, len(f.reqs))
	for r, req := range f.reqs {
		acks[r] = make([]stored, len(req.items))
		for i, fut := range f.futures[r] {
			select {
			case ack := <-fut.Ok():
				acks[r][i] = stored{seq: ack.Sequence, dup: ack.Duplicate}
			case err := <-fut.Err():
				return fail(err)
			}
		}
	}
	byLane := make(map[string]int) // subject → index in appends
	var appends []scheduler.LaneAppend
	through := o.registeredThrough.Load()
	for r, req := range f.reqs {
		for i, a := range acks[r] {
			// This writer is the lane store's only one, so what it stores
			// gets exactly the next sequences, in order. Anything else
			// (writes reordered across a stream leader change, or a
			// fenced-off owner's late write) means the store and the
			// scheduler could disagree: register nothing and restart the
			// partition, whose rebuild registers exactly what is stored.
			// (Registering past a gap would let reclaim purge the events
			// in the gap before they are registered.)
			switch {
			case a.dup && a.seq <= through:
				continue // already registered (or delivered)
			case a.seq != through+1:
				return fail(fmt.Errorf("lane store gave sequence %d (duplicate %v), expected %d: writes out of order; rebuilding", a.seq, a.dup, through+1))
			}
			ev := req.items[i].Event
			subject := f.subjects[r][i]
			k, seen := byLane[subject]
			if !seen {
				k = len(appends)
				byLane[subject] = k
				appends = append(appends, scheduler.LaneAppend{
					ID:      lanes.ID{Destination: ev.GetDestinationId(), Customer: ev.GetCustomerId(), Key: ev.GetLaneKey()},
					Subject: subject,
				})
			}
			appends[k].Entries = append(appends[k].Entries, scheduler.Entry{Seq: a.seq, EventID: ev.GetEventId(), AcceptedAt: ev.GetAcceptedAt().AsTime(), Event: o.keep(ev)})
			through = a.seq
		}
	}
	o.deps.Scheduler.AppendAll(o.p, appends)
	// Only once the scheduler holds them may reclaim count these sequences
	// as registered: before, its low-water mark does not see them and a
	// purge would drop stored, undelivered events.
	o.registeredThrough.Store(through)
	for r, req := range f.reqs {
		dups := make([]bool, len(acks[r]))
		for i, a := range acks[r] {
			dups[i] = a.dup
		}
		req.done <- appendResult{stored: len(req.items), duplicates: dups}
	}
	return nil
}

// ---- attempts ------------------------------------------------------------

// Load returns the event of an attempt, from memory or the lane store.
func (o *Partition) Load(ctx context.Context, a *scheduler.Attempt) (*rivorav1.Event, error) {
	if a.Entry.Event != nil {
		return a.Entry.Event, nil
	}
	raw, err := o.lanes.GetMsg(ctx, a.Entry.Seq)
	if err != nil {
		return nil, fmt.Errorf("load event %s (seq %d): %w", a.Entry.EventID, a.Entry.Seq, err)
	}
	ev := &rivorav1.Event{}
	if err := proto.Unmarshal(raw.Data, ev); err != nil {
		return nil, fmt.Errorf("decode event %s (seq %d): %w", a.Entry.EventID, a.Entry.Seq, err)
	}
	return ev, nil
}

// Complete records the outcome of an attempt and moves its lane on.
func (o *Partition) Complete(ctx context.Context, a *scheduler.Attempt, ev *rivorav1.Event, res delivery.Result) {
	now := o.deps.Clock.Now()
	attempt := &rivorav1.Attempt{
		Number:     int32(a.Number),
		At:         timestamppb.New(a.StartedAt),
		StatusCode: int32(res.Status),
		Duration:   durationpb.New(res.Duration),
	}
	attemptsTotal.WithLabelValues(ev.GetDestinationId(), statusClass(res)).Inc()
	fault := destinationFault(res)
	cause := ""
	if res.Err != nil {
		cause = res.Err.Error()
	}
	if tr, changed := o.deps.Scheduler.Observe(a, res.Status, fault, res.RetryAfter, cause); changed {
		o.log.Info("destination health changed", "destination", ev.GetDestinationId(), "from", tr.From.String(), "to", tr.To.String(), "cause", tr.Cause)
	}
	if res.OK() {
		out := o.deps.Scheduler.Succeeded(a)
		o.afterAdvance(a, out)
		o.deps.History.Record(outcome(ev, rivorav1.EventOutcome_KIND_DELIVERED, attempt))
		return
	}
	attempt.Error = res.Err.Error()
	if a.EarlyProbe && fault {
		// A probe of a parked destination, made before this event's own
		// retry time: the destination is still down; the event keeps its
		// attempts and its schedule.
		o.deps.History.Record(outcome(ev, rivorav1.EventOutcome_KIND_ATTEMPT_FAILED, attempt))
		o.deps.Scheduler.Retry(a, a.Head)
		return
	}
	head := a.Head
	head.Attempts = a.Number
	head.LastStatus = res.Status
	head.LastError = attempt.Error
	head.LastAttemptAt = now
	head.HeldByDestination = fault
	if head.FirstAttemptAt.IsZero() {
		head.FirstAttemptAt = a.StartedAt
	}
	policy := retry.DefaultPolicy()
	// The window runs from acceptance, not counting time the destination
	// was paused.
	windowStart := ev.GetAcceptedAt().AsTime()
	if d, ok := o.deps.Registry.Get(ev.GetDestinationId()); ok {
		policy = d.Retry
		windowStart = windowStart.Add(d.PausedBetween(windowStart, now))
	}
	wait := max(retry.Jittered(policy.Backoff(head.Attempts)), res.RetryAfter)
	decision := policy.Next(head.Attempts, windowStart, now, wait)
	o.deps.History.Record(outcome(ev, rivorav1.EventOutcome_KIND_ATTEMPT_FAILED, attempt))
	switch decision.Verdict {
	case retry.Retry:
		head.NotBefore = decision.NotBefore
		o.retryLater(ctx, a, head)
	case retry.ExhaustedAttempts:
		o.kill(ctx, a, ev, head, rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS)
	case retry.ExhaustedWindow:
		o.kill(ctx, a, ev, head, rivorav1.DeadReason_DEAD_REASON_WINDOW)
	}
}

// Abandon dead-letters an attempt's event without sending it (its
// destination was deleted while the attempt was being handed out).
func (o *Partition) Abandon(ctx context.Context, a *scheduler.Attempt, ev *rivorav1.Event, reason rivorav1.DeadReason) {
	o.kill(ctx, a, ev, a.Head, reason)
	// The lane's later events were held back with it while it was in
	// flight; they follow it to the archive.
	if _, err := o.ArchiveDestination(ctx, ev.GetDestinationId()); err != nil {
		o.log.Warn("archive the rest of a deleted destination", "destination", ev.GetDestinationId(), "error", err)
	}
}

// Skip moves a lane past an entry whose event can no longer be loaded.
func (o *Partition) Skip(a *scheduler.Attempt, err error) {
	o.log.Error("skipping an event that cannot be loaded", "event_id", a.Entry.EventID, "lane", a.Lane.ID.String(), "error", err)
	o.afterAdvance(a, o.deps.Scheduler.Succeeded(a))
}

func (o *Partition) retryLater(ctx context.Context, a *scheduler.Attempt, head scheduler.Head) {
	rec := &rivorav1.LaneHead{
		Seq:               a.Entry.Seq,
		EventId:           a.Entry.EventID,
		Attempts:          int32(head.Attempts),
		NotBefore:         timestamppb.New(head.NotBefore),
		LastStatus:        int32(head.LastStatus),
		LastError:         head.LastError,
		FirstAttemptAt:    timestamppb.New(head.FirstAttemptAt),
		LastAttemptAt:     timestamppb.New(head.LastAttemptAt),
		HeldByDestination: head.HeldByDestination,
	}
	// Appended, not rolled up: a rollup by an owner fenced off a moment
	// too late would erase the newer owner's record; the rebuild keeps the
	// last record of the newest epoch, and the subject is purged once the
	// lane moves on (a head collects at most max_attempts records).
	if err := o.writeLedger(ctx, a.Lane.ID.HeadSubject(o.p), rec); err != nil {
		// The retry still happens; after a crash this attempt would not be
		// counted.
		o.log.Warn("ledger write failed", "lane", a.Lane.ID.String(), "error", err)
	}
	o.deps.Scheduler.Retry(a, head)
}

func (o *Partition) kill(ctx context.Context, a *scheduler.Attempt, ev *rivorav1.Event, head scheduler.Head, reason rivorav1.DeadReason) {
	dl := o.deadLetter(ev, a.Entry.Seq, head, reason)
	if err := o.recordDead(ctx, dl); err != nil {
		// The lane may only advance once the dead letter is durable; try
		// again shortly.
		o.log.Warn("ledger write of dead letter failed; holding the lane", "event_id", ev.GetEventId(), "error", err)
		head.NotBefore = o.deps.Clock.Now().Add(5 * time.Second)
		o.deps.Scheduler.Retry(a, head)
		return
	}
	out := o.deps.Scheduler.Dead(a)
	o.afterAdvance(a, out)
	o.deps.History.Record(deadOutcome(ev, reason))
	deadTotal.WithLabelValues(ev.GetDestinationId(), reasonLabel(reason)).Inc()
}

// Unarchived is how many dead letters of a destination wait for the
// archive.
func (o *Partition) Unarchived(destinationID string) int {
	o.deadMu.Lock()
	defer o.deadMu.Unlock()
	return o.unarchived[destinationID]
}

// queuedDead is a dead letter waiting for the archive, with the ledger
// sequence of its record (the order archive objects are named in).
type queuedDead struct {
	dl        *rivorav1.DeadLetter
	ledgerSeq uint64
}

func (o *Partition) queueDead(dls ...queuedDead) {
	if len(dls) == 0 {
		return
	}
	o.deadMu.Lock()
	o.deadQueue = append(o.deadQueue, dls...)
	for _, d := range dls {
		o.unarchived[d.dl.GetEvent().GetDestinationId()]++
	}
	o.deadMu.Unlock()
	unarchived.Add(float64(len(dls)))
	select {
	case o.deadReady <- struct{}{}:
	default:
	}
}

func (o *Partition) deadLetter(ev *rivorav1.Event, seq uint64, head scheduler.Head, reason rivorav1.DeadReason) *rivorav1.DeadLetter {
	dl := &rivorav1.DeadLetter{
		Event:      ev,
		Attempts:   int32(head.Attempts),
		LastStatus: int32(head.LastStatus),
		LastError:  head.LastError,
		DeadAt:     timestamppb.New(o.deps.Clock.Now()),
		Reason:     reason,
		Partition:  uint32(o.p),
		LaneSeq:    seq,
	}
	if !head.FirstAttemptAt.IsZero() {
		dl.FirstAttemptAt = timestamppb.New(head.FirstAttemptAt)
		dl.LastAttemptAt = timestamppb.New(head.LastAttemptAt)
	}
	return dl
}

func (o *Partition) writeLedger(ctx context.Context, subject string, m proto.Message) error {
	_, err := o.appendLedger(ctx, subject, m)
	return err
}

// appendLedger writes to the ledger and returns the write's ledger sequence.
func (o *Partition) appendLedger(ctx context.Context, subject string, m proto.Message) (uint64, error) {
	data, err := proto.Marshal(m)
	if err != nil {
		return 0, err
	}
	if err := o.fence(); err != nil {
		return 0, err
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	o.stamp(msg)
	ack, err := o.deps.JS.PublishMsg(ctx, msg)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// recordDead makes a dead letter durable in the ledger and queues it for
// the archive, as one step (see deadWriteMu). Until it returns, the lane
// must not advance: the lane's next dead letter comes after this one.
func (o *Partition) recordDead(ctx context.Context, dl *rivorav1.DeadLetter) error {
	o.deadWriteMu.Lock()
	defer o.deadWriteMu.Unlock()
	seq, err := o.appendLedger(ctx, lanes.DeadSubject(o.p, dl.GetLaneSeq()), dl)
	if err != nil {
		return err
	}
	o.queueDead(queuedDead{dl: dl, ledgerSeq: seq})
	return nil
}

// cacheBudget bounds the bytes of events a partition keeps in memory.
const cacheBudget = 64 << 20

// keep returns ev to hold in its scheduler entry while the partition's
// cache has room, else nil (delivery then loads it by sequence): a large
// backlog costs memory per lane and entry, not per payload byte.
func (o *Partition) keep(ev *rivorav1.Event) *rivorav1.Event {
	size := int64(len(ev.GetPayload()) + 128)
	if o.cachedBytes.Load()+size > cacheBudget {
		return nil
	}
	o.cachedBytes.Add(size)
	return ev
}

// forgetCached gives an entry's cached bytes back.
func (o *Partition) forgetCached(e scheduler.Entry) {
	if e.Event != nil {
		o.cachedBytes.Add(-int64(len(e.Event.GetPayload()) + 128))
	}
}

func (o *Partition) afterAdvance(a *scheduler.Attempt, out scheduler.Outcome) {
	o.forgetCached(a.Entry)
	o.noteReclaim(a.Lane.Subject, a.Entry.Seq)
	if out.PurgeLedger {
		o.noteLedgerPurge(a.Lane.ID.HeadSubject(o.p))
	}
}

// ArchiveDestination dead-letters every pending event of a destination that
// is not in flight (reason "deleted") and returns how many.
func (o *Partition) ArchiveDestination(ctx context.Context, destinationID string) (int, error) {
	taken := o.deps.Scheduler.TakeDestination(destinationID)
	n := 0
	var firstErr error
	for lane, entries := range taken {
		for _, e := range entries {
			o.forgetCached(e)
			a := &scheduler.Attempt{Lane: lane, Entry: e}
			ev, err := o.Load(ctx, a)
			if err != nil {
				firstErr = cmpErr(firstErr, err)
				continue
			}
			dl := o.deadLetter(ev, e.Seq, scheduler.Head{}, rivorav1.DeadReason_DEAD_REASON_DELETED)
			if err := o.recordDead(ctx, dl); err != nil {
				firstErr = cmpErr(firstErr, err)
				continue
			}
			o.noteReclaim(lane.Subject, e.Seq)
			o.deps.History.Record(deadOutcome(ev, dl.Reason))
			deadTotal.WithLabelValues(destinationID, reasonLabel(dl.Reason)).Inc()
			n++
		}
		o.noteLedgerPurge(lane.ID.HeadSubject(o.p))
	}
	return n, firstErr
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func deadOutcome(ev *rivorav1.Event, reason rivorav1.DeadReason) *rivorav1.EventOutcome {
	o := outcome(ev, rivorav1.EventOutcome_KIND_DEAD, nil)
	o.DeadReason = reason
	return o
}

func outcome(ev *rivorav1.Event, kind rivorav1.EventOutcome_Kind, a *rivorav1.Attempt) *rivorav1.EventOutcome {
	return &rivorav1.EventOutcome{
		Kind: kind, EventId: ev.GetEventId(), DestinationId: ev.GetDestinationId(), CustomerId: ev.GetCustomerId(),
		LaneKey: ev.GetLaneKey(), Type: ev.GetType(), AcceptedAt: ev.GetAcceptedAt(), Attempt: a,
	}
}

// destinationFault tells failures that are the destination's — it is
// down, unreachable, slow or throttling: 429, 503, 502, 504, 408, 409, 425,
// timeouts and connection errors; they cost its budget and health — from
// failures that are the event's: other 4xx, and 500 and other 5xx, which a
// partner answers to one payload it cannot handle; those only use up the
// event's attempts.
func destinationFault(res delivery.Result) bool {
	if res.OK() {
		return false
	}
	switch res.Status {
	case 0, 408, 409, 425, 429, 502, 503, 504:
		return true
	}
	return false
}

func statusClass(res delivery.Result) string {
	switch {
	case res.Status == 0:
		return "error"
	case res.Status < 300:
		return "2xx"
	case res.Status < 400:
		return "3xx"
	case res.Status < 500:
		return "4xx"
	default:
		return "5xx"
	}
}

func reasonLabel(r rivorav1.DeadReason) string {
	switch r {
	case rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS:
		return "max_attempts"
	case rivorav1.DeadReason_DEAD_REASON_WINDOW:
		return "window"
	case rivorav1.DeadReason_DEAD_REASON_DELETED:
		return "deleted"
	default:
		return "manual"
	}
}

// ---- reclaim: record what is done, and free its space --------------------

const (
	reclaimEvery = 200 * time.Millisecond
	// Above the low-water mark, space of done events is freed lane by lane
	// only when this many lanes hold some (a lane stuck behind a failing
	// destination keeps the mark low), and at most reclaimLanesPerTick at
	// a time.
	reclaimPressure     = 10_000
	reclaimLanesPerTick = 500
)

// doneRecord is one done record in the ledger: its ledger sequence and the
// highest lane-store sequence it lists.
type doneRecord struct {
	ledgerSeq uint64
	max       uint64
}

func (o *Partition) noteReclaim(subject string, seq uint64) {
	o.reclaimMu.Lock()
	o.doneSeqs = append(o.doneSeqs, seq)
	if seq > o.reclaimLanes[subject] {
		o.reclaimLanes[subject] = seq
	}
	o.reclaimMu.Unlock()
}

func (o *Partition) noteLedgerPurge(subject string) {
	o.reclaimMu.Lock()
	o.reclaimLedger = append(o.reclaimLedger, subject)
	o.reclaimMu.Unlock()
}

// encodeDone packs sequences as sorted uvarint deltas.
func encodeDone(seqs []uint64) []byte {
	slices.Sort(seqs)
	out := make([]byte, 0, 3*len(seqs))
	var prev uint64
	for _, s := range seqs {
		out = binary.AppendUvarint(out, s-prev)
		prev = s
	}
	return out
}

func decodeDone(data []byte) ([]uint64, error) {
	var out []uint64
	var prev uint64
	for len(data) > 0 {
		d, n := binary.Uvarint(data)
		if n <= 0 {
			return nil, errors.New("bad varint")
		}
		prev += d
		out = append(out, prev)
		data = data[n:]
	}
	return out, nil
}

// reclaimLoop makes "delivered" durable without a store operation per
// event: every tick it appends one done record listing the sequences
// delivered or dead-lettered since the last (a restart skips them), purges
// the lane store below the partition's low-water mark in one operation,
// drops done records that only list purged sequences, and — only when
// many lanes above the mark hold done events — frees those lane by lane.
// A crash loses at most one tick: those events are delivered again
// (at-least-once), never lost.
func (o *Partition) reclaimLoop(ctx context.Context) error {
	t := time.NewTicker(reclaimEvery)
	defer t.Stop()
	var purgedBelow uint64
	garbage := make(map[string]uint64) // lanes above the mark holding done events
	for {
		select {
		case <-ctx.Done():
			o.recordDone(context.WithoutCancel(ctx))
			return nil
		case <-t.C:
		}
		if !o.recordDone(ctx) || o.fence() != nil {
			continue
		}
		o.reclaimMu.Lock()
		dirty, ledger := o.reclaimLanes, o.reclaimLedger
		o.reclaimLanes, o.reclaimLedger = make(map[string]uint64), nil
		o.reclaimMu.Unlock()

		floor := o.registeredThrough.Load() + 1
		low := o.deps.Scheduler.LowWater(o.p)
		if o.detached.Load() {
			// The scheduler forgot the partition: its low water says
			// nothing any more, and nothing may be purged on its word.
			continue
		}
		if low != 0 && low < floor {
			floor = low
		}
		if floor > purgedBelow+1 {
			if err := o.lanes.Purge(ctx, jetstream.WithPurgeSequence(floor)); err != nil {
				o.log.Warn("purge below low water failed", "seq", floor, "error", err)
			} else {
				purgedBelow = floor - 1
			}
		}
		o.compactDone(ctx, purgedBelow)
		for subject, seq := range dirty {
			if seq > garbage[subject] {
				garbage[subject] = seq
			}
		}
		purged := 0
		for subject, seq := range garbage {
			if seq <= purgedBelow {
				delete(garbage, subject)
				continue
			}
			if len(garbage) < reclaimPressure || purged >= reclaimLanesPerTick {
				continue
			}
			if err := o.lanes.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(seq+1)); err != nil {
				o.log.Warn("purge done events failed", "lane", subject, "error", err)
				continue
			}
			delete(garbage, subject)
			purged++
		}
		for _, subject := range ledger {
			if err := o.ledger.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
				o.log.Warn("purge ledger entry failed", "subject", subject, "error", err)
			}
		}
	}
}

// recordDone appends the done record of this tick; false when there was
// nothing new and nothing to do.
func (o *Partition) recordDone(ctx context.Context) bool {
	o.reclaimMu.Lock()
	seqs := o.doneSeqs
	o.doneSeqs = nil
	idle := len(seqs) == 0 && len(o.reclaimLanes) == 0 && len(o.reclaimLedger) == 0
	o.reclaimMu.Unlock()
	if idle {
		return false
	}
	if len(seqs) == 0 {
		return true
	}
	msg := nats.NewMsg(lanes.DoneSubject(o.p))
	msg.Data = encodeDone(seqs)
	o.stamp(msg)
	err := o.fence()
	var ack *jetstream.PubAck
	if err == nil {
		ack, err = o.deps.JS.PublishMsg(ctx, msg)
	}
	if err != nil {
		o.log.Warn("done record write failed; retrying next tick", "events", len(seqs), "error", err)
		o.reclaimMu.Lock()
		o.doneSeqs = append(o.doneSeqs, seqs...)
		o.reclaimMu.Unlock()
		return true
	}
	o.doneRecords = append(o.doneRecords, doneRecord{ledgerSeq: ack.Sequence, max: slices.Max(seqs)})
	return true
}

// compactDone drops the oldest done records once every sequence they list
// is purged from the lane store.
func (o *Partition) compactDone(ctx context.Context, purgedBelow uint64) {
	k := 0
	for k < len(o.doneRecords) && o.doneRecords[k].max <= purgedBelow {
		k++
	}
	if k == 0 {
		return
	}
	if o.fence() != nil {
		return
	}
	if err := o.ledger.Purge(ctx, jetstream.WithPurgeSubject(lanes.DoneSubject(o.p)), jetstream.WithPurgeSequence(o.doneRecords[k-1].ledgerSeq+1)); err != nil {
		o.log.Warn("compact done records failed", "error", err)
		return
	}
	o.doneRecords = o.doneRecords[k:]
}

// ---- archive: dead letters to tier 3 -------------------------------------

const (
	archiveBatch = 500
	archiveEvery = time.Second
)

// archiveLoop batches dead letters into archive objects; a dead letter
// leaves the ledger only after its object is written. It waits up to
// archiveEvery for a batch to fill.
func (o *Partition) archiveLoop(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-o.deadReady:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(archiveEvery):
		}
		for {
			o.deadMu.Lock()
			n := min(len(o.deadQueue), archiveBatch)
			batch := o.deadQueue[:n:n]
			o.deadQueue = o.deadQueue[n:]
			o.deadMu.Unlock()
			if n == 0 {
				break
			}
			if !o.archive(ctx, batch) {
				return nil
			}
		}
	}
}

// archive writes a batch, retrying until it succeeds; false when ctx ended.
//
// The queue is in ledger order, which within a lane is lane order, so an
// object named by the ledger sequences of its first and last records sorts
// before every later object of its destination: replaying objects in key
// order replays each lane in order.
func (o *Partition) archive(ctx context.Context, batch []queuedDead) bool {
	type group struct {
		dest        string
		hour        time.Time
		first, last uint64
		items       []*rivorav1.DeadLetter
	}
	groups := make(map[string]*group)
	var order []string
	for _, d := range batch {
		dl := d.dl
		hour := dl.GetDeadAt().AsTime().UTC().Truncate(time.Hour)
		k := dl.GetEvent().GetDestinationId() + "|" + hour.String()
		g := groups[k]
		if g == nil {
			g = &group{dest: dl.GetEvent().GetDestinationId(), hour: hour, first: d.ledgerSeq}
			groups[k] = g
			order = append(order, k)
		}
		g.items = append(g.items, dl)
		g.last = d.ledgerSeq
	}
	for _, k := range order {
		g := groups[k]
		key := archive.Key(g.dest, g.hour, o.p, g.first, g.last)
		backoff := 500 * time.Millisecond
		for {
			err := o.deps.Archive.Put(ctx, key, g.items)
			if err == nil {
				break
			}
			o.log.Warn("archive write failed; dead letters stay in the ledger", "key", key, "events", len(g.items), "retry_in", backoff, "error", err)
			select {
			case <-time.After(backoff):
				backoff = min(2*backoff, 30*time.Second)
			case <-ctx.Done():
				return false
			}
		}
		if err := o.fence(); err != nil {
			// The new owner archives them again (a duplicate object,
			// never a loss).
			return false
		}
		for _, dl := range g.items {
			if err := o.ledger.Purge(ctx, jetstream.WithPurgeSubject(lanes.DeadSubject(o.p, dl.GetLaneSeq()))); err != nil {
				o.log.Warn("purge archived dead letter from ledger failed", "seq", dl.GetLaneSeq(), "error", err)
			}
		}
		archivedTotal.Add(float64(len(g.items)))
		unarchived.Sub(float64(len(g.items)))
		o.deadMu.Lock()
		if o.unarchived[g.dest] -= len(g.items); o.unarchived[g.dest] <= 0 {
			delete(o.unarchived, g.dest)
		}
		o.deadMu.Unlock()
		o.log.Info("dead letters archived", "key", key, "events", len(g.items))
	}
	return true
}
