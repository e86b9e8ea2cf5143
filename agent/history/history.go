// Package history keeps each event's attempt outcomes and, once delivered,
// the event itself (the HISTORY stream), so "where is my event?", "what
// was delivered?" and "send it again" have answers after the event left
// its lane. Records are written asynchronously and expire after the
// retention period.
//
// Its subjects grow with time, never with events: NATS keeps an index
// entry per subject, and one subject per event (the EVENTS stream before
// it) cost ~320 B of memory for every retained event. Records go to
//
//	history.o.<w>.<a>.<s>   outcome records (EventOutcome, no payload)
//	history.b.<w>.<a>.<s>   the delivered event, payload included (resend)
//
// w is the minute the record is written (unix minutes, UTC); a is the
// event's acceptance minute read from its id when the id is a UUIDv7, else
// "k" (a client's idempotency key can be any string); s is fnv-1a(id) mod
// Shards. A subject holds at most a minute of writes, so it sits in a few
// consecutive message blocks: the filestore loads every block between a
// subject's first and last message to read it, and a subject spanning
// hours would load hours of blocks. That is why w is in the subject, and a
// alone (retries come hours after acceptance) is not enough.
//
// A lookup by id lists the subjects history.o.*.<a>.<s> (typically one or
// two: the acceptance minute and the next, more when it was retried) and
// reads each one with a direct-get batch.
package history

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/protobuf/proto"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Stream is the history's stream.
const Stream = "HISTORY"

// oldStream held one subject per event before HISTORY (pre-1.0).
const oldStream = "EVENTS"

// DefaultRetention is how long outcomes and delivered events are kept.
const DefaultRetention = 7 * 24 * time.Hour

// Shards splits each minute's records by event id, so a lookup reads
// about 1/Shards of the minute its event was accepted in.
const Shards = 64

// KeyedMinute is the acceptance token of an event whose id is not a
// UUIDv7 (a client's idempotency key).
const KeyedMinute = "k"

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

// History owns the HISTORY stream.
type History struct {
	nc     *nats.Conn
	stream jetstream.Stream
	now    func() time.Time
	// retention bounds how far back List searches.
	retention time.Duration
}

// Config configures the history.
type Config struct {
	// Retention is how long records are kept (DefaultRetention when 0).
	Retention time.Duration
	// Replicas is the stream's replica count in a cell (0 means 1).
	Replicas int
}

// New creates (or updates) the HISTORY stream. The EVENTS stream of
// earlier versions is deleted: its per-event history is dropped.
func New(ctx context.Context, js jetstream.JetStream, cfg Config, log *slog.Logger) (*History, error) {
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if err := dropOld(ctx, js, log); err != nil {
		return nil, err
	}
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        Stream,
		Description: "Attempt outcomes and delivered events, by write minute, for `rivoractl events get/list/resend`.",
		Subjects:    []string{"history.>"},
		Storage:     jetstream.FileStorage,
		Replicas:    max(cfg.Replicas, 1),
		MaxAge:      cfg.Retention,
		AllowDirect: true,
	})
	if err != nil {
		return nil, fmt.Errorf("create %s stream: %w", Stream, err)
	}
	return &History{nc: js.Conn(), stream: st, now: time.Now, retention: cfg.Retention}, nil
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

// AcceptMinute is the acceptance token of an event id: its UUIDv7 time in
// unix minutes, else KeyedMinute.
func AcceptMinute(eventID string) string {
	u, err := uuid.Parse(eventID)
	if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 {
		return KeyedMinute
	}
	ms := int64(u[0])<<40 | int64(u[1])<<32 | int64(u[2])<<24 | int64(u[3])<<16 | int64(u[4])<<8 | int64(u[5])
	return strconv.FormatInt(ms/60_000, 10)
}

// Shard is an event id's shard, fnv-1a(id) mod Shards.
func Shard(eventID string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(eventID))
	return int(h.Sum32() % Shards)
}

// Minute is t in unix minutes.
func Minute(t time.Time) int64 { return t.Unix() / 60 }

// OutcomeSubject is where an outcome of eventID written at t goes.
func OutcomeSubject(t time.Time, eventID string) string {
	return subject(outcomePrefix, Minute(t), eventID)
}

// BodySubject is where eventID's delivered event, written at t, goes.
func BodySubject(t time.Time, eventID string) string {
	return subject(bodyPrefix, Minute(t), eventID)
}

func subject(prefix string, minute int64, eventID string) string {
	return prefix + strconv.FormatInt(minute, 10) + "." + AcceptMinute(eventID) + "." + strconv.Itoa(Shard(eventID))
}

// idSubjects is the filter of every subject that can hold eventID's
// records under prefix.
func idSubjects(prefix, eventID string) string {
	return prefix + "*." + AcceptMinute(eventID) + "." + strconv.Itoa(Shard(eventID))
}

// Record appends an outcome without waiting for the store's ack: history
// is for people, and must not slow delivery down.
func (h *History) Record(o *rivorav1.EventOutcome) {
	h.publish(OutcomeSubject(h.now(), o.GetEventId()), o)
}

