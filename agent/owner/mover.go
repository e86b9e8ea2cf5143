package owner

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/edge"
	"github.com/rivora/rivora/internal/backoff"
	"github.com/rivora/rivora/internal/fingerprint"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// ErrMoveGap means INGEST skipped or repeated a message for this
// partition; the partition restarts to move in order.
var ErrMoveGap = errors.New("INGEST delivery out of order; restarting the partition")

// ErrMoverStopped means the mover's INGEST consumer stopped handing
// messages over while the partition ran: the partition restarts, and its
// fresh consumer hands every unmoved message over again, in order.
var ErrMoverStopped = errors.New("INGEST consumer stopped delivering to the mover; restarting the partition")

// ErrMoverLeaderChanged wraps an ErrMoveGap that came right after the
// INGEST consumer's leader changed (within leaderChangeGapWindow of the
// client library's "leadership change"): the new leader need not hand
// over what the old one had in flight, so a gap is to be expected then
// (every rolling restart moves leaders) and the restart is routine.
var ErrMoverLeaderChanged = errors.New("the INGEST consumer's leader changed while it handed messages over")

// leaderChangeGapWindow is how long after a consumer leadership change a
// gap counts as its consequence.
const leaderChangeGapWindow = 10 * time.Second

// moveBatch is the most INGEST messages moved in one write.
const moveBatch = 512

// mover moves the partition's accepted events from INGEST into its lanes,
// through the lane writer, and opens the writer's fast path once it moved
// what INGEST held for the partition (closing it again for a while when
// INGEST elects a leader). It owns the partition's INGEST consumer.
//
// Invariants:
//   - it moves in INGEST order or not at all: a gap or a redelivery in the
//     consumer sequence stops the partition (ErrMoveGap), after moving
//     what came before it, and so does a message of the partition that
//     INGEST holds, unmoved, before the first of a batch (the consumer
//     skipped it: see firstInOrder);
//   - an INGEST message is acked only once the writer stored and
//     registered its event (the rest are retried with the same dedup ids);
//   - it opens the fast path only once it moved every INGEST message for
//     the partition stored before its barrier, and not within
//     staleLeaderWindow of an INGEST leader election (see openDirect).
type mover struct {
	p      int
	ingest jetstream.Consumer
	writer *laneWriter
	// check judges edges' copies (Deps.Forwarded; nil: stored unchecked).
	check ForwardedCheck
	// marks know the edges' events stored already (forwardmarks.go).
	marks *forwardMarks
	// durable is the store's group commit (Deps.Durable; nil: none).
	durable *natsd.Syncer
	log     *slog.Logger

	// progress counts the INGEST messages the mover took and the batches
	// it finished: watchMover reads a mover that took nothing while
	// INGEST holds messages for it as stalled.
	progress atomic.Uint64
	// leaderChangedAt is when the INGEST consumer last reported a change
	// of its leader (unix nanoseconds; 0: never).
	leaderChangedAt atomic.Int64
	// consumeErr is the last error the INGEST consumer reported (nil:
	// none), for the log when it stops or stalls.
	consumeErr atomic.Pointer[error]

	// barrier is the mark openDirect stores in INGEST, and directFrom the
	// earliest the fast path may open again after INGEST elected a leader
	// (loop's goroutine only).
	barrier    barrier
	directFrom time.Time
}

// barrier is a message the mover stores in INGEST for its partition
// before it opens the fast path. Its store goes through the stream's
// leader and a quorum of its replicas, so every event INGEST
// acknowledged before it has a lower sequence, and the consumer hands
// them over before it; once the consumer's ack floor is past the
// barrier, every one of them was moved. A read of INGEST could not
// promise that: a server cut off while it led the stream (or the mover's
// consumer) still answers as leader, from its stale copy, until it finds
// it lost its quorum (nats-server: 10–20 s), and a client takes the
// first answer — just after the cut heals, that may be its.
type barrier struct {
	pending jetstream.PubAckFuture // sent, not yet answered
	sentAt  time.Time
	seq     uint64 // its INGEST sequence once stored (0: not yet)
}

