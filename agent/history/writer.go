package history

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protowire"
)

// Batching defaults (Config overrides them).
const (
	DefaultFlushInterval   = 10 * time.Millisecond
	DefaultMaxBatchBytes   = 64 << 10
	DefaultMaxBatchRecords = 512
	// DefaultMaxQueuedBytes bounds the records waiting to be written
	// (queued and buffered): past it, records are dropped and counted.
	DefaultMaxQueuedBytes = 16 << 20
	// ackTimeout is how long a published batch waits for the stream's
	// ack before the writer stops counting it as unsettled (stored or
	// lost, it cannot tell).
	ackTimeout = 5 * time.Second
)

// HistoryBatch field numbers: a batch is built by appending each record's
// encoding under its field, which is the wire form of the repeated field.
const (
	outcomesField     protowire.Number = 1
	eventsField       protowire.Number = 2
	outcomeTimesField protowire.Number = 3
)

// item is one encoded record on its way to a batch.
type item struct {
	subject string
	field   protowire.Number
	data    []byte
	// at is when an outcome was recorded (unix ns).
	at int64
	// hash is the record's event id's idHash, for the subject's index.
	hash uint32
}

// round is the batches built since the last flush.
type round struct {
	bySubject map[string]*pending
	// full is the batches that reached their bound, to publish now.
	full []*pending
	// order is the batches by first record: published in that order, a
	// subject's batches keep the order of records recorded at one time.
	order []*pending
}

// pending is one subject's batch being built.
type pending struct {
	subject string
	buf     []byte
	records int
	// data is the records' bytes as counted in writer.queued.
	data int64
	full bool
	// ack is the batch's token in its publish's reply subject, and sent
	// when it was taken to be published (both set under writer.mu).
	ack  uint64
	sent time.Time
	// hashes is the records' id hashes, in order (a batch).
	hashes []uint32
	// index is the subject's index this message is a chunk of (nil for
	// a batch); chunk is what it lists, expect the subject's last
	// sequence it is published against.
	index  *subjectIndex
	chunk  *index
	expect uint64
}

// writer coalesces records per subject and publishes each subject's
// records as one HistoryBatch message, FlushInterval after the first
// record of a round or as soon as a batch reaches its size bound. Record
// appends under a mutex held for the append only, and wakes the writer's
// goroutine only to start a round or publish a full batch (a wake-up per
// record would cost delivery more than the batching saves); the goroutine
// publishes, outside the lock, and the stream acks each batch to the
// writer's reply subject. Until that ack a batch is unsettled: readers
// see unsettled records through unsettled, so an event never drops out
// of sight between leaving its lane and being stored. Records past
// maxQueued bytes (queued or unsettled: NATS slow or gone) are dropped
// and counted in rivora_history_record_errors_total, so delivery never
// waits for the history and its memory is bounded.
type writer struct {
	nc *nats.Conn
	// now is the history's clock: a subject's bucket is by it.
	now func() time.Time
	// countSubject is the count of a subject's messages in its stream.
	countSubject         func(ctx context.Context, subject string) (uint64, error)
	every                time.Duration
	maxBytes, maxRecords int
	maxQueued            int64

	mu      sync.Mutex
	cur     round // guarded by mu
	stopped bool  // guarded by mu
	// inAir is the batches taken from a round and not yet acked, by ack
	// token; nextAck is the next token (both guarded by mu).
	inAir   map[uint64]*pending
	nextAck uint64
	// settled is signalled (with mu) when batches leave inAir.
	settled *sync.Cond
	// free is the buffers of batches the stream acked, for the next
	// round's batches (guarded by mu): a fresh buffer per batch, grown
	// record by record, cost delivery more than the records in it.
	free [][]byte

	// indexes is the subjects being indexed (guarded by mu): those with
	// batches published, until their index is stored (index.go).
	indexes map[string]*subjectIndex

	// ackPrefix is the reply subject prefix the stream's acks come to.
	ackPrefix string

	kick  chan struct{}
	flush chan chan struct{}
	// done is closed when run returned.
	done chan struct{}
	// queued is the bytes recorded and not yet acked (or dropped).
	queued atomic.Int64
	// published counts the messages published.
	published atomic.Uint64
}

