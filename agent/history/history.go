// Package history keeps each event's attempt outcomes and, once delivered,
// the event itself, so "where is my event?", "what was delivered?" and
// "send it again" have answers after the event left its lane. Records are
// written asynchronously and expire after the retention period.
//
// Its subjects grow with time, never with events: NATS keeps an index
// entry per subject, and one subject per event (the EVENTS stream before
// it) cost ~320 B of memory for every retained event. Records go to
//
//	history.o.<h>.<w>.<a>.<s>   outcome records (EventOutcome, no payload), stream HISTORY
//	history.b.<h>.<w>.<a>.<s>   the delivered event, payload included, stream HISTORY_BODIES
//
// w is the bucket the record is written in (unix time / 5 s for
// outcomes, / 1 min for delivered events), h the hour of w (so a listing
// asks for an hour's subjects at once); s is fnv-1a(id) mod Shards; a is
// the event's acceptance bucket (same width), read from its id, so that a
// lookup by id knows it:
//
//   - the bucket of the id's time when the id is a UUIDv7 whose time is
//     in the bucket the event was accepted in or the one before (ids the
//     agent assigns, and those derived from a UUIDv7 idempotency key made
//     moments before publishing);
//   - "u" for any other UUIDv7 id: a key's time is its publisher's
//     choice, and were it trusted, keys of random times would make a
//     subject per event (kept for the retention); a resent or replayed
//     event, accepted again long after its id was made, lands here too;
//   - "k" for any other id (a client's idempotency key can be any
//     string).
//
// So no client input sets a subject beyond the current bucket or the one
// before: a is one of at most two buckets per acceptance bucket, "u" or
// "k".
//
// A message is a batch (HistoryBatch): the records one subject received
// over a flush interval (~10 ms), or fewer when the batch reaches ~64 KiB
// or 512 records first. Record appends to its subject's batch (a mutex
// held for the append) and drops the record (counted in
// rivora_history_record_errors_total) when 16 MiB already wait, NATS
// being slow or gone, so delivery never waits for the history and its
// memory is bounded; the writer's goroutine publishes the batches. The
// store, like a lookup, pays per message: one message per subject and
// interval instead of two per delivered event is what keeps delivery as
// fast as without a history. Delivery never waits for a record to be
// stored (a crash loses the records of the last flush interval), but the
// stream acks each batch to the writer, and until then Lookup and Body
// read the batch from the writer: an event's records are visible from
// the moment they are recorded, which the owner does before the lane lets
// the event go. When Run ends it publishes what is buffered.
//
// A subject holds at most one bucket of writes, so it sits in one or two
// message blocks: the filestore loads every block between a subject's
// first and last message to read it, and a subject spanning hours would
// load hours of blocks. That is why w is in the subject, and a alone
// (retries come hours after acceptance) is not enough. Reading a subject
// whole still walks, message by message, every message written in its
// bucket (all shards interleave in the blocks): that walk (~250 ns a
// message) and the messages returned (~1.5 µs each, read without
// headers, then searched for the id's bytes before a record is decoded)
// are the cost of a lookup without an index. So buckets are short, and
// the bodies, which lookups never read, have their own stream. The subject count is about retention /
// BucketWidth × Shards (× the acceptance buckets drained together in a
// backlog), ~200 B of memory each however many events they hold; the
// bodies' 1-minute buckets add ~40k subjects a week (e2e/bench history
// measures lookups and memory).
//
// A lookup by id lists the subjects history.o.*.*.<a>.<s> (typically one
// or two: the acceptance bucket and the next, more when it was retried)
// and, for a UUIDv7 id, history.o.*.*.u.<s> (empty unless keys' times
// were far from their acceptance, or events were resent or replayed).
// A subject whose bucket is over carries an index as its last message
// (index.go): a lookup first gets the last message of every subject
// matching those filters in one multi-last request and, when each is a
// complete index, gets only the batches they name that may hold the id
// — two requests instead of the walk above. Otherwise it lists the
// subjects with their counts; a subject without a complete index (its
// bucket still open, written before the index, a crash before its
// index) is read whole with a direct-get batch. A listing orders records by the
// time each was recorded, which its batch carries
// (HistoryBatch.outcome_times): the records of one flush interval sit in
// several subjects' batches, so the messages' times would not do.
package history

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Streams: outcomes, and delivered events (read only to resend).
const (
	Stream       = "HISTORY"
	BodiesStream = "HISTORY_BODIES"
)

