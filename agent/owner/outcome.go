package owner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/scheduler"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// What an attempt leaves behind once settled (settle.go): the dead
// letters of a deleted destination, the records of an outcome, the cache
// of events kept in memory.

// Load returns the event of an attempt, decoded from memory (the cache
// keeps its encoding) or from the lane store.
func (o *Partition) Load(ctx context.Context, a *scheduler.Attempt) (*rivorav1.Event, error) {
	var data []byte
	if a.Entry.Data != "" {
		data = []byte(a.Entry.Data)
	} else {
		var err error
		if data, err = o.loadStored(ctx, a.Entry.Seq); err != nil {
			return nil, fmt.Errorf("load event %s (seq %d): %w", a.Entry.EventID, a.Entry.Seq, err)
		}
	}
	ev := &rivorav1.Event{}
	if err := proto.Unmarshal(data, ev); err != nil {
		return nil, fmt.Errorf("decode event %s (seq %d): %w: %w", a.Entry.EventID, a.Entry.Seq, errUndecodable, err)
	}
	return ev, nil
}

// Cached is e's event when the cache keeps it (nil: it does not, or its
// bytes do not decode): what a reader that must not touch the lane store
// can tell about a pending event.
func Cached(e scheduler.Entry) *rivorav1.Event {
	if e.Data == "" {
		return nil
	}
	ev := &rivorav1.Event{}
	if proto.Unmarshal([]byte(e.Data), ev) != nil {
		return nil
	}
	return ev
}

// errUndecodable marks a stored event whose bytes do not decode.
var errUndecodable = errors.New("undecodable")

// loadGone reports whether a Load failed for good: the lane store's
// leader answered that the event is not there, or its bytes do not
// decode. Any other failure (a timeout, no leader yet) may pass.
func loadGone(err error) bool {
	return errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, errUndecodable)
}

// loadTimeout bounds a load whose context has no deadline (JetStream's
// own default).
const loadTimeout = 5 * time.Second

// loadStored reads the stored event at seq with a direct get that asks
// for the payload alone ("no_hdr"): a deep backlog loads nearly every
// event it delivers, and with its headers the server copies the
// message's own and appends four more with an http.Header each, and the
// client parses them all back (jetstream's GetMsg), about a third of a
// load's CPU for a sequence and a time that Load already knows or
// never uses.
func (o *Partition) loadStored(ctx context.Context, seq uint64) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, loadTimeout)
		defer cancel()
	}
	req := make([]byte, 0, 48)
	req = append(req, `{"seq":`...)
	req = strconv.AppendUint(req, seq, 10)
	req = append(req, `,"no_hdr":true}`...)
	msg, err := o.deps.JS.Conn().RequestWithContext(ctx, o.directGet, req)
	if err != nil {
		return nil, err
	}
	if len(msg.Data) == 0 {
		// Every stored event has bytes: an empty answer is a status.
		status := msg.Header.Get("Status")
		if status == "404" {
			// Any replica answers a direct get, and one may not have
			// stored a write the leader acknowledged yet: "not found"
			// is the leader's to say, or a pending event would be
			// skipped as gone.
			return o.leaderGet(ctx, seq)
		}
		return nil, fmt.Errorf("direct get: status %q %s", status, msg.Header.Get("Description"))
	}
	return msg.Data, nil
}

// leaderGet reads the stored event at seq from the lane store's leader:
// slower than a direct get, asked only when a direct get found nothing.
func (o *Partition) leaderGet(ctx context.Context, seq uint64) ([]byte, error) {
	msg, err := getFromLeader(ctx, o.deps.JS, o.msgGet, []byte(`{"seq":`+strconv.FormatUint(seq, 10)+`}`))
	if err != nil {
		return nil, err
	}
	return msg.Data, nil
}

// leaderMsg is a stored message as the STREAM.MSG.GET API answers it.
type leaderMsg struct {
	Sequence uint64 `json:"seq"`
	Data     []byte `json:"data"`
}