// barrierHeader marks a barrier (its value: the partition). It has
// bytes, as every INGEST message does (lookIngest reads an empty answer
// as a status).
const barrierHeader = "Rivora-Ingest-Barrier"

// barrierMsg is a barrier for partition p. Besides the fast path's, an
// operator's archive stores one (awaitMoved): the mover handles any the
// same way.
func barrierMsg(p int) *nats.Msg {
	msg := nats.NewMsg(lanes.IngestSubject(p, "~barrier"))
	msg.Header.Set(barrierHeader, strconv.Itoa(p))
	msg.Data = []byte("barrier")
	return msg
}

// barrierRetry is how long an unanswered barrier is waited for before
// another is sent (a lost one is answered only by the publish timeout; a
// late one is moved as any other).
const barrierRetry = 5 * time.Second

// ingestLeaderElected is the advisory INGEST's new leader sends.
const ingestLeaderElected = "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED." + lanes.IngestStream

// staleLeaderWindow is how long after INGEST elected a leader the one it
// replaced may still answer reads as leader: it steps down once it sees
// it lost its quorum, 10–20 s after it lost it (nats-server's
// lostQuorumInterval and lostQuorumCheck), which was before the election.
// The direct path's look at INGEST is such a read: for this long after an
// election, the fast path closes.
const staleLeaderWindow = 25 * time.Second

// barrierStored reports the barrier's INGEST sequence once stored, sending it
// first (again, when the last one failed or went unanswered).
func (m *mover) barrierStored() (uint64, bool) {
	b := &m.barrier
	if b.seq != 0 {
		return b.seq, true
	}
	if b.pending != nil {
		select {
		case ack := <-b.pending.Ok():
			b.seq, b.pending = ack.Sequence, nil
			return b.seq, true
		case err := <-b.pending.Err():
			m.log.Debug("storing the fast path's barrier in INGEST failed; sending another", "error", err)
			b.pending = nil
		default:
			if time.Since(b.sentAt) < barrierRetry {
				return 0, false
			}
			b.pending = nil
		}
	}
	f, err := m.writer.js.PublishMsgAsync(barrierMsg(m.p))
	if err != nil {
		m.log.Debug("storing the fast path's barrier in INGEST failed; sending another", "error", err)
		return 0, false
	}
	b.pending, b.sentAt = f, time.Now()
	return 0, false
}