// oldStream held one subject per event before HISTORY (pre-1.0).
const oldStream = "EVENTS"

// DefaultRetention is how long outcomes and delivered events are kept.
const DefaultRetention = 7 * 24 * time.Hour

// BucketWidth is the time one outcome subject's records are written over.
const BucketWidth = 5 * time.Second

// BodyBucketWidth is the same for delivered events: read only to resend
// one, they can take a longer walk, for 12x fewer subjects.
const BodyBucketWidth = time.Minute

// Shards splits each bucket's records by event id, so a lookup gets
// about 1/Shards of the records of its event's bucket.
const Shards = 4

// Keyed is the acceptance token of an event whose id is not a UUIDv7 (a
// client's idempotency key).
const Keyed = "k"

// Unbucketed is the acceptance token of an event whose id is a UUIDv7 of
// a time outside its acceptance bucket and the one before: a key's time
// chosen by its publisher, or an event resent or replayed.
const Unbucketed = "u"

// DefaultMaxListRecords bounds the records one List reads.
const DefaultMaxListRecords = 1_000_000

const (
	outcomePrefix = "history.o."
	bodyPrefix    = "history.b."
)

var recordErrors = promauto.NewCounter(prometheus.CounterOpts{
	Name: "rivora_history_record_errors_total",
	Help: "Event outcomes or delivered events that could not be written to the HISTORY stream.",
})

var indexErrors = promauto.NewCounter(prometheus.CounterOpts{
	Name: "rivora_history_index_errors_total",
	Help: "History subjects left without a complete index (another writer's record after it, a refused publish): their lookups read the whole subject.",
})

// lookupReads counts the subjects lookups read, by how: through the
// subject's index, or whole (no complete index).
var lookupReads = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "rivora_history_lookup_subjects_total",
	Help: "History subjects read by event lookups, by how (read=index: through its index; read=scan: whole, it has no complete index).",
}, []string{"read"})

var (
	readByIndex = lookupReads.WithLabelValues("index")
	readWhole   = lookupReads.WithLabelValues("scan")
)

// History owns the HISTORY and HISTORY_BODIES streams.
type History struct {
	nc     *nats.Conn
	stream jetstream.Stream
	bodies jetstream.Stream
	now    func() time.Time
	// retention bounds how far back List searches.
	retention time.Duration
	w         *writer
}

// Config configures the history.
type Config struct {
	// Retention is how long records are kept (DefaultRetention when 0).
	Retention time.Duration
	// Replicas is the stream's replica count in a cell (0 means 1).
	Replicas int
	// FlushInterval, MaxBatchBytes and MaxBatchRecords bound how long and
	// how much a subject's records are batched before they are published
	// (DefaultFlushInterval etc. when 0); MaxQueuedBytes bounds the
	// records waiting to be published, past which they are dropped.
	FlushInterval                  time.Duration
	MaxBatchBytes, MaxBatchRecords int
	MaxQueuedBytes                 int
}

// New creates (or updates) the HISTORY and HISTORY_BODIES streams. The
// EVENTS stream of earlier versions is deleted: its per-event history is
// dropped.
func New(ctx context.Context, js jetstream.JetStream, cfg Config, log *slog.Logger) (*History, error) {
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if err := dropOld(ctx, js, log); err != nil {
		return nil, err
	}
	create := func(name, subjects, what string) (jetstream.Stream, error) {
		st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        name,
			Description: what,
			Subjects:    []string{subjects},
			Storage:     jetstream.FileStorage,
			Replicas:    max(cfg.Replicas, 1),
			MaxAge:      cfg.Retention,
			AllowDirect: true,
		})
		if err != nil {
			return nil, fmt.Errorf("create %s stream: %w", name, err)
		}
		return st, nil
	}
	h := &History{nc: js.Conn(), now: time.Now, retention: cfg.Retention}
	var err error
	if h.stream, err = create(Stream, outcomePrefix+">", "Attempt outcomes by write bucket, for `rivoractl events get/list`."); err != nil {
		return nil, err
	}
	if h.bodies, err = create(BodiesStream, bodyPrefix+">", "Delivered events by write bucket, for `rivoractl events resend`."); err != nil {
		return nil, err
	}
	h.w = newWriter(h.nc, cfg, func() time.Time { return h.now() }, h.countSubject)
	return h, nil
}

