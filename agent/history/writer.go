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
}

// writer coalesces records per subject and publishes each subject's
// records as one HistoryBatch message, FlushInterval after the first
// record of a round or as soon as a batch reaches its size bound. Record
// appends under a mutex held for the append only, and wakes the writer's
// goroutine only to start a round or publish a full batch (a wake-up per
// record would cost delivery more than the batching saves); the goroutine
// publishes, outside the lock. Records past maxQueued bytes (NATS slow or
// gone) are dropped and counted in rivora_history_record_errors_total, so
// delivery never waits for the history and its memory is bounded.
type writer struct {
	nc                   *nats.Conn
	every                time.Duration
	maxBytes, maxRecords int
	maxQueued            int64

	mu      sync.Mutex
	cur     round // guarded by mu
	stopped bool  // guarded by mu

	kick  chan struct{}
	flush chan chan struct{}
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	// queued is the bytes recorded and not yet published (or dropped).
	queued atomic.Int64
	// published counts the messages published.
	published atomic.Uint64
}

func newWriter(nc *nats.Conn, cfg Config) *writer {
	w := &writer{
		nc: nc, every: orDefault(cfg.FlushInterval, DefaultFlushInterval),
		maxBytes: orDefault(cfg.MaxBatchBytes, DefaultMaxBatchBytes), maxRecords: orDefault(cfg.MaxBatchRecords, DefaultMaxBatchRecords),
		maxQueued: int64(orDefault(cfg.MaxQueuedBytes, DefaultMaxQueuedBytes)),
		cur:       round{bySubject: make(map[string]*pending)},
		kick:      make(chan struct{}, 1), flush: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
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
		p = &pending{subject: it.subject, buf: make([]byte, 0, min(w.maxBytes, 4<<10))}
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
	p.data += int64(len(it.data))
	if len(p.buf) < w.maxBytes && p.records < w.maxRecords {
		return false
	}
	delete(w.cur.bySubject, it.subject)
	p.full = true
	w.cur.full = append(w.cur.full, p)
	return true
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
	}
	return out, len(w.cur.bySubject) > 0
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
	w.once.Do(func() {
		w.mu.Lock()
		w.stopped = true
		w.mu.Unlock()
		close(w.stop)
	})
	<-w.done
}

func (w *writer) run() {
	defer close(w.done)
	timer := time.NewTimer(w.every)
	timer.Stop()
	armed := false
	for {
		select {
		case <-w.kick:
			full, more := w.take(false)
			w.publishAll(full)
			if more && !armed {
				timer.Reset(w.every)
				armed = true
			}
		case <-timer.C:
			armed = false
			w.publishAll(w.takeAll())
		case ack := <-w.flush:
			w.publishAll(w.takeAll())
			close(ack)
		case <-w.stop:
			w.publishAll(w.takeAll())
			return
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
