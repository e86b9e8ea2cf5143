package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/internal/fingerprint"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// This file is how a keyed event published to a destination by name
// costs one durable write: the event is stored once, its fingerprint in
// a header (fingerprint.Header), and only when a stream answers that its
// id is a duplicate is the original read and compared. The streams
// (INGEST and every LANES_p) dedupe on the event id within the dedup
// window, and a duplicate's ack names the original's sequence.
//
// Where the original is, in the order it is looked for:
//   - at the sequence the duplicate's ack named, in that stream;
//   - gone from INGEST: moved into its partition's lanes (the mover keeps
//     its dedup id and fingerprint there), found by a probe of LANES_p;
//   - gone from its lane (delivered, then its space reclaimed): the
//     history keeps the delivered event, payload included (Bodies);
//   - the IDEMPOTENCY record under its id, which an edge's copy that
//     reached the cell first wrote (forwarded.go).
//
// Found nowhere (a dead-lettered original, a history record dropped
// under load), the stream's answer stands: the publish is answered as the
// original's duplicate. docs/architecture.md lists these limits.

// Stored is where an event was stored: its stream and sequence, the
// original's when the stream answered it was a duplicate.
type Stored struct {
	Stream    string
	Seq       uint64
	Duplicate bool
}

// Bodies finds a delivered event by id, payload included (the history:
// history.History).
type Bodies interface {
	Body(ctx context.Context, eventID string) (*rivorav1.Event, error)
}

// originals finds the fingerprint of the original of a duplicate.
type originals struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
	// clustered: the streams have several replicas, which changes how a
	// probe asks (see probe).
	clustered bool
	// streams caches stream handles by name (a handle is a name and its
	// config; reading by sequence costs one request either way).
	streams sync.Map
	// records is the IDEMPOTENCY bucket's stream and its keys' prefix.
	recordStream, recordPrefix string
}

func newOriginals(js jetstream.JetStream, c *claims, replicas int) *originals {
	return &originals{js: js, kv: c.kv, clustered: replicas > 1, recordStream: "KV_" + c.kv.Bucket(), recordPrefix: c.subject}
}

// recorded reads the IDEMPOTENCY records under ids, in one direct-get
// request: by id, the record's value (ids without one, or whose record
// was released, are not in the map). The cell's gateway writes no record
// for a direct event; an edge's copy that reached the cell before any
// copy of the cell's own did (forwarded.go) leaves one.
func (o *originals) recorded(ctx context.Context, ids []string) (map[string][]byte, error) {
	subjects := make([]string, 0, len(ids))
	for _, id := range ids {
		if validRecordKey(id) {
			subjects = append(subjects, o.recordPrefix+id)
		}
	}
	if len(subjects) == 0 {
		return nil, nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	read := o.recordedMany
	if len(subjects) == 1 {
		read = o.recordedOne
	}
	// Any replica answers a direct get (a queue group), within
	// milliseconds; one that did not answer within directGetTry is asked
	// again, for the request may have gone to a replica behind a silent
	// cut whose route is not closed yet: the next try most likely goes to
	// one that answers.
	for {
		tryCtx, cancel := context.WithTimeout(ctx, directGetTry)
		got, err := read(tryCtx, subjects)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return got, err
		}
	}
}

// directGetTry bounds one try of a direct get of the idempotency records.
const directGetTry = time.Second