func dropOld(ctx context.Context, js jetstream.JetStream, log *slog.Logger) error {
	err := js.DeleteStream(ctx, oldStream)
	switch {
	case err == nil:
		log.Info("dropped the old per-event history (pre-1.0 format change); events delivered before this version are no longer in `events get`", "stream", oldStream)
		return nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil
	}
	return fmt.Errorf("drop the old %s stream: %w", oldStream, err)
}

// AcceptBucket is the acceptance token of eventID's outcome records for
// the event accepted at acceptedAt: its UUIDv7 time in buckets when that
// is acceptedAt's bucket or the one before, else Unbucketed; Keyed when
// the id is not a UUIDv7.
func AcceptBucket(eventID string, acceptedAt time.Time) string {
	return acceptToken(eventID, acceptedAt, BucketWidth)
}

func acceptToken(eventID string, acceptedAt time.Time, width time.Duration) string {
	ms, ok := v7Millis(eventID)
	if !ok {
		return Keyed
	}
	a, accepted := ms/width.Milliseconds(), acceptedAt.UnixMilli()/width.Milliseconds()
	if acceptedAt.IsZero() || (a != accepted && a != accepted-1) {
		return Unbucketed
	}
	return strconv.FormatInt(a, 10)
}

// idTokens are the acceptance tokens eventID's records can have: its
// time's bucket or Unbucketed for a UUIDv7, else Keyed.
func idTokens(eventID string, width time.Duration) []string {
	ms, ok := v7Millis(eventID)
	if !ok {
		return []string{Keyed}
	}
	return []string{strconv.FormatInt(ms/width.Milliseconds(), 10), Unbucketed}
}

// v7Millis is the unix milliseconds of a UUIDv7 id.
func v7Millis(eventID string) (int64, bool) {
	u, err := uuid.Parse(eventID)
	if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 {
		return 0, false
	}
	return int64(u[0])<<40 | int64(u[1])<<32 | int64(u[2])<<24 | int64(u[3])<<16 | int64(u[4])<<8 | int64(u[5]), true
}

// Shard is an event id's shard, fnv-1a(id) mod Shards.
func Shard(eventID string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(eventID))
	return int(h.Sum32() % Shards)
}

// Bucket is t in outcome buckets (unix time / BucketWidth).
func Bucket(t time.Time) int64 { return bucketOf(t, BucketWidth) }

func bucketOf(t time.Time, width time.Duration) int64 { return t.Unix() / int64(width/time.Second) }

// BucketStart is when outcome bucket w begins.
func BucketStart(w int64) time.Time { return time.Unix(w*int64(BucketWidth/time.Second), 0).UTC() }

// hourOf is the unix hour bucket w (of width) is in.
func hourOf(w int64, width time.Duration) int64 { return w * int64(width/time.Second) / 3600 }

// OutcomeSubject is where an outcome of eventID, accepted at acceptedAt,
// written at t goes.
func OutcomeSubject(t time.Time, eventID string, acceptedAt time.Time) string {
	return subject(outcomePrefix, BucketWidth, t, eventID, acceptedAt)
}

// BodySubject is where eventID's delivered event, accepted at acceptedAt
// and written at t, goes (in BodyBucketWidth buckets).
func BodySubject(t time.Time, eventID string, acceptedAt time.Time) string {
	return subject(bodyPrefix, BodyBucketWidth, t, eventID, acceptedAt)
}

func subject(prefix string, width time.Duration, t time.Time, eventID string, acceptedAt time.Time) string {
	w := bucketOf(t, width)
	return prefix + strconv.FormatInt(hourOf(w, width), 10) + "." + strconv.FormatInt(w, 10) + "." + acceptToken(eventID, acceptedAt, width) + "." + strconv.Itoa(Shard(eventID))
}

// idSubjects are the filters of every subject (of buckets of width) that
// can hold eventID's records under prefix.
func idSubjects(prefix string, width time.Duration, eventID string) []string {
	var out []string
	for _, a := range idTokens(eventID, width) {
		out = append(out, prefix+"*.*."+a+"."+strconv.Itoa(Shard(eventID)))
	}
	return out
}

// Record appends an outcome to its subject's next batch: history is for
// people, and must not slow delivery down.
func (h *History) Record(o *rivorav1.EventOutcome) {
	now := h.now()
	h.add(item{subject: OutcomeSubject(now, o.GetEventId(), acceptedAt(o.GetAcceptedAt())), field: outcomesField, at: now.UnixNano(), hash: idHash(o.GetEventId())}, o)
}