func (m *mover) run(ctx context.Context) error {
	msgs := make(chan jetstream.Msg, 2*moveBatch)
	cc, err := m.ingest.Consume(func(msg jetstream.Msg) {
		select {
		case msgs <- msg:
		case <-ctx.Done():
		}
	}, jetstream.PullMaxMessages(2*moveBatch), jetstream.PullExpiry(4*time.Second), jetstream.PullHeartbeat(time.Second),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) { m.consumeErrored(err) }))
	if err != nil {
		return fmt.Errorf("partition %d: consume INGEST: %w", m.p, err)
	}
	defer cc.Stop()
	elected := make(chan struct{}, 1)
	sub, err := m.writer.js.Conn().Subscribe(ingestLeaderElected, func(*nats.Msg) {
		select {
		case elected <- struct{}{}:
		default: // one pending is enough
		}
	})
	if err != nil {
		return fmt.Errorf("partition %d: follow INGEST's leader elections: %w", m.p, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	return m.loop(ctx, msgs, cc.Closed(), elected)
}

// consumeErrored records an error the INGEST consumer reported.
func (m *mover) consumeErrored(err error) {
	if errors.Is(err, jetstream.ErrConsumerLeadershipChanged) {
		m.leaderChangedAt.Store(time.Now().UnixNano())
	}
	m.consumeErr.Store(&err)
}

// explainGap marks a gap that followed a change of the consumer's leader
// (ErrMoverLeaderChanged).
func (m *mover) explainGap(gap error) error {
	at := m.leaderChangedAt.Load()
	if at != 0 && time.Since(time.Unix(0, at)) < leaderChangeGapWindow {
		return fmt.Errorf("%w: %w", ErrMoverLeaderChanged, gap)
	}
	return gap
}

// lastConsumeErr is the last error the INGEST consumer reported, or nil.
func (m *mover) lastConsumeErr() error {
	if err := m.consumeErr.Load(); err != nil {
		return *err
	}
	return nil
}

// loop moves what INGEST hands over, in batches of what is waiting, until
// ctx ends or the consumer stops (closed). The client library stops
// consuming for good, without a word, when a pull is answered "409
// Consumer Deleted" or "400 Bad Request": in a cell a server whose view
// lags can answer so for a consumer that lives on, and the mover would
// then wait for messages that never come while INGEST keeps them (issue
// 27). So a stopped consumer stops the partition, which restarts with a
// fresh one.
//
// While the fast path is closed, it checks every drainEvery whether it
// may open (openDirect); once open, it checks nothing until an election
// closes it (elected: INGEST elected a leader).
func (m *mover) loop(ctx context.Context, msgs <-chan jetstream.Msg, closed <-chan struct{}, elected <-chan struct{}) error {
	// Until the fast path opens, accepted events queue behind INGEST's
	// (see Append).
	drainCheck := time.NewTicker(drainEvery)
	defer drainCheck.Stop()
	batch := make([]jetstream.Msg, 0, moveBatch)
	var order ingestOrder
	for {
		select {
		case msg := <-msgs:
			if err := order.next(msg); err != nil {
				return m.explainGap(err)
			}
			batch = append(batch[:0], msg)
		case <-closed:
			if ctx.Err() != nil {
				return nil
			}
			moverStallsTotal.Inc()
			return fmt.Errorf("%w (partition %d; the consumer's last error: %v)", ErrMoverStopped, m.p, m.lastConsumeErr())
		case <-drainCheck.C:
			if m.openDirect(ctx) {
				drainCheck.Stop()
			}
			continue
		case <-elected:
			m.closeDirect(time.Now().Add(staleLeaderWindow))
			drainCheck.Reset(drainEvery)
			continue
		case <-ctx.Done():
			return nil
		}
		var gap error
		batch, gap = fill(batch, msgs, &order)
		m.progress.Add(uint64(len(batch)))
		if err := m.firstInOrder(ctx, batch[0]); err != nil || ctx.Err() != nil {
			return err // stopping: INGEST hands the batch over again
		}
		m.moveBatch(ctx, batch) // what came before a gap is in order
		m.progress.Add(1)
		if gap != nil {
			return m.explainGap(gap)
		}
	}
}

// fill adds the messages already waiting, up to moveBatch. It stops at one
// out of order and returns the batch before it with the gap.
func fill(batch []jetstream.Msg, msgs <-chan jetstream.Msg, order *ingestOrder) ([]jetstream.Msg, error) {
	for len(batch) < moveBatch {
		select {
		case msg := <-msgs:
			if err := order.next(msg); err != nil {
				return batch, err
			}
			batch = append(batch, msg)
		default:
			return batch, nil
		}
	}
	return batch, nil
}

// ingestOrder checks that INGEST hands every message over once, in order:
// only then does the mover move in INGEST order. A message lost on its way
// (its consumer's leader died mid-delivery) would come back only after
// AckWait, behind later events of its lane: a gap in the consumer
// sequence, or a redelivery, restarts the partition, whose fresh consumer
// hands over every unmoved message again, in order.
type ingestOrder struct {
	lastSeq uint64 // consumer sequence of the last message in order
}

func (s *ingestOrder) next(msg jetstream.Msg) error {
	meta, err := msg.Metadata()
	if err != nil {
		return fmt.Errorf("%w: INGEST message metadata: %v", ErrMoveGap, err)
	}
	return s.check(meta)
}

func (s *ingestOrder) check(meta *jetstream.MsgMetadata) error {
	// The consumer is fresh (resetMoverConsumer): its first message is
	// consumer sequence 1. Another one is a lost first message, or an old
	// consumer a stale "not found" left in place, holding messages it
	// handed over before.
	if meta.NumDelivered > 1 || meta.Sequence.Consumer != s.lastSeq+1 {
		return fmt.Errorf("%w: consumer sequence %d after %d (delivery %d of INGEST seq %d)", ErrMoveGap, meta.Sequence.Consumer, s.lastSeq, meta.NumDelivered, meta.Sequence.Stream)
	}
	s.lastSeq = meta.Sequence.Consumer
	return nil
}

// SkipFound is in the error of a partition whose INGEST consumer skipped
// one of its events (firstInOrder), for the tests that count them.
const SkipFound = "was never handed over by the consumer"

// firstInOrder checks, before a batch is moved, that INGEST holds no
// message of this partition between the last one moved and the batch's
// first: ErrMoveGap names one it does. The consumer sequence cannot show
// such a skip — the consumer never handed the message over, so the next
// one comes with the next consumer sequence — yet a consumer that skips
// (nats-server has had such bugs, WorkQueue streams with filtered
// consumers among them) would move later events of a lane ahead of an
// earlier one, and leave that one in INGEST until the partition restarts.
// The restart's fresh consumer hands over every unmoved message, in order.
//
// The read is the stream leader's (or, with one replica, its one copy's):
// a stale leader could miss a message, never show one the mover acked.
// Until INGEST answers, the batch waits.
func (m *mover) firstInOrder(ctx context.Context, first jetstream.Msg) error {
	want := streamSeq(first)
	wait := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second}
	for {
		var held uint64
		err := bounded(ctx, apiTimeout, func(ctx context.Context) (err error) {
			held, err = m.writer.firstUnmoved(ctx)
			return err
		})
		switch {
		case err == nil && (held == 0 || held >= want):
			return nil
		case err == nil:
			moverSkipsTotal.Inc()
			return fmt.Errorf("%w: INGEST seq %d of partition %d %s, and seq %d came after it", ErrMoveGap, held, m.p, SkipFound, want)
		case ctx.Err() != nil:
			return nil // stopping: nothing is moved
		}
		m.log.Debug("reading INGEST before a move failed; retrying", "error", err)
		if !backoff.Sleep(ctx, wait.Next()) {
			return nil
		}
	}
}