// RecordBody keeps a delivered event, payload included, for a resend.
func (h *History) RecordBody(ev *rivorav1.Event) {
	h.publish(BodySubject(h.now(), ev.GetEventId()), ev)
}

func (h *History) publish(subject string, m proto.Message) {
	data, err := proto.Marshal(m)
	if err != nil {
		recordErrors.Inc()
		return
	}
	// A plain publish: the stream stores it without sending an ack back,
	// which halves the cost per attempt. A lost record only makes "where is
	// my event?" less detailed.
	if err := h.nc.Publish(subject, data); err != nil {
		recordErrors.Inc()
	}
}

// Lookup returns an event's outcomes, oldest first (nil when none). It
// reads the subjects of the event's acceptance minute and shard: about
// 2/Shards of a minute's records per minute the event was written in. For
// an id that is not a UUIDv7 (KeyedMinute) it reads every retained keyed
// event's shard, so its cost grows with the keyed events retained.
func (h *History) Lookup(ctx context.Context, eventID string) ([]*rivorav1.EventOutcome, error) {
	var out []*rivorav1.EventOutcome
	err := h.readID(ctx, outcomePrefix, eventID, func(r record) error {
		o := &rivorav1.EventOutcome{}
		if err := proto.Unmarshal(r.data, o); err != nil {
			return fmt.Errorf("decode %s #%d: %w", r.subject, r.seq, err)
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
	err := h.readID(ctx, bodyPrefix, eventID, func(r record) error {
		ev := &rivorav1.Event{}
		if err := proto.Unmarshal(r.data, ev); err != nil {
			return fmt.Errorf("decode %s #%d: %w", r.subject, r.seq, err)
		}
		if ev.GetEventId() == eventID {
			last = ev
		}
		return nil
	})
	return last, err
}

// readID reads, oldest first, every record under prefix that may be
// eventID's; records without the id's bytes are skipped undecoded.
func (h *History) readID(ctx context.Context, prefix, eventID string, each func(record) error) error {
	subjects, err := h.subjects(ctx, idSubjects(prefix, eventID))
	if err != nil {
		return err
	}
	id := []byte(eventID)
	for _, s := range subjects {
		err := h.read(ctx, s.name, s.count, func(r record) error {
			if !bytes.Contains(r.data, id) {
				return nil
			}
			return each(r)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// subjectCount is one literal subject and its record count.
type subjectCount struct {
	name   string
	minute int64
	count  uint64
}

// subjects lists the literal subjects matching filter, oldest write
// minute first.
func (h *History) subjects(ctx context.Context, filter string) ([]subjectCount, error) {
	info, err := h.stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("list %s subjects %s: %w", Stream, filter, err)
	}
	out := make([]subjectCount, 0, len(info.State.Subjects))
	for name, n := range info.State.Subjects {
		out = append(out, subjectCount{name: name, minute: writeMinute(name), count: n})
	}
	slices.SortFunc(out, func(x, y subjectCount) int {
		if x.minute != y.minute {
			return int(x.minute - y.minute)
		}
		return strings.Compare(x.name, y.name)
	})
	return out, nil
}

// writeMinute is the w token of a history subject (-1 when malformed).
func writeMinute(subject string) int64 {
	parts := strings.SplitN(subject, ".", 4)
	if len(parts) < 3 {
		return -1
	}
	w, err := strconv.ParseInt(parts[2], 10, 64)
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

// directGet is a JetStream direct-get request (batch form).
type directGet struct {
	Seq      uint64 `json:"seq,omitempty"`
	NextFor  string `json:"next_by_subj"`
	Batch    int    `json:"batch"`
	MaxBytes int    `json:"max_bytes,omitempty"`
}

const (
	maxBatch      = 10_000
	maxBatchBytes = 8 << 20
)

// read reads the records of one literal subject in order, n at most, with
// direct-get batches: one request per batch, no consumer to create.
func (h *History) read(ctx context.Context, subject string, n uint64, each func(record) error) error {
	var seq uint64
	for n > 0 {
		got, next, more, err := h.batch(ctx, subject, seq, int(min(n, maxBatch)), each)
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

// batch asks for up to size records of subject from seq on. It returns
// how many it read, the sequence to go on from and whether more remain.
func (h *History) batch(ctx context.Context, subject string, seq uint64, size int, each func(record) error) (got int, next uint64, more bool, err error) {
	req, err := json.Marshal(directGet{Seq: seq, NextFor: subject, Batch: size, MaxBytes: maxBatchBytes})
	if err != nil {
		return 0, 0, false, err
	}
	inbox := h.nc.NewRespInbox()
	sub, err := h.nc.SubscribeSync(inbox)
	if err != nil {
		return 0, 0, false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := h.nc.PublishRequest("$JS.API.DIRECT.GET."+Stream, inbox, req); err != nil {
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
		case "204":
			return got, next, msg.Header.Get("Nats-Num-Pending") != "0", nil
		default:
			return got, next, false, fmt.Errorf("direct get: status %s %s", status, msg.Header.Get("Description"))
		}
		r, err := decodeRecord(msg)
		if err != nil {
			return got, next, false, err
		}
		got, next = got+1, r.seq+1
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