// RecordBody keeps a delivered event, payload included, for a resend.
func (h *History) RecordBody(ev *rivorav1.Event) {
	h.add(item{subject: BodySubject(h.now(), ev.GetEventId(), acceptedAt(ev.GetAcceptedAt())), field: eventsField, hash: idHash(ev.GetEventId())}, ev)
}

// acceptedAt is a record's acceptance time (zero when it has none).
func acceptedAt(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func (h *History) add(it item, m proto.Message) {
	// Encoded here, not in the writer: the caller may reuse m. Into a
	// scratch buffer: the writer copies the record into its batch.
	scratch := encodeBufs.Get().(*[]byte)
	data, err := proto.MarshalOptions{}.MarshalAppend((*scratch)[:0], m)
	if err == nil {
		it.data = data
		h.w.add(it)
	} else {
		recordErrors.Inc()
	}
	if cap(data) <= 64<<10 {
		*scratch = data[:0]
		encodeBufs.Put(scratch)
	}
}

// encodeBufs are scratch buffers for encoding records.
var encodeBufs = sync.Pool{New: func() any { return new([]byte) }}

// eachOutcome calls each with every outcome of a batch and when it was
// recorded (at, the batch's time, when the batch has no times), oldest
// first.
func eachOutcome(batch []byte, at time.Time, each func(data []byte, at time.Time)) error {
	var records [][]byte
	var times []int64
	for len(batch) > 0 {
		num, typ, n := protowire.ConsumeTag(batch)
		if n < 0 {
			return protowire.ParseError(n)
		}
		batch = batch[n:]
		var v []byte
		switch {
		case num == outcomesField && typ == protowire.BytesType:
			v, n = protowire.ConsumeBytes(batch)
			records = append(records, v)
		case num == outcomeTimesField && typ == protowire.VarintType:
			var t uint64
			t, n = protowire.ConsumeVarint(batch)
			times = append(times, int64(t))
		case num == outcomeTimesField && typ == protowire.BytesType: // packed
			if v, n = protowire.ConsumeBytes(batch); n >= 0 {
				var err error
				if times, err = appendPacked(times, v); err != nil {
					return err
				}
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, batch)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		batch = batch[n:]
	}
	for i, rec := range records {
		t := at
		if i < len(times) {
			t = time.Unix(0, times[i])
		}
		each(rec, t)
	}
	return nil
}

func appendPacked(times []int64, packed []byte) ([]int64, error) {
	for len(packed) > 0 {
		v, n := protowire.ConsumeVarint(packed)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		times, packed = append(times, int64(v)), packed[n:]
	}
	return times, nil
}

// Run writes the records recorded, in batches, until ctx ends; then it
// publishes what is left, waits (a few seconds at most) for the stream to
// store it, and returns. Records recorded after it returned are dropped.
// Its owner calls it once.
func (h *History) Run(ctx context.Context) error { return h.w.run(ctx) }

// Flush publishes the records recorded so far and returns once the
// stream has stored them (at most a few seconds when acks are lost). It
// waits for Run.
func (h *History) Flush() { h.w.Flush() }

// eachRecord calls each with the encoding of every record under field in
// a HistoryBatch, oldest first.
func eachRecord(batch []byte, field protowire.Number, each func([]byte) error) error {
	for len(batch) > 0 {
		num, typ, n := protowire.ConsumeTag(batch)
		if n < 0 {
			return protowire.ParseError(n)
		}
		batch = batch[n:]
		if num != field || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, batch); n < 0 {
				return protowire.ParseError(n)
			}
			batch = batch[n:]
			continue
		}
		rec, n := protowire.ConsumeBytes(batch)
		if n < 0 {
			return protowire.ParseError(n)
		}
		batch = batch[n:]
		if err := each(rec); err != nil {
			return err
		}
	}
	return nil
}

// Lookup returns an event's outcomes, oldest first (nil when none). It
// reads the subjects of the event's acceptance bucket and shard, one per
// bucket its records were written in: through the subject's index (its
// last message, then the batches it names that may hold the id), or,
// without a complete index, walking that bucket's records. For an id
// that is not a UUIDv7 (Keyed) it reads the shard of every bucket a keyed
// event was written in, so its cost grows with the buckets holding keyed
// events retained; a UUIDv7 id's lookup also reads the Unbucketed
// subjects of its shard, whose count grows with the buckets retained that
// hold events whose id's time was not their acceptance's.
func (h *History) Lookup(ctx context.Context, eventID string) ([]*rivorav1.EventOutcome, error) {
	var out []*rivorav1.EventOutcome
	err := h.readID(ctx, h.stream, outcomePrefix, BucketWidth, outcomesField, eventID, func(data []byte) error {
		o := &rivorav1.EventOutcome{}
		if err := proto.Unmarshal(data, o); err != nil {
			return err
		}
		if o.GetEventId() == eventID {
			out = append(out, o)
		}
		return nil
	})
	return out, err
}