// drainEvery is how often a closed fast path checks whether it may open.
const drainEvery = 20 * time.Millisecond

// openDirect opens the fast path once nothing for this partition waits in
// INGEST or is on its way there: from then on an accepted event cannot
// overtake an earlier one of its lane. It reports whether the path is open.
//
// Nothing waits once the consumer acknowledged every message up to the
// barrier (every event stored before it: a message a previous consumer
// of the same name took and never acknowledged holds the floor back),
// this mover moved the barrier and every event this agent forwarded
// (forwardedThrough), and no forward is in flight or began since observe.
// An event another agent stores after the barrier is the direct path's
// look to see (laneWriter.append): so the path stays closed until
// directFrom, when no stale leader of INGEST answers any more.
func (m *mover) openDirect(ctx context.Context) bool {
	gen, open, busy := m.writer.gate.observe()
	if open {
		return true
	}
	// Sent even while forwards are in flight (a steady load may never
	// leave a gap): what they store after it is forwardedThrough's.
	seq, stored := m.barrierStored()
	if busy || !stored || time.Now().Before(m.directFrom) {
		return false
	}
	moved := m.writer.movedThrough.Load()
	if moved < seq || m.writer.forwardedThrough.Load() > moved {
		return false
	}
	// A stale answer (a consumer leader cut off) reports a lower floor.
	var info *jetstream.ConsumerInfo
	err := bounded(ctx, apiTimeout, func(ctx context.Context) (err error) {
		info, err = m.ingest.Info(ctx)
		return err
	})
	if err != nil || info.AckFloor.Stream < seq {
		return false
	}
	if !m.writer.gate.open(gen) {
		return false
	}
	m.log.Info("fast path open: INGEST moved past the barrier", "barrier", seq, "moved_through", moved)
	return true
}