// newWriter makes a writer; run starts it.
func newWriter(nc *nats.Conn, cfg Config, now func() time.Time, countSubject func(context.Context, string) (uint64, error)) *writer {
	w := &writer{
		nc: nc, now: now, countSubject: countSubject, every: orDefault(cfg.FlushInterval, DefaultFlushInterval),
		maxBytes: orDefault(cfg.MaxBatchBytes, DefaultMaxBatchBytes), maxRecords: orDefault(cfg.MaxBatchRecords, DefaultMaxBatchRecords),
		maxQueued: int64(orDefault(cfg.MaxQueuedBytes, DefaultMaxQueuedBytes)),
		cur:       round{bySubject: make(map[string]*pending)},
		inAir:     make(map[uint64]*pending),
		indexes:   make(map[string]*subjectIndex),
		ackPrefix: nc.NewRespInbox() + ".",
		kick:      make(chan struct{}, 1), flush: make(chan chan struct{}), done: make(chan struct{}),
	}
	w.settled = sync.NewCond(&w.mu)
	return w
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// add appends a record to its subject's batch, or drops it when the
// writer is behind or closed.
func (w *writer) add(it item) {
	n := int64(len(it.data))
	w.mu.Lock()
	if w.stopped || w.queued.Load()+n > w.maxQueued {
		w.mu.Unlock()
		recordErrors.Inc()
		return
	}
	w.queued.Add(n)
	started := len(w.cur.bySubject) == 0 && len(w.cur.full) == 0
	full := w.appendLocked(it)
	w.mu.Unlock()
	if started || full {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// appendLocked adds a record to its subject's batch and reports whether
// the batch reached its bound (and moved to the full list).
func (w *writer) appendLocked(it item) bool {
	p := w.cur.bySubject[it.subject]
	if p == nil {
		p = &pending{subject: it.subject, buf: w.newBufLocked()}
		w.cur.bySubject[it.subject] = p
		w.cur.order = append(w.cur.order, p)
	}
	p.buf = protowire.AppendTag(p.buf, it.field, protowire.BytesType)
	p.buf = protowire.AppendBytes(p.buf, it.data)
	if it.field == outcomesField {
		// Unpacked, one element after each outcome: the same field to a
		// decoder, and appendable.
		p.buf = protowire.AppendTag(p.buf, outcomeTimesField, protowire.VarintType)
		p.buf = protowire.AppendVarint(p.buf, uint64(it.at))
	}
	p.records++
	p.hashes = append(p.hashes, it.hash)
	p.data += int64(len(it.data))
	if len(p.buf) < w.maxBytes && p.records < w.maxRecords {
		return false
	}
	delete(w.cur.bySubject, it.subject)
	p.full = true
	w.cur.full = append(w.cur.full, p)
	return true
}

// maxFreeBufs bounds the buffers kept for reuse.
const maxFreeBufs = 64

// newBufLocked returns an empty buffer for a batch, a reused one when
// there is one (with mu held).
func (w *writer) newBufLocked() []byte {
	if n := len(w.free); n > 0 {
		buf := w.free[n-1]
		w.free = w.free[:n-1]
		return buf
	}
	return make([]byte, 0, min(w.maxBytes, 4<<10))
}

// take removes the full batches, and with all every batch, from the
// round; more reports whether batches remain.
func (w *writer) take(all bool) (out []*pending, more bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out, w.cur.full = w.cur.full, nil
	if all {
		for _, p := range w.cur.order {
			if !p.full {
				out = append(out, p)
			}
		}
		clear(w.cur.bySubject)
		w.cur.order = w.cur.order[:0]
	} else {
		w.cur.order = slices.DeleteFunc(w.cur.order, func(p *pending) bool { return p.full })
	}
	for _, p := range out {
		w.publishingLocked(p)
	}
	out = w.dueIndexesLocked(out)
	// In the air from here, in the same critical section: a reader never
	// sees a batch in neither place.
	now := time.Now()
	for _, p := range out {
		p.ack, p.sent = w.nextAck, now
		w.nextAck++
		w.inAir[p.ack] = p
	}
	return out, len(w.cur.bySubject) > 0
}

// publishingLocked counts batch p as unsettled in its subject's index.
func (w *writer) publishingLocked(p *pending) {
	s := w.indexes[p.subject]
	if s == nil {
		end := bucketEnd(p.subject)
		if end.IsZero() {
			return
		}
		s = &subjectIndex{subject: p.subject, due: end.Add(indexGrace)}
		w.indexes[p.subject] = s
	}
	s.unsettled++
}

// dueIndexesLocked appends the next index message of each subject whose
// bucket is over (by indexGrace), every batch acked, none waiting in the
// round, and no index message of it in the air or to be reread.
func (w *writer) dueIndexesLocked(out []*pending) []*pending {
	now := w.now()
	for subject, s := range w.indexes {
		if !s.dueLocked(now) || w.cur.bySubject[subject] != nil {
			continue
		}
		if len(s.batches) == 0 {
			delete(w.indexes, subject) // indexed (or nothing stored)
			continue
		}
		if !s.counted {
			s.count = true // countAll, then the next round
			continue
		}
		ix := s.nextChunk()
		p := &pending{subject: subject, buf: ix.encode(), index: s, chunk: ix, expect: s.expect}
		s.sending = p
		out = append(out, p)
	}
	return out
}

// unsettled returns the batches of the subjects match accepts that are
// not yet acked by the stream: in the air, then still in the round
// (copied: they grow). A record acked after the call is in the stream.
func (w *writer) unsettled(match func(subject string) bool) [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	var air []*pending
	for _, p := range w.inAir {
		if match(p.subject) {
			air = append(air, p)
		}
	}
	slices.SortFunc(air, func(x, y *pending) int { return cmp.Compare(x.ack, y.ack) })
	out := make([][]byte, 0, len(air))
	for _, p := range air {
		if p.index == nil {
			// Copied too: its buffer is reused once the stream acks it.
			out = append(out, slices.Clone(p.buf))
		}
	}
	for _, p := range w.cur.full {
		if match(p.subject) {
			out = append(out, slices.Clone(p.buf))
		}
	}
	for _, p := range w.cur.order {
		if !p.full && match(p.subject) {
			out = append(out, slices.Clone(p.buf))
		}
	}
	return out
}

// Flush publishes every record added before it was called, and returns
// when the stream has acked them (or ackTimeout passed). It waits for
// run to publish them: call it while run runs (or after it returned).
//
// The batches it stores can make their subjects' indexes due (a bucket
// over, every batch acked): it publishes those too, so that nothing is
// left to publish when it returns unless more is recorded or time moves.
func (w *writer) Flush() {
	for range 8 { // a count, then an index message (per chunk), a round each
		ack := make(chan struct{})
		select {
		case w.flush <- ack:
			<-ack
		case <-w.done:
		}
		w.waitSettled()
		if !w.indexDue() {
			return
		}
	}
}

// indexDue reports whether a subject's next index message is due.
func (w *writer) indexDue() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	for subject, s := range w.indexes {
		if (s.count || s.dueLocked(now)) && w.cur.bySubject[subject] == nil && len(s.batches) > 0 {
			return true
		}
	}
	return false
}

// countAll counts the messages of each subject whose index message is
// due next, for its total (outside the lock: a stream request). A
// failed count leaves the subject without a complete index.
func (w *writer) countAll() {
	w.mu.Lock()
	var todo []*subjectIndex
	for _, s := range w.indexes {
		if s.count {
			todo = append(todo, s)
		}
	}
	w.mu.Unlock()
	for _, s := range todo {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		n, err := w.countSubject(ctx, s.subject)
		cancel()
		w.mu.Lock()
		s.count = false
		if err == nil {
			s.counted, s.total = true, n
		} else {
			delete(w.indexes, s.subject)
			indexErrors.Inc()
		}
		w.mu.Unlock()
	}
}

// waitSettled waits until every batch taken so far is acked, at most
// ackTimeout.
func (w *writer) waitSettled() {
	w.mu.Lock()
	defer w.mu.Unlock()
	mark := w.nextAck
	deadline := time.Now().Add(ackTimeout)
	wake := time.AfterFunc(ackTimeout, func() {
		w.mu.Lock()
		w.settled.Broadcast()
		w.mu.Unlock()
	})
	defer wake.Stop()
	for w.inAirBefore(mark) && time.Now().Before(deadline) {
		w.settled.Wait()
	}
}

// inAirBefore reports whether a batch with a token below mark is unacked
// (with mu held).
func (w *writer) inAirBefore(mark uint64) bool {
	for ack := range w.inAir {
		if ack < mark {
			return true
		}
	}
	return false
}

// run publishes the records added until ctx ends, then stops the writer:
// it publishes what is left and waits (ackTimeout at most) for the
// stream's acks; records added after that are dropped.
func (w *writer) run(ctx context.Context) error {
	defer close(w.done)
	acks, err := w.nc.Subscribe(w.ackPrefix+"*", w.onAck)
	if err != nil {
		w.mu.Lock()
		w.stopped = true
		w.mu.Unlock()
		return fmt.Errorf("subscribe to the history's acks: %w", err)
	}
	defer func() { _ = acks.Unsubscribe() }()
	timer := time.NewTimer(w.every)
	timer.Stop()
	armed := false
	sweep := time.NewTicker(ackTimeout)
	defer sweep.Stop()
	for {
		select {
		case <-sweep.C:
			w.forgetUnacked(time.Now().Add(-ackTimeout))
		case <-w.kick:
			full, more := w.take(false)
			w.publishAll(full)
			w.rereadAll()
			w.countAll()
			if more && !armed {
				timer.Reset(w.every)
				armed = true
			}
		case <-timer.C:
			armed = false
			w.publishAll(w.takeAll())
			w.rereadAll()
			w.countAll()
		case ack := <-w.flush:
			w.publishAll(w.takeAll())
			w.rereadAll()
			w.countAll()
			close(ack)
		case <-ctx.Done():
			w.mu.Lock()
			w.stopped = true
			w.mu.Unlock()
			w.publishAll(w.takeAll())
			w.waitSettled()
			return nil
		}
	}
}

func (w *writer) takeAll() []*pending {
	out, _ := w.take(true)
	return out
}

func (w *writer) publishAll(batches []*pending) {
	for _, p := range batches {
		w.publish(p)
	}
}

// rereadAll reads, for each subject whose index message found another
// message after the one it expected (or whose ack was lost), the
// subject's last message. An index (another agent's, or its own stored
// though its ack was lost) is chained to. Another agent's batch means
// that agent has not written its index yet: it is read again a little
// later (the agent whose batch is last stores its index first, and the
// others chain to it), at most maxIndexTries times in all; then, or on
// an error, the subject is left without a complete index (its lookups
// read it whole).
func (w *writer) rereadAll() {
	now := time.Now()
	w.mu.Lock()
	var todo []*subjectIndex
	for _, s := range w.indexes {
		if s.reread && !now.Before(s.rereadAt) {
			todo = append(todo, s)
		}
	}
	w.mu.Unlock()
	for _, s := range todo {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, found, err := getMsg(ctx, w.nc, streamOf(s.subject), directGet{LastFor: s.subject})
		cancel()
		ix, isIx := decodedIndex{}, false
		if err == nil && found {
			ix, isIx = decodeIndex(r.data)
		}
		w.mu.Lock()
		if s.retry != nil && !ix.lists(s.retry) {
			// Not stored: its batches go first in the next chunk.
			s.batches = append(slices.Clip(s.retry.batches), s.batches...)
		}
		s.retry = nil
		switch {
		case isIx:
			s.reread = false
			s.prev = &prevIndex{seq: r.seq, covered: ix.covered, seeAlso: ix.seeAlso}
			s.expect = r.seq
		case err == nil && found && s.tries < maxIndexTries:
			s.tries++
			s.rereadAt = now.Add(indexRetryDelay)
		default:
			delete(w.indexes, s.subject)
			indexErrors.Inc()
		}
		w.mu.Unlock()
	}
}

// publish sends one batch without waiting for the store's ack (onAck
// settles it): history is for people, and must not slow delivery down.
func (w *writer) publish(p *pending) {
	msg := &nats.Msg{Subject: p.subject, Reply: w.ackPrefix + strconv.FormatUint(p.ack, 10), Data: p.buf}
	if p.index != nil {
		msg.Header = nats.Header{jetstream.ExpectedLastSubjSeqHeader: []string{strconv.FormatUint(p.expect, 10)}}
	}
	if err := w.nc.PublishMsg(msg); err != nil {
		w.settle(p.ack, ackAnswer{failed: true})
		return
	}
	w.published.Add(1)
}

// onAck settles the batch a stream's ack (or error) answers.
func (w *writer) onAck(msg *nats.Msg) {
	ack, err := strconv.ParseUint(strings.TrimPrefix(msg.Subject, w.ackPrefix), 10, 64)
	if err != nil {
		return
	}
	var answer struct {
		Seq   uint64 `json:"seq"`
		Error *struct {
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	failed := json.Unmarshal(msg.Data, &answer) != nil || answer.Error != nil
	wrongLast := answer.Error != nil && answer.Error.ErrCode == errCodeWrongLastSequence
	w.settle(ack, ackAnswer{seq: answer.Seq, failed: failed, wrongLast: wrongLast})
}

// errCodeWrongLastSequence is JetStream's answer to a publish whose
// expected last subject sequence is not the subject's last.
const errCodeWrongLastSequence = 10071

// ackAnswer is what the stream answered to a publish: its sequence, or
// that it failed (wrongLast: its expected last sequence was not). Zero
// for an ack lost.
type ackAnswer struct {
	seq               uint64
	failed, wrongLast bool
}

// settle ends a message's time in the air; a failed batch's records are
// counted as errors.
func (w *writer) settle(ack uint64, a ackAnswer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.inAir[ack]
	if p == nil {
		return
	}
	delete(w.inAir, ack)
	if p.index == nil && len(w.free) < maxFreeBufs && cap(p.buf) <= 2*w.maxBytes {
		// Published (NATS copied it) and out of the readers' sight.
		w.free = append(w.free, p.buf[:0])
	}
	// Counted before the waiters wake: Flush and Run return settled
	// batches fully accounted.
	w.queued.Add(-p.data)
	if a.failed {
		recordErrors.Add(float64(p.records))
	}
	w.settledLocked(p, a)
	w.settled.Broadcast()
}

// forgetUnacked stops waiting for acks of batches sent before cutoff: the
// ack was lost, and whether the batch was stored cannot be told (not
// counted as an error).
func (w *writer) forgetUnacked(cutoff time.Time) {
	var late []uint64
	w.mu.Lock()
	for ack, p := range w.inAir {
		if p.sent.Before(cutoff) {
			late = append(late, ack)
		}
	}
	w.mu.Unlock()
	for _, ack := range late {
		w.settle(ack, ackAnswer{})
	}
}

// settledLocked applies a message's ack to its subject's index: a stored
// batch is listed; a stored index message is the next one's predecessor;
// an index message refused because another message came after the one it
// expected, or whose ack was lost, has the subject's last message reread.
func (w *writer) settledLocked(p *pending, a ackAnswer) {
	if p.index == nil {
		if s := w.indexes[p.subject]; s != nil {
			s.unsettled--
			if !a.failed && a.seq > 0 {
				s.batches = append(s.batches, indexedBatch{seq: a.seq, hashes: p.hashes})
				s.expect = max(s.expect, a.seq)
			}
		}
		return
	}
	s := p.index
	s.sending = nil
	if w.indexes[s.subject] != s {
		return // given up
	}
	if !a.failed && a.seq > 0 {
		s.prev = &prevIndex{seq: a.seq, covered: p.chunk.covered, seeAlso: p.chunk.seeAlso}
		s.expect = a.seq
		return
	}
	// Not stored, or not known to be (its ack lost): the reread tells.
	if (a.wrongLast || !a.failed) && s.tries < maxIndexTries {
		s.reread, s.retry, s.rereadAt = true, p.chunk, time.Time{}
		s.tries++
		return
	}
	delete(w.indexes, s.subject)
	indexErrors.Inc()
}
