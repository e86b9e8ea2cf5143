package owner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/internal/backoff"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// ErrMoveGap means INGEST skipped or repeated a message for this
// partition; the partition restarts to move in order.
var ErrMoveGap = errors.New("INGEST delivery out of order; restarting the partition")

// moveBatch is the most INGEST messages moved in one write.
const moveBatch = 512

// mover moves the partition's accepted events from INGEST into its lanes,
// through the lane writer, and opens the writer's fast path once INGEST is
// drained. It owns the partition's INGEST consumer.
//
// Invariants:
//   - it moves in INGEST order or not at all: a gap or a redelivery in the
//     consumer sequence stops the partition (ErrMoveGap), after moving
//     what came before it;
//   - an INGEST message is acked only once the writer stored and
//     registered its event (the rest are retried with the same dedup ids);
//   - it opens the fast path only when INGEST holds nothing for the
//     partition (see gate).
type mover struct {
	p      int
	ingest jetstream.Consumer
	writer *laneWriter
	log    *slog.Logger
}

func (m *mover) run(ctx context.Context) error {
	msgs := make(chan jetstream.Msg, 2*moveBatch)
	cc, err := m.ingest.Consume(func(msg jetstream.Msg) {
		select {
		case msgs <- msg:
		case <-ctx.Done():
		}
	}, jetstream.PullMaxMessages(2*moveBatch), jetstream.PullExpiry(4*time.Second), jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return fmt.Errorf("partition %d: consume INGEST: %w", m.p, err)
	}
	defer cc.Stop()
	return m.loop(ctx, msgs)
}

// loop moves what INGEST hands over, in batches of what is waiting.
func (m *mover) loop(ctx context.Context, msgs <-chan jetstream.Msg) error {
	// Until INGEST is drained, accepted events queue behind it (see Append).
	drainCheck := time.NewTicker(20 * time.Millisecond)
	defer drainCheck.Stop()
	batch := make([]jetstream.Msg, 0, moveBatch)
	var order ingestOrder
	for {
		select {
		case msg := <-msgs:
			if err := order.next(msg); err != nil {
				return err
			}
			batch = append(batch[:0], msg)
		case <-drainCheck.C:
			if m.openDirect(ctx) {
				drainCheck.Stop()
			}
			continue
		case <-ctx.Done():
			return nil
		}
		var gap error
		batch, gap = fill(batch, msgs, &order)
		m.moveBatch(ctx, batch) // what came before a gap is in order
		if gap != nil {
			return gap
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
	if meta.NumDelivered > 1 || (s.lastSeq != 0 && meta.Sequence.Consumer != s.lastSeq+1) {
		return fmt.Errorf("%w: consumer sequence %d after %d (delivery %d of INGEST seq %d)", ErrMoveGap, meta.Sequence.Consumer, s.lastSeq, meta.NumDelivered, meta.Sequence.Stream)
	}
	s.lastSeq = meta.Sequence.Consumer
	return nil
}

// openDirect opens the fast path once nothing for this partition waits in
// INGEST or is on its way there: from then on an accepted event cannot
// overtake an earlier one of its lane. It reports whether the path is open.
func (m *mover) openDirect(ctx context.Context) bool {
	gen, open, busy := m.writer.gate.observe()
	if open {
		return true
	}
	if busy {
		return false
	}
	info, err := m.ingest.Info(ctx)
	if err != nil || info.NumPending > 0 || info.NumAckPending > 0 {
		return false
	}
	return m.writer.gate.open(gen)
}

// moveBatch hands a batch of INGEST messages to the writer and acks those
// it stored; the rest are retried (dedup ids make retries harmless).
func (m *mover) moveBatch(ctx context.Context, batch []jetstream.Msg) {
	items, ins := m.decode(batch)
	wait := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	for len(items) > 0 {
		res := m.writer.submit(ctx, items)
		for _, msg := range ins[:res.stored] {
			_ = msg.Ack()
		}
		movedTotal.Add(float64(res.stored))
		items, ins = items[res.stored:], ins[res.stored:]
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

// decode turns INGEST messages into items for the writer, with the
// message of each; an undecodable message is dropped.
func (m *mover) decode(batch []jetstream.Msg) ([]Item, []jetstream.Msg) {
	items := make([]Item, 0, len(batch))
	ins := make([]jetstream.Msg, 0, len(batch))
	for _, msg := range batch {
		ev := &rivorav1.Event{}
		if err := proto.Unmarshal(msg.Data(), ev); err != nil {
			m.log.Error("dropping undecodable INGEST message", "subject", msg.Subject(), "error", err)
			_ = msg.Term()
			continue
		}
		// The same dedup id as in INGEST (a replayed event has its own).
		id := msg.Headers().Get(jetstream.MsgIDHeader)
		if id == "" {
			id = ev.GetEventId()
		}
		items = append(items, Item{Event: ev, Data: msg.Data(), MsgID: id})
		ins = append(ins, msg)
	}
	return items, ins
}