// closeDirect closes the fast path until from at least (INGEST elected a
// leader: the one it replaced may answer the direct path's looks), and
// drops the barrier: it opens again past a new one.
func (m *mover) closeDirect(from time.Time) {
	if m.writer.gate.close() {
		m.log.Info("fast path closed: INGEST elected a leader, and the one it replaced may still answer reads", "until", from)
	}
	m.barrier = barrier{}
	m.directFrom = from
}

// moveBatch hands a batch of INGEST messages to the writer and acks those
// it stored; the rest are retried (dedup ids make retries harmless).
func (m *mover) moveBatch(ctx context.Context, batch []jetstream.Msg) {
	items, ins, origins, fwd := m.decode(ctx, batch)
	if !m.judgeForwarded(ctx, items, fwd) {
		return // stopping: INGEST redelivers them
	}
	// Once every message of the batch is stored or dropped, the direct
	// path need not wait for any of them (laneWriter.lookIngest).
	defer func() {
		if len(items) == 0 {
			m.writer.moved(streamSeq(batch[len(batch)-1]))
		}
	}()
	wait := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	for len(items) > 0 {
		res := m.writer.submit(ctx, items)
		// A copy the lanes took for a duplicate is compared with the
		// original before INGEST forgets it.
		if !m.keepConflicts(ctx, items[:res.stored], res.at) {
			return // stopping: INGEST redelivers them
		}
		if res.stored > 0 {
			// With --fsync the lanes' copies must survive a power loss
			// before INGEST forgets its own: else the move loses them.
			if err := m.durable.Commit(ctx); err != nil {
				m.log.Warn("syncing moved events failed; INGEST keeps them", "error", err)
				return // INGEST redelivers them; the lanes dedupe the copies
			}
		}
		// Marked before INGEST forgets them: a mark is never ahead of the
		// lanes, nor behind INGEST.
		m.marks.advance(ctx, origins[:res.stored])
		for _, msg := range ins[:res.stored] {
			_ = msg.Ack()
		}
		if res.stored > 0 {
			m.writer.moved(streamSeq(ins[res.stored-1]))
		}
		movedTotal.Add(float64(res.stored))
		items, ins, origins = items[res.stored:], ins[res.stored:], origins[res.stored:]
		if len(items) == 0 {
			return
		}
		if errors.Is(res.err, ErrNotOwned) {
			return // INGEST redelivers them to the next owner
		}
		d := wait.Next()
		m.log.Warn("lane store write failed; retrying", "error", res.err, "retry_in", d)
		if !backoff.Sleep(ctx, d) {
			return
		}
	}
}

// streamSeq is an INGEST message's stream sequence (0: unknown; the
// mover checked every message's metadata before, ingestOrder).
func streamSeq(msg jetstream.Msg) uint64 {
	meta, err := msg.Metadata()
	if err != nil {
		return 0
	}
	return meta.Sequence.Stream
}

// decode turns INGEST messages into items for the writer, with the
// message and the edge origin (zero: none) of each, and the edges' copies
// among them (forwarded: their positions in items); an undecodable
// message is dropped, and so is an edge's event stored already (its edge
// forwarded it again, forwardMarks).
func (m *mover) decode(ctx context.Context, batch []jetstream.Msg) ([]Item, []jetstream.Msg, []edge.Origin, []forwarded) {
	items := make([]Item, 0, len(batch))
	ins := make([]jetstream.Msg, 0, len(batch))
	origins := make([]edge.Origin, 0, len(batch))
	var fwd []forwarded
	for _, msg := range batch {
		if msg.Headers().Get(barrierHeader) != "" {
			_ = msg.Ack() // moved: nothing to store (see barrier)
			continue
		}
		origin, fromEdge := edge.ReadOrigin(msg.Headers())
		if fromEdge && m.marks.taken(ctx, origin) {
			_ = msg.Ack()
			reforwardedTotal.Inc()
			continue
		}
		ev := &rivorav1.Event{}
		if err := proto.Unmarshal(msg.Data(), ev); err != nil {
			m.log.Error("dropping undecodable INGEST message", "subject", msg.Subject(), "error", err)
			_ = msg.Term()
			continue
		}
		// The same dedup id as in INGEST (a replayed event has its own),
		// but an edge's copy's without its prefix: the lanes dedupe it
		// with the cell's copy of the same event.
		edgeName, key, id, isEdge := edge.ReadForwarded(msg.Headers())
		if id == "" {
			id = ev.GetEventId()
		}
		// The fingerprint goes with the event into its lane: a later
		// duplicate is compared with it there (ingest's originals), and
		// this copy with the original when the lanes take it for one.
		it := Item{Event: ev, Data: msg.Data(), MsgID: id, Fingerprint: fingerprint.FromHeader(msg.Headers())}
		if isEdge {
			fw := edge.Forwarded{Event: ev, Edge: edgeName, Key: key, Partition: m.p}
			fwd = append(fwd, forwarded{at: len(items), Forwarded: fw})
			it.forwarded = &fw
			if it.Fingerprint == nil && ev.GetSubscriptionId() == "" && id == ev.GetEventId() {
				it.Fingerprint = fingerprint.Of(ev) // an edge stamps none
			}
		}
		items = append(items, it)
		ins = append(ins, msg)
		origins = append(origins, origin)
	}
	return items, ins, origins, fwd
}