// Body returns eventID's delivered event, payload included (the latest
// delivery), or nil when none is retained.
func (h *History) Body(ctx context.Context, eventID string) (*rivorav1.Event, error) {
	var last *rivorav1.Event
	err := h.readID(ctx, h.bodies, bodyPrefix, BodyBucketWidth, eventsField, eventID, func(data []byte) error {
		ev := &rivorav1.Event{}
		if err := proto.Unmarshal(data, ev); err != nil {
			return err
		}
		if ev.GetEventId() == eventID {
			last = ev
		}
		return nil
	})
	return last, err
}

// readID calls each, oldest first, with every record under prefix that
// may be eventID's: stored, then not yet stored (recorded moments ago),
// each once. Batches, then records, without the id's bytes are skipped
// undecoded.
func (h *History) readID(ctx context.Context, st jetstream.Stream, prefix string, width time.Duration, field protowire.Number, eventID string, each func([]byte) error) error {
	// Unsettled first: a batch acked after this is in the stream read.
	shard := "." + strconv.Itoa(Shard(eventID))
	tokens := idTokens(eventID, width)
	unsettled := h.w.unsettled(func(subject string) bool {
		if !strings.HasPrefix(subject, prefix) {
			return false
		}
		for _, a := range tokens {
			if strings.HasSuffix(subject, "."+a+shard) {
				return true
			}
		}
		return false
	})
	id := []byte(eventID)
	// A batch read from the stream may also be among the unsettled ones.
	seen := make(map[string]bool)
	emit := func(where string) func([]byte) error {
		return func(data []byte) error {
			if !bytes.Contains(data, id) || seen[string(data)] {
				return nil
			}
			seen[string(data)] = true
			if err := each(data); err != nil {
				return fmt.Errorf("decode a record of %s: %w", where, err)
			}
			return nil
		}
	}
	eachBatch := func(r record) error {
		if !bytes.Contains(r.data, id) {
			return nil
		}
		return eachRecord(r.data, field, emit(r.subject))
	}
	hash := idHash(eventID)
	filters := idSubjects(prefix, width, eventID)
	read, err := h.fromIndexes(ctx, st, filters, "."+Unbucketed+shard, hash, eachBatch)
	if err != nil {
		return err
	}
	if read {
		return h.readUnsettled(unsettled, id, field, emit)
	}
	var subjects, unbucketed []subjectCount
	for _, filter := range filters {
		found, err := subjectsOf(ctx, st, filter)
		if err != nil {
			return err
		}
		if strings.HasSuffix(filter, "."+Unbucketed+shard) {
			unbucketed = found
		} else {
			subjects = append(subjects, found...)
		}
	}
	sortSubjects(subjects)
	last, err := h.lastMessages(ctx, st, subjects, unbucketed)
	if err != nil {
		return err
	}
	for _, s := range subjects {
		seqs, ok, err := h.indexed(ctx, st, s, last, hash)
		if err != nil {
			return err
		}
		if ok {
			readByIndex.Inc()
			err = h.readSeqs(ctx, st, s.name, seqs, eachBatch)
		} else {
			readWhole.Inc()
			err = h.read(ctx, st, s.name, s.count, false, eachBatch)
		}
		if err != nil {
			return err
		}
	}
	// Unbucketed subjects span the retention. An event with records in
	// both has its latest here (a resend, a replay), so they come last,
	// in the order stored: through their indexes when each has one, else
	// read as one filter, with one request for all rather than one per
	// subject.
	if len(unbucketed) == 0 {
		return h.readUnsettled(unsettled, id, field, emit)
	}
	var seqs []uint64
	all := subjectCount{name: prefix + "*.*." + Unbucketed + shard}
	indexed := true
	for _, s := range unbucketed {
		all.count += s.count
		if !indexed {
			continue
		}
		found, ok, err := h.indexed(ctx, st, s, last, hash)
		if err != nil {
			return err
		}
		seqs, indexed = append(seqs, found...), ok
	}
	if indexed {
		readByIndex.Add(float64(len(unbucketed)))
		slices.Sort(seqs)
		err = h.readSeqs(ctx, st, all.name, seqs, eachBatch)
	} else {
		readWhole.Add(float64(len(unbucketed)))
		err = h.read(ctx, st, all.name, all.count, false, eachBatch)
	}
	if err != nil {
		return err
	}
	return h.readUnsettled(unsettled, id, field, emit)
}

