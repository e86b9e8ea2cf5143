package history

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
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
)

// queueLen is how many records Record can hand over before the writer
// takes them: enough for a flush interval at 50k records/s.
const queueLen = 1 << 13

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
}

// round is the batches built since the last flush.
type round struct {
	bySubject map[string]*pending
	order     []*pending
}

// pending is one subject's batch being built.
type pending struct {
	subject string
	buf     []byte
	records int
	// data is the records' bytes as counted in writer.queued.
	data int64
}

// writer coalesces records per subject and publishes each subject's
// records as one HistoryBatch message, at FlushInterval after the first
// record of a round or as soon as a batch reaches its size bound. Its
// goroutine owns the batches; Record only hands records over, and drops
// (counting rivora_history_record_errors_total) when the writer is behind,
// so delivery never waits for the history and the memory held is bounded
// by maxQueued.
type writer struct {
	nc                   *nats.Conn
	every                time.Duration
	maxBytes, maxRecords int
	maxQueued            int64

	in      chan item
	flush   chan chan struct{}
	stop    chan struct{}
	done    chan struct{}
	closed  sync.Once
	stopped atomic.Bool
	// queued is the bytes handed over and not yet published (or dropped).
	queued atomic.Int64
	// published counts the messages published.
	published atomic.Uint64
}

func newWriter(nc *nats.Conn, cfg Config) *writer {
	w := &writer{
		nc: nc, every: orDefault(cfg.FlushInterval, DefaultFlushInterval),
		maxBytes: orDefault(cfg.MaxBatchBytes, DefaultMaxBatchBytes), maxRecords: orDefault(cfg.MaxBatchRecords, DefaultMaxBatchRecords),
		maxQueued: int64(orDefault(cfg.MaxQueuedBytes, DefaultMaxQueuedBytes)),
		in:        make(chan item, queueLen), flush: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go w.run()
	return w
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// add hands a record to the writer, or drops it when the writer is behind
// or closed.
func (w *writer) add(it item) {
	n := int64(len(it.data))
	if w.stopped.Load() {
		recordErrors.Inc()
		return
	}
	if w.queued.Add(n) > w.maxQueued {
		w.queued.Add(-n)
		recordErrors.Inc()
		return
	}
	select {
	case w.in <- it:
	default:
		w.queued.Add(-n)
		recordErrors.Inc()
	}
}

// Flush publishes every record added before it was called, and returns
// when they are handed to NATS (not yet stored: the publish is not acked).
func (w *writer) Flush() {
	ack := make(chan struct{})
	select {
	case w.flush <- ack:
		<-ack
	case <-w.done:
	}
}

// Close flushes and stops the writer; records added after it are dropped.
func (w *writer) Close() {
	w.closed.Do(func() { w.stopped.Store(true); close(w.stop) })
	<-w.done
}

func (w *writer) run() {
	defer close(w.done)
	batches := &round{bySubject: make(map[string]*pending)}
	timer := time.NewTimer(w.every)
	timer.Stop()
	for {
		select {
		case it := <-w.in:
			if len(batches.order) == 0 {
				timer.Reset(w.every)
			}
			w.append(batches, it)
		case <-timer.C:
			w.publishAll(batches)
		case ack := <-w.flush:
			w.drain(batches)
			w.publishAll(batches)
			close(ack)
		case <-w.stop:
			w.drain(batches)
			w.publishAll(batches)
			return
		}
	}
}

// drain takes every record already handed over.
func (w *writer) drain(batches *round) {
	for {
		select {
		case it := <-w.in:
			w.append(batches, it)
		default:
			return
		}
	}
}

// append adds a record to its subject's batch, publishing the batch when
// it reaches its size bound.
func (w *writer) append(batches *round, it item) {
	p := batches.bySubject[it.subject]
	if p == nil {
		p = &pending{subject: it.subject, buf: make([]byte, 0, min(w.maxBytes, 4<<10))}
		batches.bySubject[it.subject] = p
		batches.order = append(batches.order, p)
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
	p.data += int64(len(it.data))
	if len(p.buf) >= w.maxBytes || p.records >= w.maxRecords {
		w.publish(p)
		delete(batches.bySubject, it.subject)
		p.buf = nil // publishAll skips it
	}
}

// publishAll publishes the round's batches in the order of their first
// records, so the messages' times order records of different subjects
// (to within a flush interval when they interleave).
func (w *writer) publishAll(batches *round) {
	for _, p := range batches.order {
		if p.buf != nil {
			w.publish(p)
		}
	}
	clear(batches.bySubject)
	batches.order = batches.order[:0]
}

// publish sends one batch without waiting for the store's ack: history is
// for people, and must not slow delivery down.
func (w *writer) publish(p *pending) {
	if err := w.nc.Publish(p.subject, p.buf); err != nil {
		recordErrors.Add(float64(p.records))
	} else {
		w.published.Add(1)
	}
	w.queued.Add(-p.data)
}