// forwarded is an edge's copy among a batch's items.
type forwarded struct {
	edge.Forwarded
	at int // its index in the items
}

// ForwardedCheck judges the copies edges forwarded against the cell's
// idempotency records (ingest.ForwardedCheck): per event "" to store it,
// else why its idempotency key names another event at the cell. It also
// judges a keyed copy the lanes took for a duplicate (DuplicateConflict:
// "" when the original at seq of stream is the same event, else why the
// copy is not delivered; copy.Edge is "" for a copy accepted at the cell).
type ForwardedCheck interface {
	CheckForwarded(ctx context.Context, events []edge.Forwarded) ([]string, error)
	DuplicateConflict(ctx context.Context, copy edge.Forwarded, fp []byte, stream string, seq uint64) (string, error)
}

// judgeForwarded checks the edges' copies of a batch (fwd) before they
// are stored, retrying until the check answers (the batch waits: it
// moves in INGEST order). A copy that conflicts is not dropped: it is
// stored marked (Event.idempotency_conflict) under a dedup id of its own,
// so that the cell's copy in the lanes does not swallow it, and becomes a
// dead letter at its turn without being sent (verdict.Facts.Conflict).
// It returns false when ctx ended first.
func (m *mover) judgeForwarded(ctx context.Context, items []Item, fwd []forwarded) bool {
	if len(fwd) == 0 || m.check == nil {
		return true
	}
	events := make([]edge.Forwarded, len(fwd))
	for i, f := range fwd {
		events[i] = f.Forwarded
	}
	wait := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	for {
		cctx, cancel := context.WithTimeout(ctx, checkForwardedTimeout)
		conflicts, err := m.check.CheckForwarded(cctx, events)
		cancel()
		if err == nil {
			for i, why := range conflicts {
				if why != "" {
					m.markConflict(&items[fwd[i].at], fwd[i].Edge, why)
				}
			}
			return true
		}
		// A mover that retries a store that fails is not stuck: it says
		// so at each try, and a restart would meet the same store
		// (watchMover counts each try as progress).
		m.progress.Add(1)
		d := wait.Next()
		m.log.Warn("checking edges' events against the cell's idempotency records failed; retrying", "error", err, "retry_in", d)
		if !backoff.Sleep(ctx, d) {
			return false
		}
	}
}

// checkForwardedTimeout bounds one check of an edge batch's copies (it
// writes their idempotency records): a store without a leader would
// otherwise hold it for the publish-ack timeout (30 s), longer than the
// mover stall timeout.
var checkForwardedTimeout = 10 * time.Second

// compareTimeout bounds one comparison of a duplicate with its original
// (a few JetStream requests, each answered in milliseconds when the
// streams have leaders). Without it a probe of a stream with no leader
// would wait for the publish-ack timeout (30 s) while the batch's INGEST
// messages wait unacked: a comparison that does not answer in time is
// logged and tried again, as one that fails.
var compareTimeout = 5 * time.Second