// readUnsettled hands emit the unsettled batches' records.
func (h *History) readUnsettled(unsettled [][]byte, id []byte, field protowire.Number, emit func(string) func([]byte) error) error {
	for _, batch := range unsettled {
		if !bytes.Contains(batch, id) {
			continue
		}
		if err := eachRecord(batch, field, emit("a batch not yet stored")); err != nil {
			return err
		}
	}
	return nil
}

// indexed returns the sequences of the batches of subject s that may
// hold records of the id with hash h, when s's newest message is an index
// that accounts for every other message of s (ok false otherwise: read s
// whole).
func (h *History) indexed(ctx context.Context, st jetstream.Stream, s subjectCount, last map[string][]byte, hash uint32) (seqs []uint64, ok bool, err error) {
	data, found := last[s.name]
	if s.count < 2 || !found {
		return nil, false, nil
	}
	name := st.CachedInfo().Config.Name
	ix, ok := decodeIndex(data)
	if !ok || ix.covered != s.count-1 {
		return nil, false, nil
	}
	seqs = ix.seqsOf(hash, nil)
	for _, seq := range ix.seeAlso {
		r, found, err := getMsg(ctx, h.nc, name, directGet{Seq: seq, NoHeaders: true})
		if err != nil || !found {
			return nil, false, err
		}
		earlier, ok := decodeIndex(r.data)
		if !ok {
			return nil, false, nil
		}
		seqs = earlier.seqsOf(hash, seqs)
	}
	slices.Sort(seqs)
	return seqs, true, nil
}

// maxMultiLast is the subjects fromIndexes asks the last messages of in
// its one request (JetStream answers at most 1024).
const maxMultiLast = 1000

// errTooManySubjects is a multi-last request's answer when more subjects
// match than it may answer.
var errTooManySubjects = errors.New("direct get: too many subjects match")

// fromIndexes reads the batches that may hold the records of the id with
// hash when every subject matching filters ends with a complete index
// (one whose writer counted every other message of the subject as it
// stored it): one multi-last request for the subjects' last messages,
// then a direct get per batch named. Subjects come oldest bucket first,
// those ending in unbucketed (in stored order) last. ok is false, with
// nothing read, when a subject has no complete index or too many match:
// the caller lists the subjects and reads them.
func (h *History) fromIndexes(ctx context.Context, st jetstream.Stream, filters []string, unbucketed string, hash uint32, each func(record) error) (ok bool, err error) {
	name := st.CachedInfo().Config.Name
	var lasts []record
	_, _, more, err := h.batch(ctx, directGet{MultiLastFor: filters, Batch: maxMultiLast, MaxBytes: maxBatchBytes}, name, func(r record) error {
		lasts = append(lasts, r)
		return nil
	})
	switch {
	case errors.Is(err, errTooManySubjects):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read the indexes of %s: %w", strings.Join(filters, ", "), err)
	case more:
		return false, nil
	}
	type hits struct {
		subjectCount
		seqs []uint64
	}
	var bucketed []hits
	var late []uint64
	for _, r := range lasts {
		ix, ok := decodeIndex(r.data)
		if !ok || !ix.complete() {
			return false, nil
		}
		seqs := ix.seqsOf(hash, nil)
		for _, seq := range ix.seeAlso {
			earlier, found, err := getMsg(ctx, h.nc, name, directGet{Seq: seq, NoHeaders: true})
			if err != nil {
				return false, err
			}
			ex, ok := decodeIndex(earlier.data)
			if !found || !ok {
				return false, nil
			}
			seqs = ex.seqsOf(hash, seqs)
		}
		slices.Sort(seqs)
		if strings.HasSuffix(r.subject, unbucketed) {
			late = append(late, seqs...)
			continue
		}
		bucketed = append(bucketed, hits{subjectCount{name: r.subject, bucket: writeBucket(r.subject)}, seqs})
	}
	slices.SortFunc(bucketed, func(x, y hits) int {
		return cmp.Or(cmp.Compare(x.bucket, y.bucket), strings.Compare(x.name, y.name))
	})
	readByIndex.Add(float64(len(lasts)))
	for _, b := range bucketed {
		if err := h.readSeqs(ctx, st, b.name, b.seqs, each); err != nil {
			return true, err
		}
	}
	slices.Sort(late)
	return true, h.readSeqs(ctx, st, "the unbucketed subjects", late, each)
}