// recordedMany reads the records under several subjects in one request.
func (o *originals) recordedMany(ctx context.Context, subjects []string) (map[string][]byte, error) {
	req, err := json.Marshal(struct {
		MultiLast []string `json:"multi_last"`
		Batch     int      `json:"batch"`
	}{subjects, len(subjects)})
	if err != nil {
		return nil, err
	}
	nc := o.js.Conn()
	inbox := nc.NewRespInbox()
	// The answer is at most one message per subject and the end marker: a
	// channel of that size never drops one, and costs far less than
	// SubscribeSync's default 64k-message channel (half a megabyte per
	// call).
	replies := make(chan *nats.Msg, len(subjects)+1)
	sub, err := nc.ChanSubscribe(inbox, replies)
	if err != nil {
		return nil, fmt.Errorf("read idempotency records: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+o.recordStream, inbox, req); err != nil {
		return nil, fmt.Errorf("read idempotency records: %w", err)
	}
	var out map[string][]byte
	for {
		var msg *nats.Msg
		select {
		case msg = <-replies:
		case <-ctx.Done():
			return nil, fmt.Errorf("read idempotency records: %w", ctx.Err())
		}
		switch status := msg.Header.Get("Status"); status {
		case "":
		case "404", "204":
			return out, nil
		default:
			return nil, fmt.Errorf("read idempotency records: status %s %s", status, msg.Header.Get("Description"))
		}
		if msg.Header.Get(kvOperationHeader) != "" {
			continue // a released record: a delete marker
		}
		if out == nil {
			out = make(map[string][]byte)
		}
		out[strings.TrimPrefix(msg.Header.Get(jetstream.SubjectHeader), o.recordPrefix)] = msg.Data
	}
}

// recordedOne is recordedMany for one key: a plain direct get, whose one
// answer comes through the connection's shared reply subscription (a
// subscription per call would cost the server a subscribe and an
// unsubscribe per publish).
func (o *originals) recordedOne(ctx context.Context, subjects []string) (map[string][]byte, error) {
	subject := subjects[0]
	req, err := json.Marshal(struct {
		LastBySubject string `json:"last_by_subj"`
	}{subject})
	if err != nil {
		return nil, err
	}
	msg, err := o.js.Conn().RequestWithContext(ctx, "$JS.API.DIRECT.GET."+o.recordStream, req)
	if err != nil {
		return nil, fmt.Errorf("read idempotency record: %w", err)
	}
	switch status := msg.Header.Get("Status"); {
	case status == "404":
		return nil, nil
	case status != "":
		return nil, fmt.Errorf("read idempotency record: status %s %s", status, msg.Header.Get("Description"))
	case msg.Header.Get(kvOperationHeader) != "":
		return nil, nil // a released record: a delete marker
	}
	return map[string][]byte{strings.TrimPrefix(subject, o.recordPrefix): msg.Data}, nil
}

// kvOperationHeader marks a key-value delete or purge marker.
const kvOperationHeader = "KV-Operation"

// probeMark is the value of the header that makes a probe fail when its
// id is new: never a stream's last message id, nor a stream name (it has
// spaces, which no dedup id or stream name may hold).
const probeMark = "rivora idempotency probe"

// streamSourceHeader is JetStream's header of a sourced message, which a
// publisher may not set: a probe carries it in a clustered stream.
const streamSourceHeader = "Nats-Stream-Source"

// probe is one dedup question: is msgID a duplicate in stream (whose
// subject space holds subject)?
type probe struct {
	stream, subject, msgID string
}

// probeAll asks each probe's stream whether its id is a duplicate,
// without storing anything (sendProbes, then collectProbes).
func (o *originals) probeAll(ctx context.Context, probes []probe) ([]Stored, error) {
	futures, err := o.sendProbes(probes)
	if err != nil {
		return nil, err
	}
	return collectProbes(ctx, probes, futures)
}

// sendProbes sends the probes without waiting. The answer is a Duplicate
// ack naming the original's sequence, or, for a new id, the refusal the
// probe's extra header provokes: JetStream checks the dedup window first
// and refuses such a header after (R1: a wrong Nats-Expected-Last-Msg-Id;
// a replicated stream checks that one only once the message went through
// its log, and would hold the id as "in process", so there the probe
// carries the stream-source header publishers may not set, refused before
// the log). TestProbeStoresNothing pins this on the server in go.mod.
func (o *originals) sendProbes(probes []probe) ([]jetstream.PubAckFuture, error) {
	futures := make([]jetstream.PubAckFuture, len(probes))
	for i, pr := range probes {
		msg := nats.NewMsg(pr.subject)
		msg.Header.Set(jetstream.MsgIDHeader, pr.msgID)
		if o.clustered {
			msg.Header.Set(streamSourceHeader, probeMark)
		} else {
			msg.Header.Set(jetstream.ExpectedLastMsgIDHeader, probeMark)
		}
		// No retry when no stream answers (a partition whose lanes were
		// never opened): that is an answer.
		f, err := o.js.PublishMsgAsync(msg, jetstream.WithRetryAttempts(0))
		if err != nil {
			return nil, fmt.Errorf("probe dedup id: %w", err)
		}
		futures[i] = f
	}
	return futures, nil
}

// probeWait bounds the wait for the next of the probes' answers (each
// answer starts it again, so a batch's many probes queued behind a flood
// are waited for as long as they keep coming). A stream's leader answers
// a probe as soon as it reaches it (it checks its dedup window before its
// log): no answer at all for this long is a leader that stopped with the
// probe unanswered (a rolling restart), which only the caller's deadline
// would end; a retry finds the new leader.
const probeWait = 2 * time.Second

// errProbeUnanswered is the probes' answer when none came for probeWait.
var errProbeUnanswered = fmt.Errorf("a stream did not answer the probe of an idempotency key within %s (its leader may be moving)", probeWait)

// collectProbes waits for every probe's answer.
func collectProbes(ctx context.Context, probes []probe, futures []jetstream.PubAckFuture) ([]Stored, error) {
	out := make([]Stored, len(probes))
	var firstErr error
	unanswered := time.NewTimer(probeWait)
	defer unanswered.Stop()
	for i, f := range futures {
		if i > 0 {
			unanswered.Reset(probeWait) // the previous one was answered
		}
		select {
		case ack := <-f.Ok():
			if !ack.Duplicate && firstErr == nil {
				// Cannot happen on the server this was tested with: say so
				// loudly rather than take a stored probe for an answer.
				firstErr = fmt.Errorf("probe of dedup id %s was stored in %s at %d", probes[i].msgID, ack.Stream, ack.Sequence)
			}
			out[i] = Stored{Stream: probes[i].stream, Seq: ack.Sequence, Duplicate: ack.Duplicate}
		case err := <-f.Err():
			// No stream at all (a partition whose lanes were never
			// opened): nothing there to be a duplicate of.
			if !isProbeRefusal(err) && !errors.Is(err, jetstream.ErrNoStreamResponse) && firstErr == nil {
				firstErr = fmt.Errorf("probe dedup id: %w", err)
			}
			out[i] = Stored{Stream: probes[i].stream}
		case <-unanswered.C:
			return nil, errProbeUnanswered
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, firstErr
}

// JetStream's error codes for the refusals probeAll provokes.
const (
	errCodeWrongLastMsgID        jetstream.ErrorCode = 10070
	errCodeSourceHeaderForbidden jetstream.ErrorCode = 10227
)

func isProbeRefusal(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == errCodeWrongLastMsgID || apiErr.ErrorCode == errCodeSourceHeaderForbidden)
}

// lanesProbe is the probe of partition p's lanes for an event's id.
func lanesProbe(p int, ev *rivorav1.Event, msgID string) probe {
	return probe{stream: lanes.LanesStream(p), subject: lanes.EventLane(ev).Subject(p), msgID: msgID}
}

// ingestProbe is the probe of INGEST for an event's id.
func ingestProbe(p int, ev *rivorav1.Event, msgID string) probe {
	return probe{stream: lanes.IngestStream, subject: lanes.IngestSubject(p, ev.GetDestinationId()), msgID: msgID}
}

// findRetries bound the wait for an original in motion: between INGEST and
// its lane, or between its lane and the history (a record is visible
// once its batch is flushed, ~10 ms, on another agent).
var findRetries = []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond}

// fingerprintOf finds the fingerprint of the original of a duplicate of
// event eventID (partition p), whose ack named at. found is false when
// it is nowhere any more (see the file comment).
//
// It looks again (findRetries) only while the original may be in motion
// to where the next look finds it. Without a history to ask (bodies nil:
// the mover's questions, DuplicateConflict and CheckForwarded), an
// original the lanes' leader no longer holds at the sequence the lanes
// named is not coming back (delivered and reclaimed): find says so, and
// looking again would only cost the ~370 ms of waits per duplicate. A
// mover handed a batch of copies of such originals (INGEST redelivering
// what a previous owner moved but never acked) sat minutes on one batch,
// past INGEST's AckWait, and its partition never moved again (issue 27).
func (o *originals) fingerprintOf(ctx context.Context, at Stored, p int, ev *rivorav1.Event, bodies Bodies) (fp []byte, found bool, err error) {
	for attempt := 0; ; attempt++ {
		var gone bool
		fp, found, gone, err = o.find(ctx, at, p, ev, bodies)
		if err != nil || found || gone || attempt == len(findRetries) {
			return fp, found, err
		}
		select {
		case <-time.After(findRetries[attempt]):
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// find looks for the original once; gone: it is nowhere and cannot
// appear anywhere it looks (see fingerprintOf).
func (o *originals) find(ctx context.Context, at Stored, p int, ev *rivorav1.Event, bodies Bodies) (fp []byte, found, gone bool, err error) {
	id := ev.GetEventId()
	// With no history to ask, the lanes' leader is what tells "gone":
	// a replica answering a direct get may not hold the original yet.
	noHistory := bodies == nil
	read := o.at
	if noHistory {
		read = o.atLeader
	}
	if fp, found, err := read(ctx, at.Stream, at.Seq, id); err != nil || found {
		return fp, found, false, err
	}
	gone = noHistory && at.Stream != lanes.IngestStream
	if at.Stream == lanes.IngestStream {
		// Moved into its lane: the lanes know its id too.
		got, err := o.probeAll(ctx, []probe{lanesProbe(p, ev, id)})
		if err != nil {
			return nil, false, false, err
		}
		if got[0].Duplicate {
			if fp, found, err := read(ctx, got[0].Stream, got[0].Seq, id); err != nil || found {
				return fp, found, false, err
			}
			// Gone from INGEST and from its lane.
			gone = noHistory
		}
	}
	if bodies != nil {
		body, err := bodies.Body(ctx, id)
		if err != nil {
			return nil, false, false, fmt.Errorf("read the history of event %s: %w", id, err)
		}
		if body != nil {
			return fingerprint.Of(body), true, false, nil
		}
	}
	if validRecordKey(id) {
		entry, err := o.kv.Get(ctx, id)
		switch {
		case err == nil:
			return entry.Value(), true, false, nil
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return nil, false, false, fmt.Errorf("read idempotency key: %w", err)
		}
	}
	return nil, false, gone, nil
}

// at reads the message at seq of stream: the fingerprint of the event it
// holds, when it is eventID's (found false: the sequence is gone, or
// holds another event, which a stream's dedup never answers).
func (o *originals) at(ctx context.Context, stream string, seq uint64, eventID string) ([]byte, bool, error) {
	if seq == 0 {
		return nil, false, nil
	}
	st, err := o.stream(ctx, stream)
	if err != nil {
		return nil, false, err
	}
	msg, err := st.GetMsg(ctx, seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("read %s message %d: %w", stream, seq, err)
	}
	fp, found := originalIn(msg.Header, msg.Data, eventID)
	return fp, found, nil
}

// originalIn is the fingerprint of the stored message (header, data),
// when it holds event eventID.
func originalIn(header nats.Header, data []byte, eventID string) ([]byte, bool) {
	if fp := fingerprint.FromHeader(header); fp != nil {
		return fp, true
	}
	ev := &rivorav1.Event{}
	if err := proto.Unmarshal(data, ev); err != nil || ev.GetEventId() != eventID {
		return nil, false
	}
	return fingerprint.Of(ev), true
}

// errCodeNoMessageFound is JetStream's error code of a message get whose
// sequence holds nothing.
const errCodeNoMessageFound = 10037

// atLeader is at, asked of the stream's leader. A stream that allows
// direct gets (the lanes do) lets any replica answer Stream.GetMsg, and a
// replica that has not stored seq yet answers "not found"; the leader
// stored seq before it acked the duplicate naming it, so its "not found"
// means the original is gone (delivered and reclaimed).
func (o *originals) atLeader(ctx context.Context, stream string, seq uint64, eventID string) ([]byte, bool, error) {
	if seq == 0 {
		return nil, false, nil
	}
	req, err := json.Marshal(struct {
		Seq uint64 `json:"seq"`
	}{seq})
	if err != nil {
		return nil, false, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	reply, err := o.js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, false, fmt.Errorf("read %s message %d: %w", stream, seq, err)
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Header []byte `json:"hdrs"`
			Data   []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, false, fmt.Errorf("read %s message %d: %w", stream, seq, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == errCodeNoMessageFound:
		return nil, false, nil
	case resp.Error != nil:
		return nil, false, fmt.Errorf("read %s message %d: %s (code %d, error code %d)", stream, seq, resp.Error.Description, resp.Error.Code, resp.Error.ErrCode)
	case resp.Message == nil:
		return nil, false, fmt.Errorf("read %s message %d: an answer with neither message nor error", stream, seq)
	}
	var header nats.Header
	if len(resp.Message.Header) > 0 {
		if header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, false, fmt.Errorf("read %s message %d: %w", stream, seq, err)
		}
	}
	fp, found := originalIn(header, resp.Message.Data, eventID)
	return fp, found, nil
}

func (o *originals) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if st, ok := o.streams.Load(name); ok {
		return st.(jetstream.Stream), nil
	}
	st, err := o.js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", name, err)
	}
	o.streams.Store(name, st)
	return st, nil
}

// same tells whether the original of a duplicate of ev (fingerprint fp)
// is the same event: true when it is, or when it is nowhere to compare.
func (o *originals) same(ctx context.Context, at Stored, p int, ev *rivorav1.Event, fp []byte, bodies Bodies) (bool, error) {
	orig, found, err := o.fingerprintOf(ctx, at, p, ev, bodies)
	if err != nil {
		return false, err
	}
	if !found {
		unverified.Inc()
		return true, nil
	}
	return bytes.Equal(orig, fp), nil
}