// keepConflicts compares each keyed item the lanes answered as a
// duplicate (at: where its original is) with that original. One whose key
// names another event there is not dropped: an agent that did not own the
// partition put it into INGEST while the owner stored the original
// straight into the lanes (the gateway's probe refuses that at publish,
// but not when the two publishes race). It is stored marked, as an edge's
// conflicting copy is, and becomes a dead letter (idempotency_conflict) at
// its turn. It returns false when ctx ended first.
func (m *mover) keepConflicts(ctx context.Context, items []Item, at []Stored) bool {
	if m.check == nil {
		return true
	}
	var marked []Item
	wait := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	for i := 0; i < len(items) && i < len(at); i++ {
		it := items[i]
		if !at[i].Duplicate || it.Fingerprint == nil || it.Event.GetIdempotencyConflict() != "" {
			continue
		}
		for {
			copy := edge.Forwarded{Event: it.Event, Partition: m.p}
			if it.forwarded != nil {
				copy = *it.forwarded
			}
			cctx, cancel := context.WithTimeout(ctx, compareTimeout)
			why, err := m.check.DuplicateConflict(cctx, copy, it.Fingerprint, at[i].Stream, at[i].Seq)
			cancel()
			if err == nil {
				// Many duplicates in a batch take a while to compare:
				// each answer is progress (watchMover).
				m.progress.Add(1)
				if why != "" {
					marked = append(marked, it)
					m.markConflict(&marked[len(marked)-1], copy.Edge, why)
				}
				break
			}
			m.progress.Add(1) // a logged retry, not a stall (as above)
			d := wait.Next()
			m.log.Warn("comparing a duplicate with its original failed; retrying", "event_id", it.Event.GetEventId(), "error", err, "retry_in", d)
			if !backoff.Sleep(ctx, d) {
				return false
			}
		}
	}
	for len(marked) > 0 {
		res := m.writer.submit(ctx, marked)
		marked = marked[res.stored:]
		if len(marked) == 0 {
			break
		}
		if errors.Is(res.err, ErrNotOwned) {
			return false
		}
		d := wait.Next()
		if !backoff.Sleep(ctx, d) {
			return false
		}
	}
	return true
}

// markConflict makes an item the marked copy of a conflicting event.
func (m *mover) markConflict(it *Item, edgeName, why string) {
	ev := proto.Clone(it.Event).(*rivorav1.Event)
	ev.IdempotencyConflict = why
	data, err := proto.Marshal(ev)
	if err != nil {
		// Cannot happen for a message just decoded; store it unmarked
		// rather than lose it.
		m.log.Error("mark an edge's conflicting copy", "event_id", ev.GetEventId(), "error", err)
		return
	}
	if edgeName == "" {
		it.Event, it.Data, it.MsgID, it.Fingerprint = ev, data, cellConflictMsgID(ev.GetEventId(), it.Fingerprint), nil
		m.log.Warn("a copy accepted through another agent conflicts with the event its key names in the lanes; it becomes a dead letter at its turn", "event_id", ev.GetEventId(), "destination", ev.GetDestinationId())
		return
	}
	it.Event, it.Data, it.MsgID = ev, data, conflictMsgID(edgeName, ev.GetEventId())
	m.log.Warn("an edge's copy conflicts with the cell's idempotency record; it becomes a dead letter at its turn", "edge", edgeName, "event_id", ev.GetEventId(), "destination", ev.GetDestinationId(), "reason", why)
}

// conflictMsgID is the lanes' dedup id of edge edgeName's conflicting
// copy of event id: its own, so that the cell's copy (dedup id: the
// event id) does not make it a duplicate, and stable, so that moving it
// again after a crash stores it once.
func conflictMsgID(edgeName, id string) string { return "edge-conflict:" + edgeName + ":" + id }

// cellConflictMsgID is conflictMsgID for a conflicting copy accepted at
// the cell: the event id and the copy's fingerprint (one per content).
func cellConflictMsgID(id string, fp []byte) string {
	return "conflict:" + id + ":" + hex.EncodeToString(fp[:8])
}