// lastMessages gets the newest message of each subject that may have an
// index (two messages at least), in one request.
func (h *History) lastMessages(ctx context.Context, st jetstream.Stream, subjects ...[]subjectCount) (map[string][]byte, error) {
	var names []string
	for _, list := range subjects {
		for _, s := range list {
			if s.count >= 2 {
				names = append(names, s.name)
			}
		}
	}
	last := make(map[string][]byte, len(names))
	if len(names) == 0 {
		return last, nil
	}
	name := st.CachedInfo().Config.Name
	// A request answers at most 1024 subjects (a keyed id's lookup may
	// list more) and maxBatchBytes; a subject not answered is read whole.
	for chunk := range slices.Chunk(names, 256) {
		_, _, _, err := h.batch(ctx, directGet{MultiLastFor: chunk, Batch: len(chunk), MaxBytes: maxBatchBytes}, name, func(r record) error {
			last[r.subject] = r.data
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read the indexes of %d %s subjects: %w", len(chunk), name, err)
		}
	}
	return last, nil
}

// readSeqs calls each with the batches at seqs (of subject, for errors),
// in order; a batch gone since its index was read (expired) is skipped.
func (h *History) readSeqs(ctx context.Context, st jetstream.Stream, subject string, seqs []uint64, each func(record) error) error {
	name := st.CachedInfo().Config.Name
	for _, seq := range seqs {
		r, found, err := getMsg(ctx, h.nc, name, directGet{Seq: seq, NoHeaders: true})
		if err != nil {
			return fmt.Errorf("read %s: %w", subject, err)
		}
		if !found {
			continue
		}
		r.subject = subject
		if err := each(r); err != nil {
			return err
		}
	}
	return nil
}

// subjectCount is one literal subject and its record count.
type subjectCount struct {
	name   string
	bucket int64
	count  uint64
}

// subjectsOf lists the literal subjects of st matching filter, oldest
// write bucket first.
func subjectsOf(ctx context.Context, st jetstream.Stream, filter string) ([]subjectCount, error) {
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("list %s subjects %s: %w", st.CachedInfo().Config.Name, filter, err)
	}
	out := make([]subjectCount, 0, len(info.State.Subjects))
	for name, n := range info.State.Subjects {
		out = append(out, subjectCount{name: name, bucket: writeBucket(name), count: n})
	}
	sortSubjects(out)
	return out, nil
}

// sortSubjects sorts subjects oldest write bucket first.
func sortSubjects(subjects []subjectCount) {
	slices.SortFunc(subjects, func(x, y subjectCount) int {
		return cmp.Or(cmp.Compare(x.bucket, y.bucket), strings.Compare(x.name, y.name))
	})
}

// writeBucket is the w token of a history subject (-1 when malformed).
func writeBucket(subject string) int64 {
	parts := strings.SplitN(subject, ".", 5)
	if len(parts) < 4 {
		return -1
	}
	w, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil {
		return -1
	}
	return w
}

// record is one stored message.
type record struct {
	subject string
	seq     uint64
	at      time.Time
	data    []byte
}

// directGet is a JetStream direct-get request: by sequence, the last of
// a subject, or a batch.
type directGet struct {
	Seq          uint64   `json:"seq,omitempty"`
	LastFor      string   `json:"last_by_subj,omitempty"`
	MultiLastFor []string `json:"multi_last,omitempty"`
	NextFor      string   `json:"next_by_subj,omitempty"`
	Batch        int      `json:"batch,omitempty"`
	MaxBytes     int      `json:"max_bytes,omitempty"`
	// NoHeaders: payloads only. The per-message headers (stream,
	// subject, sequence, time) cost more to format, send and parse than
	// the records themselves; without them a lookup is ~3x faster.
	NoHeaders bool `json:"no_hdr,omitempty"`
}

const (
	maxBatch      = 10_000
	maxBatchBytes = 8 << 20
)