// getFromLeader sends req ({"seq":…} and its options) to msgGet, a
// stream's STREAM.MSG.GET API subject, which only the stream's leader
// answers (any replica may answer a direct get, one that is behind
// included). jetstream.ErrMsgNotFound: the leader stores no such message.
func getFromLeader(ctx context.Context, js jetstream.JetStream, msgGet string, req []byte) (*leaderMsg, error) {
	msg, err := js.Conn().RequestWithContext(ctx, msgGet, req)
	if err != nil {
		return nil, fmt.Errorf("get from the leader (%s): %w", msgGet, err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *leaderMsg          `json:"message"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("get from the leader (%s): unreadable answer: %w", msgGet, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return nil, fmt.Errorf("get from the leader (%s): %w", msgGet, resp.Error)
	case resp.Message == nil:
		return nil, fmt.Errorf("get from the leader (%s): an answer without a message", msgGet)
	}
	return resp.Message, nil
}

// apiSubject is a stream's JetStream API subject (for example
// "DIRECT.GET." + stream) under the client's API prefix.
func apiSubject(js jetstream.JetStream, subject string) string {
	prefix := jetstream.DefaultAPIPrefix
	switch o := js.Options(); {
	case o.Domain != "":
		prefix = "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		prefix = strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return prefix + subject
}

// registered: the destination is in the config. An attempt in flight when
// its destination was deleted must not bring back the series the delete
// removed (ForgetDestinationMetrics).
func (o *Partition) registered(destinationID string) bool {
	_, ok := o.deps.Registry.Get(destinationID)
	return ok
}

func (o *Partition) deadLetter(ev *rivorav1.Event, seq uint64, head scheduler.Head, reason rivorav1.DeadReason) *rivorav1.DeadLetter {
	if ev.GetIdempotencyConflict() != "" {
		// Why it died is the dead letter's (reason, last error); the
		// archived event is unmarked, so that an operator's replay
		// delivers it.
		ev = proto.Clone(ev).(*rivorav1.Event)
		ev.IdempotencyConflict = ""
	}
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

// afterAdvance tells the cache and the reclaimer that a lane moved past
// an attempt's entry.
func (o *Partition) afterAdvance(a *scheduler.Attempt, out scheduler.Outcome) {
	o.cache.forget(a.Entry)
	o.reclaim.noteDone(a.Lane.Subject, a.Entry.Seq)
	if out.PurgeLedger {
		o.reclaim.noteLedgerPurge(a.Lane.ID.HeadSubject(o.p))
	}
}

// Archived is what archiving a destination's (or a subscription's)
// pending events did: Now, the events made dead letters (reason deleted);
// InFlight, the events whose attempt was in flight, left to it (delivered,
// or a dead letter at their next turn if it fails, their destination or
// subscription being gone by then); Later, the events queued behind
// those, which become dead letters once those attempts end.
type Archived struct {
	Now, InFlight, Later int
}

// ArchiveDestination dead-letters every pending event of a destination that
// is not in flight (reason "deleted"). Pending includes the events INGEST
// acknowledged for the partition that its mover has not moved yet: it
// waits for them first, for a while (awaitMoved).
func (o *Partition) ArchiveDestination(ctx context.Context, destinationID string) (Archived, error) {
	if err := o.awaitMoved(ctx); err != nil {
		return Archived{}, err
	}
	taken, left := o.deps.Scheduler.TakeDestination(destinationID)
	if err := o.stillHandingOver(); err != nil {
		return Archived{}, err // the next owner's rebuild finds them
	}
	n, err := o.archiveOperatorTaken(ctx, destinationID, taken)
	return Archived{Now: n, InFlight: left.InFlight, Later: left.Behind}, err
}

// archiveOperatorTaken is archiveTakenLanes for an operator's call: what
// it took from the scheduler is archived whether or not the caller waits
// for the answer (an entry that failed would be out of the scheduler
// until the partition is rebuilt), within takenArchiveBound.
func (o *Partition) archiveOperatorTaken(ctx context.Context, destinationID string, taken map[*scheduler.Lane][]scheduler.Entry) (int, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), takenArchiveBound)
	defer cancel()
	return o.archiveTakenLanes(ctx, destinationID, taken)
}

// ArchiveSubscription is an operator's forced delete of a subscription
// here: it dead-letters every pending event of the subscription (at its
// destination) that is not in flight (reason "deleted"); the destination's
// other events stay. The events behind its attempts in flight are held
// back (deletingSubscriptions) until the config that deletes it arrives,
// which archives them.
//
// Pending includes the events INGEST acknowledged for the partition that
// its mover has not moved yet (the count would else leave them out, and
// they would become dead letters uncounted): it waits for the mover
// first, for a while (awaitMoved). The hold is taken before the wait, so
// that events moved meanwhile are not sent; if the call fails, it lapses
// after deletingHold (longer than moveCatchUp: the hold outlasts any
// wait).
func (o *Partition) ArchiveSubscription(ctx context.Context, destinationID, subscriptionID string) (Archived, error) {
	if _, err := o.catchUpBound(ctx); err != nil {
		return Archived{}, err // refused before any hold
	}
	o.deleting.hold(subscriptionID, o.deps.Clock.Now())
	if err := o.awaitMoved(ctx); err != nil {
		return Archived{}, err
	}
	o.deleting.hold(subscriptionID, o.deps.Clock.Now())
	taken, left := o.deps.Scheduler.TakeSubscription(destinationID, subscriptionID)
	if err := o.stillHandingOver(); err != nil {
		return Archived{}, err // the next owner's rebuild finds them
	}
	n, err := o.archiveOperatorTaken(ctx, destinationID, taken)
	return Archived{Now: n, InFlight: left.InFlight, Later: left.Behind}, err
}

// archiveSubscription is ArchiveSubscription without the wait for the
// mover: what a delivery worker does once it found the subscription
// deleted (settle), counting nothing. An event moved after it finds the
// subscription deleted at its own turn, and follows.
func (o *Partition) archiveSubscription(ctx context.Context, destinationID, subscriptionID string) (Archived, error) {
	o.deleting.hold(subscriptionID, o.deps.Clock.Now())
	taken, left := o.deps.Scheduler.TakeSubscription(destinationID, subscriptionID)
	n, err := o.archiveTakenLanes(ctx, destinationID, taken)
	return Archived{Now: n, InFlight: left.InFlight, Later: left.Behind}, err
}

// archiveTakenLanes dead-letters the entries of lanes taken from the
// scheduler (reason "deleted").
func (o *Partition) archiveTakenLanes(ctx context.Context, destinationID string, taken map[*scheduler.Lane][]scheduler.Entry) (int, error) {
	n := 0
	var firstErr error
	for lane, entries := range taken {
		for i, e := range entries {
			var head scheduler.Head // the head's tries; the entries behind it had none
			if i == 0 {
				head = lane.TakenHead()
			}
			if err := o.archiveTaken(ctx, destinationID, lane, e, head); err != nil {
				firstErr = cmpErr(firstErr, err)
				continue
			}
			n++
		}
		o.reclaim.noteLedgerPurge(lane.ID.HeadSubject(o.p))
	}
	return n, firstErr
}

// takenArchiveBound bounds archiveOperatorTaken, which its caller
// cannot cancel.
const takenArchiveBound = time.Minute

// archiveTaken dead-letters one entry taken from its lane (reason
// "deleted"), with head its attempt state.
func (o *Partition) archiveTaken(ctx context.Context, destinationID string, lane *scheduler.Lane, e scheduler.Entry, head scheduler.Head) error {
	o.cache.forget(e)
	ev, err := o.Load(ctx, &scheduler.Attempt{Lane: lane, Entry: e})
	if err != nil {
		return err
	}
	dl := o.deadLetter(ev, e.Seq, head, rivorav1.DeadReason_DEAD_REASON_DELETED)
	if err := o.dead.record(ctx, dl); err != nil {
		return err
	}
	o.reclaim.noteDone(lane.Subject, e.Seq)
	o.deps.History.Record(deadOutcome(ev, head, dl.Reason))
	deadTotal.WithLabelValues(destinationID, reasonLabel(dl.Reason)).Inc()
	return nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// deadOutcome is an event's dead record; it carries the head's attempts
// and last failure, so a listing needs no other record.
func deadOutcome(ev *rivorav1.Event, head scheduler.Head, reason rivorav1.DeadReason) *rivorav1.EventOutcome {
	o := outcome(ev, rivorav1.EventOutcome_KIND_DEAD, nil)
	o.DeadReason = reason
	o.Attempts, o.LastStatus, o.LastError = int32(head.Attempts), int32(head.LastStatus), head.LastError
	return o
}

func outcome(ev *rivorav1.Event, kind rivorav1.EventOutcome_Kind, a *rivorav1.Attempt) *rivorav1.EventOutcome {
	o := &rivorav1.EventOutcome{}
	setOutcome(o, ev, kind, a)
	return o
}

// setOutcome fills a zero outcome in: an event's record of kind.
func setOutcome(o *rivorav1.EventOutcome, ev *rivorav1.Event, kind rivorav1.EventOutcome_Kind, a *rivorav1.Attempt) {
	o.Kind, o.EventId, o.DestinationId, o.CustomerId = kind, ev.GetEventId(), ev.GetDestinationId(), ev.GetCustomerId()
	o.LaneKey, o.Type, o.AcceptedAt, o.Attempt = ev.GetLaneKey(), ev.GetType(), ev.GetAcceptedAt(), a
	o.SubscriptionId = ev.GetSubscriptionId()
}

// cacheBudget bounds the bytes of events a partition keeps in memory.
const cacheBudget = 64 << 20

// eventCache counts the bytes of the events kept in memory with their
// scheduler entries; above cacheBudget entries keep only their sequence
// and delivery loads the event from the lane store.
//
// It keeps each event as its encoding (a string: one object the garbage
// collector never looks into), not decoded: a decoded event is a dozen
// objects with pointers, and marking 64 MiB of them per partition on
// every cycle cost PublishBatch about a fifth of its server CPU (issue
// 26). Delivery decodes the event it sends, as it does one loaded from
// the lane store.
//
// Invariant: bytes is the sum of cachedSize over the encodings keep
// returned and forget has not given back. Only one goroutine keeps at a
// time (the writer's ackLoop), so bytes never exceeds cacheBudget.
type eventCache struct {
	bytes atomic.Int64
}

// entryOverhead is what a cached encoding costs besides its bytes: its
// slot in its destination's map of cached events (key and string
// header, 32 B, at the map's load factor; measured:
// TestEventCacheCountsTheHeapItsEventsTake).
const entryOverhead = 48

// cachedSize is what an encoding of n bytes costs on the heap: a
// sixteenth more for its size class.
func cachedSize(n int) int64 { return int64(entryOverhead + n + n/16) }

// keep returns a copy of data (an event's encoding) to hold in its
// scheduler entry while the cache has room, else "" (delivery then loads
// it by sequence): a large backlog costs memory per lane and entry, not
// per payload byte. The copy is the cache's own: data may share its
// array with what the caller keeps or reuses (a message's headers).
func (c *eventCache) keep(data []byte) string {
	size := cachedSize(len(data))
	if len(data) == 0 || c.bytes.Load()+size > cacheBudget {
		return ""
	}
	c.bytes.Add(size)
	return string(data)
}

// forget gives an entry's cached bytes back.
func (c *eventCache) forget(e scheduler.Entry) {
	if e.Data != "" {
		c.bytes.Add(-cachedSize(len(e.Data)))
	}
}