// read reads the n records of st matching subject in order, with
// direct-get batches: one request per batch, no consumer to create. n
// must be the count the stream reported: asking for more than match makes
// the filestore look for the next match all the way to the stream's end.
// withMeta asks for each record's sequence and time (a listing needs the
// time); without, records carry only their data.
func (h *History) read(ctx context.Context, st jetstream.Stream, subject string, n uint64, withMeta bool, each func(record) error) error {
	name := st.CachedInfo().Config.Name
	var seq uint64
	for n > 0 {
		got, next, more, err := h.batch(ctx, directGet{Seq: seq, NextFor: subject, Batch: int(min(n, maxBatch)), MaxBytes: maxBatchBytes, NoHeaders: !withMeta}, name, each)
		if err != nil {
			return fmt.Errorf("read %s: %w", subject, err)
		}
		n -= uint64(got)
		if !more || got == 0 {
			return nil
		}
		seq = next
	}
	return nil
}

// batch sends one direct-get batch request and reads its answer. It
// returns how many records it read, the sequence to go on from and
// whether more remain.
func (h *History) batch(ctx context.Context, dg directGet, stream string, each func(record) error) (got int, next uint64, more bool, err error) {
	req, err := json.Marshal(dg)
	if err != nil {
		return 0, 0, false, err
	}
	inbox := h.nc.NewRespInbox()
	sub, err := h.nc.SubscribeSync(inbox)
	if err != nil {
		return 0, 0, false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := h.nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, req); err != nil {
		return 0, 0, false, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return got, next, false, err
		}
		switch status := msg.Header.Get("Status"); status {
		case "":
		case "404":
			return got, next, false, nil
		case "413":
			return got, next, false, errTooManySubjects
		case "204":
			if last, err := strconv.ParseUint(msg.Header.Get(jetstream.LastSequenceHeader), 10, 64); err == nil && last > 0 {
				next = last + 1
			}
			return got, next, msg.Header.Get("Nats-Num-Pending") != "0", nil
		default:
			return got, next, false, fmt.Errorf("direct get: status %s %s", status, msg.Header.Get("Description"))
		}
		r := record{subject: dg.NextFor, data: msg.Data}
		if !dg.NoHeaders {
			if r, err = decodeRecord(msg); err != nil {
				return got, next, false, err
			}
			next = r.seq + 1
		}
		got++
		if err := each(r); err != nil {
			return got, next, false, err
		}
	}
}

func decodeRecord(msg *nats.Msg) (record, error) {
	seq, err := strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return record{}, fmt.Errorf("direct get: bad %s header: %w", jetstream.SequenceHeader, err)
	}
	at, err := time.Parse(time.RFC3339Nano, msg.Header.Get(jetstream.TimeStampHeaer))
	if err != nil {
		return record{}, fmt.Errorf("direct get: bad %s header: %w", jetstream.TimeStampHeaer, err)
	}
	return record{subject: msg.Header.Get(jetstream.SubjectHeader), seq: seq, at: at, data: msg.Data}, nil
}

// countSubject is the count of messages of a history subject.
func (h *History) countSubject(ctx context.Context, subject string) (uint64, error) {
	st := h.stream
	if streamOf(subject) == BodiesStream {
		st = h.bodies
	}
	found, err := subjectsOf(ctx, st, subject)
	if err != nil || len(found) == 0 {
		return 0, err
	}
	return found[0].count, nil
}

// streamOf is the stream a history subject is in.
func streamOf(subject string) string {
	if strings.HasPrefix(subject, bodyPrefix) {
		return BodiesStream
	}
	return Stream
}

// getMsg sends one (not batch) direct-get request; found is false when no
// message matches. With NoHeaders the record carries only its data.
func getMsg(ctx context.Context, nc *nats.Conn, stream string, dg directGet) (r record, found bool, err error) {
	req, err := json.Marshal(dg)
	if err != nil {
		return record{}, false, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	msg, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream, req)
	if err != nil {
		return record{}, false, fmt.Errorf("direct get from %s: %w", stream, err)
	}
	switch status := msg.Header.Get("Status"); status {
	case "":
	case "404":
		return record{}, false, nil
	default:
		return record{}, false, fmt.Errorf("direct get from %s: status %s %s", stream, status, msg.Header.Get("Description"))
	}
	if dg.NoHeaders {
		return record{data: msg.Data}, true, nil
	}
	r, err = decodeRecord(msg)
	return r, err == nil, err
}
