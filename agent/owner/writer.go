package owner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/edge"
	"github.com/rivora/rivora/internal/fingerprint"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Item is one event to append to the lane store.
type Item struct {
	Event *rivorav1.Event
	// Data is the encoded Event.
	Data []byte
	// MsgID is the dedup id: the event id, or a replay's own id.
	MsgID string
	// Fingerprint, when set, is stamped on the stored copy
	// (fingerprint.Header): a keyed event's, for comparing a later
	// duplicate with it.
	Fingerprint []byte
	// forwarded is set for an edge's copy the mover moves (its conflict
	// is told as an edge's).
	forwarded *edge.Forwarded
}

// Stored is where Append put an event: the stream and sequence of its
// copy, the original's when it was a duplicate (the idempotency check
// reads it there).
type Stored struct {
	Stream    string
	Seq       uint64
	Duplicate bool
}

// ErrNotOwned: the partition is not running here (released or stopping).
var ErrNotOwned = errors.New("partition not owned by this agent")

// ErrWriteFailed: the lane store refused or lost a write. Which events of
// the writes in flight were stored is unknown, so the partition stops; the
// agent reopens it, and the rebuild from the stream registers exactly what
// is stored, in order. Callers retry with the same dedup ids.
var ErrWriteFailed = errors.New("lane store write failed; partition restarting")

// ErrStoreLeaderMoving wraps an ErrWriteFailed whose write found no
// leader of the lane store to take it (nats: no responders), or that the
// store's old leader dropped when another was elected
// (natsd.ErrLeaderChanged): that write was not stored, or its ack was
// lost (others of its group may have been stored: the rebuild registers
// them), and while a leader moves (a rolling restart) that is routine. A
// store without a leader for long fails the reopen, which says so.
var ErrStoreLeaderMoving = errors.New("the lane store had no leader to take the write")

// writeBatch is the most items one group commit collects.
const writeBatch = 2048

// laneWriter is the lane store's single writer. It owns the append
// pipeline (appendCh → run → ackLoop), the registered mark and the
// fast-path gate.
//
// Invariants:
//   - registeredThrough only grows, and only by the exact next sequence:
//     a group whose writes the store answered with anything else (a gap,
//     a reorder, a fenced-off owner's late write) registers nothing and
//     stops the writer (ErrWriteFailed); the rebuild then registers
//     exactly what is stored;
//   - registeredThrough covers a sequence only once the scheduler holds
//     it, so reclaim, which never purges above it, cannot drop a stored,
//     undelivered event;
//   - groups are registered in the order they were published, which keeps
//     every lane FIFO;
//   - every request handed to the writer is answered exactly once, also
//     when the writer stops (writerDone is closed only once it has);
//   - once detached, it hands the scheduler nothing: the partition's
//     lanes there were dropped, and a lane registered after that would be
//     one of a partition not open here (see detach).
type laneWriter struct {
	p     int
	js    jetstream.JetStream
	fence *fence
	sched *scheduler.Scheduler
	cache *eventCache
	log   *slog.Logger

	// registeredThrough is the highest lane-store sequence the scheduler
	// knows (or, once detached, would know); anything above it is stored
	// but not yet registered and must never be reclaimed.
	registeredThrough atomic.Uint64

	// schedMu orders register's hand-over to the scheduler with detach:
	// once detached is set, nothing more reaches the scheduler.
	schedMu  sync.Mutex
	detached bool

	gate gate
	// movedThrough is the INGEST stream sequence through which the mover
	// has handled every message for this partition (stored in the lanes,
	// or dropped); ingestLook compares INGEST's last one with it, and
	// behindIngest and the mover's openDirect forwardedThrough.
	movedThrough atomic.Uint64
	// forwardedThrough is the highest INGEST sequence an append forwarded
	// there (forward); above movedThrough, it may still wait for the
	// mover (mayWaitInIngest).
	forwardedThrough atomic.Uint64
	// ingestLook coalesces the direct path's looks at INGEST.
	ingestLook ingestLook
	ingestMu   sync.Mutex
	ingest     jetstream.Stream // INGEST's handle, once read (ingestStream)
	// ingestLast is the direct get subject of INGEST's last message for
	// this partition.
	ingestLast string
	// recent are the dedup ids stored in the last dedup window
	// (recent.go).
	recent *recentIDs

	appendCh   chan *appendReq
	writerDone chan struct{}
	// abandon, when closed, ends the wait for acks still out: the store
	// stalled (watchStore), and what they stored is for the next owner's
	// rebuild to find. Nil: wait for every ack (up to ackWait).
	abandon <-chan struct{}
	// ackWait bounds the wait for one group's acks (0: ackTimeout).
	ackWait time.Duration
}

func newLaneWriter(p int, js jetstream.JetStream, f *fence, sched *scheduler.Scheduler, cache *eventCache, log *slog.Logger) *laneWriter {
	w := &laneWriter{
		p: p, js: js, fence: f, sched: sched, cache: cache, log: log,
		appendCh:   make(chan *appendReq),
		writerDone: make(chan struct{}),
	}
	if js != nil { // a test's writer that never looks at INGEST
		w.ingestLast = apiSubject(js, "DIRECT.GET."+lanes.IngestStream+"."+lanes.IngestFilter(p))
	}
	return w
}

// registered is the registered mark: every lane-store sequence up to it is
// known to the scheduler.
func (w *laneWriter) registered() uint64 { return w.registeredThrough.Load() }

// restored sets the registered mark to the store's last sequence once the
// rebuild registered everything stored (before the writer runs).
func (w *laneWriter) restored(lastSeq uint64) { w.registeredThrough.Store(lastSeq) }

type appendReq struct {
	items []Item
	done  chan appendResult
}

type appendResult struct {
	stored int      // items[:stored] are stored and registered
	at     []Stored // per stored item: where (a duplicate: where the original is)
	err    error    // why items[stored:] were not
}

// MayHold is false only when the partition certainly did not store msgID
// within the dedup window: not in its lanes (recent.go), and no event of
// its is waiting in INGEST for the mover. The ingest gateway then needs no
// probe to know a batch's event is new here.
//
// The lanes' filter learns an id only once the event is in the lanes, so
// while an event the partition took may still wait in INGEST — the fast
// path's gate is closed (just after the open every append goes through
// INGEST, behind what a previous owner or another agent left there), or
// an append forwarded there was not moved yet — every id may be held, and
// the gateway probes INGEST too. Without this, a batch reusing the key of
// an event just forwarded was found out only by the store, after the
// batch's other events were stored.
func (o *Partition) MayHold(msgID string) bool {
	return o.writer.mayWaitInIngest() || o.writer.recent.mayHold(msgID)
}

// WaitsInIngest reports whether INGEST holds an event of this partition
// its mover has not moved yet: one look at INGEST, shared with the
// concurrent callers that asked before it began (as the direct path's).
// MayHold knows only this agent's own forwards; an event another agent
// stored in INGEST for this partition is seen only by looking. A batch's
// idempotency check asks once per partition before it skips the probes
// MayHold would let it skip: that event's key, reused in the batch, would
// else be found out only by the store, after the batch's other events.
func (o *Partition) WaitsInIngest(ctx context.Context) (bool, error) {
	w := o.writer
	if w.mayWaitInIngest() {
		return true, nil
	}
	return w.ingestLook.ahead(ctx, w.writerDone, w.lookIngest)
}

// mayWaitInIngest reports whether an event of this partition may be in
// INGEST, not yet moved into the lanes: the gate is closed, or a forward
// stored one past what the mover has handled.
func (w *laneWriter) mayWaitInIngest() bool {
	if _, open, _ := w.gate.observe(); !open {
		return true
	}
	return w.forwardedThrough.Load() > w.movedThrough.Load()
}

// Append stores events accepted by this agent for this partition. Once the
// partition is open for it, that is the fast path: straight into the
// lanes, one write instead of INGEST then a move. Until then (just after
// the partition opened, while INGEST may still hold older events of the
// same lanes) they go through INGEST, behind those. It returns once they
// are durable, with where each is (Stored: a duplicate's original).
func (o *Partition) Append(ctx context.Context, items []Item) ([]Stored, error) {
	return o.writer.append(ctx, items)
}

func (w *laneWriter) append(ctx context.Context, items []Item) ([]Stored, error) {
	if w.gate.beginForward() {
		defer w.gate.endForward()
		return w.forward(ctx, items)
	}
	// An earlier event of these lanes may wait in INGEST, acknowledged,
	// for the mover: then these go through INGEST too, behind it.
	ahead, err := w.behindIngest(ctx)
	if err != nil {
		return nil, err
	}
	if ahead {
		return w.forward(ctx, items)
	}
	res := w.submit(ctx, items)
	if res.err != nil {
		if res.stored > 0 && !errors.Is(res.err, ErrNotOwned) {
			return res.at, fmt.Errorf("stored %d of %d: %w", res.stored, len(items), res.err)
		}
		return res.at, res.err
	}
	return res.at, nil
}

// behindIngest reports whether an event of this partition waits in
// INGEST for the mover: one this agent forwarded there is known without a
// look (a look could miss it: a server cut off while it led INGEST still
// answers from its stale copy for a while); one another agent stored
// there is found by a look, which the gate keeps from such a server's
// answers (mover.closeDirect).
func (w *laneWriter) behindIngest(ctx context.Context) (bool, error) {
	if w.forwardedThrough.Load() > w.movedThrough.Load() {
		return true, nil
	}
	return w.ingestLook.ahead(ctx, w.writerDone, w.lookIngest)
}

// ingestLookTimeout bounds one look at INGEST (lookIngest). INGEST's
// leader answers at once; none within this is a leader that stopped with
// the look unanswered (a rolling restart), and the publishes waiting on
// it fail Unavailable, which their callers retry, before a short client
// deadline (5 s, say) rather than at it.
const ingestLookTimeout = 2 * time.Second

// lookIngest reports whether INGEST holds a message for this partition
// the mover has not handled yet: its last one for the partition, read
// from the stream's leader, is past movedThrough. INGEST is a work queue,
// so what the mover acked is gone and a partition with nothing waiting
// has no last message.
func (w *laneWriter) lookIngest(callerCtx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(callerCtx, ingestLookTimeout)
	defer cancel()
	stream, err := w.ingestStream(ctx)
	if err != nil {
		return false, err
	}
	var last uint64
	if info := stream.CachedInfo(); info != nil && info.Config.AllowDirect {
		last, err = w.lastInIngestDirect(ctx)
	} else {
		var msg *jetstream.RawStreamMsg
		if msg, err = stream.GetLastMsgForSubject(ctx, lanes.IngestFilter(w.p)); err == nil {
			last = msg.Sequence
		}
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		// The handle's config decides how it reads (a direct get while
		// INGEST allows one): read it again next time, in case INGEST's
		// config changed. Not when the caller gave up (a client gone or
		// out of time), nor when the look ran out of its own time (a
		// leader moving, a stream behind a flood): neither says anything
		// of INGEST's config.
		if callerCtx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			w.forgetIngestStream()
		}
		return false, fmt.Errorf("read INGEST's last message for partition %d: %w", w.p, err)
	}
	return last > w.movedThrough.Load(), nil
}

// firstUnmoved is the INGEST sequence of this partition's first message
// past what the mover handled (0: none), read from the stream's leader
// (or, with one replica, its one copy).
func (w *laneWriter) firstUnmoved(ctx context.Context) (uint64, error) {
	stream, err := w.ingestStream(ctx)
	if err != nil {
		return 0, err
	}
	msg, err := stream.GetMsg(ctx, w.movedThrough.Load()+1, jetstream.WithGetMsgSubject(lanes.IngestFilter(w.p)))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, nil
	case err != nil:
		if ctx.Err() == nil {
			w.forgetIngestStream()
		}
		return 0, fmt.Errorf("read INGEST's first unmoved message for partition %d: %w", w.p, err)
	}
	return msg.Sequence, nil
}

// lastInIngestDirect is the sequence of INGEST's last message for this
// partition, by a direct get (jetstream.ErrMsgNotFound: none). Every
// single Publish looks once, so this reads the sequence header alone:
// the jetstream client's GetLastMsgForSubject encodes a JSON request it
// does not send and decodes the whole message, a third of the look's
// CPU and half its allocations.
func (w *laneWriter) lastInIngestDirect(ctx context.Context) (uint64, error) {
	msg, err := w.js.Conn().RequestWithContext(ctx, w.ingestLast, nil)
	if err != nil {
		return 0, err
	}
	if len(msg.Data) == 0 {
		// Every INGEST message is an event with bytes: an empty answer
		// is a status.
		if status := msg.Header.Get("Status"); status == "404" {
			return 0, jetstream.ErrMsgNotFound
		} else if status != "" {
			return 0, fmt.Errorf("direct get: status %s %s", status, msg.Header.Get("Description"))
		}
	}
	seq, err := strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("direct get: sequence header: %w", err)
	}
	return seq, nil
}

// ingestStream is INGEST's handle, read once.
func (w *laneWriter) ingestStream(ctx context.Context) (jetstream.Stream, error) {
	w.ingestMu.Lock()
	defer w.ingestMu.Unlock()
	if w.ingest != nil {
		return w.ingest, nil
	}
	stream, err := w.js.Stream(ctx, lanes.IngestStream)
	if err != nil {
		return nil, fmt.Errorf("read %s stream: %w", lanes.IngestStream, err)
	}
	w.ingest = stream
	return stream, nil
}

// forgetIngestStream drops INGEST's handle (ingestStream reads it anew).
func (w *laneWriter) forgetIngestStream() {
	w.ingestMu.Lock()
	w.ingest = nil
	w.ingestMu.Unlock()
}

// moved records that the mover handled every INGEST message for this
// partition through stream sequence seq.
func (w *laneWriter) moved(seq uint64) {
	if seq > w.movedThrough.Load() { // only the mover writes it
		w.movedThrough.Store(seq)
	}
}

// forwarded records that a forward stored (or found) an event at INGEST
// stream sequence seq, before its caller is answered.
func (w *laneWriter) forwarded(seq uint64) {
	for {
		have := w.forwardedThrough.Load()
		if seq <= have || w.forwardedThrough.CompareAndSwap(have, seq) {
			return
		}
	}
}

// ingestLook coalesces concurrent looks at INGEST: one look serves every
// caller that asked before it began. A caller never shares a look begun
// before it asked, for that look may predate the INGEST acknowledgement
// of the caller's earlier event (a client publishes its lane's next event
// only once the previous one was acknowledged).
//
// A caller that finds nobody looking looks itself, on its own goroutine:
// a lone Publish (the SDKs' usual call) then hands nothing to another
// goroutine and back. Callers that ask while a look is under way wait
// for the next round, which one goroutine runs for all of them.
type ingestLook struct {
	mu      sync.Mutex
	next    *lookRound // the round that begins next; callers join it
	running bool       // a look is under way (a caller's, or run's rounds)
}

type lookRound struct {
	done  chan struct{}
	ahead bool
	err   error
}

// ahead answers from a look begun after the call: its own when nobody is
// looking, else the next round's. When stopped is closed (the writer
// stopped) before the call, or while it waits for a round, ErrNotOwned; a
// caller's own look, bounded by ctx and ingestLookTimeout, ends first
// (what it appends next finds the writer stopped).
func (l *ingestLook) ahead(ctx context.Context, stopped <-chan struct{}, look func(context.Context) (bool, error)) (ahead bool, err error) {
	select {
	case <-stopped:
		return false, ErrNotOwned
	default:
	}
	l.mu.Lock()
	if !l.running {
		l.running = true
		l.mu.Unlock()
		// Deferred: should look ever panic, the callers that asked
		// meanwhile still get their round.
		defer l.handOver(look)
		return look(ctx)
	}
	if l.next == nil {
		l.next = &lookRound{done: make(chan struct{})}
	}
	r := l.next
	l.mu.Unlock()
	select {
	case <-r.done:
		return r.ahead, r.err
	case <-stopped:
		return false, ErrNotOwned
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// handOver ends a caller's own look: the callers that asked meanwhile
// get their round from run.
func (l *ingestLook) handOver(look func(context.Context) (bool, error)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.next == nil {
		l.running = false
		return
	}
	go l.run(look)
}

// run runs rounds while callers wait for one.
func (l *ingestLook) run(look func(context.Context) (bool, error)) {
	for {
		l.mu.Lock()
		r := l.next
		l.next = nil
		if r == nil {
			l.running = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		r.ahead, r.err = look(context.Background())
		close(r.done)
	}
}

// forward stores events in INGEST, for the mover.
func (w *laneWriter) forward(ctx context.Context, items []Item) ([]Stored, error) {
	futures := make([]jetstream.PubAckFuture, len(items))
	for i, it := range items {
		msg := nats.NewMsg(lanes.IngestSubject(w.p, it.Event.GetDestinationId()))
		msg.Data = it.Data
		msg.Header.Set(jetstream.MsgIDHeader, it.MsgID)
		fingerprint.Set(msg, it.Fingerprint)
		f, err := w.js.PublishMsgAsync(msg)
		if err != nil {
			return nil, err
		}
		futures[i] = f
	}
	at := make([]Stored, len(items))
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			at[i] = Stored{Stream: lanes.IngestStream, Seq: ack.Sequence, Duplicate: ack.Duplicate}
			if !ack.Duplicate {
				// A duplicate's sequence is its original's, which may
				// be one a previous run moved: it would hold MayHold
				// true until the partition reopens. An original another
				// agent left unmoved is WaitsInIngest's to see.
				w.forwarded(ack.Sequence)
			}
		case err := <-f.Err():
			return at[:i], err
		case <-ctx.Done():
			return at[:i], ctx.Err()
		}
	}
	return at, nil
}

// submit hands items to the writer and waits for its answer.
func (w *laneWriter) submit(ctx context.Context, items []Item) appendResult {
	req := &appendReq{items: items, done: make(chan appendResult, 1)}
	select {
	case w.appendCh <- req:
	case <-w.writerDone:
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

// flight is one group of appends whose writes are out: one burst, the
// requests' items in order.
type flight struct {
	reqs     []*appendReq
	burst    *natsd.Burst
	subjects [][]string // per request, per item: the lane subject
	err      error      // the fence refused, or a publish failed
}

// storedAck is the store's answer to one write.
type storedAck struct {
	seq uint64
	dup bool
}

// ackTimeout bounds the wait for a group's acknowledgements: the store is
// in this process, so none for this long means the connection lost them;
// the partition then restarts (ErrWriteFailed) and its rebuild registers
// what was stored.
//
// In a cell the lane store's leader may be another agent's server: a
// write on its way to a leader that dies or is cut off is lost, and its
// ack never comes. The partition then waits about its store stall
// timeout (Partition.ackWait), not the minute.
const ackTimeout = time.Minute

// run is the lane store's single writer. It batches concurrent appends
// (group commit) and keeps several groups in flight; ackLoop registers
// what was stored with the scheduler in stream order, which keeps every
// lane FIFO and the registered mark exact.
func (w *laneWriter) run(ctx context.Context) error {
	defer close(w.writerDone)
	// Each group is one burst of core NATS publishes whose acks come back
	// to one subscription (natsd.Publisher): far cheaper per event than a
	// JetStream future each.
	pub, err := natsd.NewPublisher(w.js.Conn())
	if err != nil {
		return err
	}
	defer pub.Close()
	// A write the lane store's old leader dropped fails soon after the
	// stream elected another (the partition restarts, its rebuild finds
	// what was stored), rather than after the store's stall timeout.
	if err := pub.FailOnLeaderChange(lanes.LanesStream(w.p)); err != nil {
		return err
	}
	// A stalled store answers nothing: closing the publisher answers every
	// burst still waiting (ErrPublisherClosed), so the partition stops now
	// rather than after ackTimeout.
	running := make(chan struct{})
	defer close(running)
	go func() {
		select {
		case <-w.abandon:
			pub.Close()
		case <-running:
		}
	}()
	flights := make(chan *flight, 32)
	// The headers of every message this writer publishes, reused.
	var header storedHeader
	failed := make(chan struct{})
	ackDone := make(chan error, 1)
	go func() { ackDone <- w.ackLoop(flights, failed) }()
	// stop closes the pipeline and waits until every caller was answered.
	stop := func() error {
		close(flights)
		return <-ackDone
	}
	for {
		var first *appendReq
		select {
		case first = <-w.appendCh:
		case <-failed:
			return stop()
		case <-ctx.Done():
			stop()
			return nil
		}
		flights <- w.publish(pub, &header, w.group(first))
	}
}

// group collects the requests waiting behind first, up to writeBatch items.
func (w *laneWriter) group(first *appendReq) []*appendReq {
	batch := []*appendReq{first}
	n := len(first.items)
	for n < writeBatch {
		select {
		case req := <-w.appendCh:
			batch = append(batch, req)
			n += len(req.items)
		default:
			return batch
		}
	}
	return batch
}

// laneOf is an event's lane: a subscription's events have their own
// (lanes.EventLane).
func laneOf(ev *rivorav1.Event) lanes.ID { return lanes.EventLane(ev) }

// publish sends every item of a group to the lane store as one burst,
// without waiting; h is run's, reused for every message.
func (w *laneWriter) publish(pub *natsd.Publisher, h *storedHeader, batch []*appendReq) *flight {
	f := &flight{reqs: batch}
	if f.err = w.fence.check(); f.err != nil {
		return f
	}
	n := 0
	for _, req := range batch {
		n += len(req.items)
	}
	if f.burst, f.err = pub.Start(n); f.err != nil {
		return f
	}
	f.subjects = make([][]string, len(batch))
	k := 0
	for r, req := range batch {
		f.subjects[r] = make([]string, len(req.items))
		for i, it := range req.items {
			subject := laneOf(it.Event).Subject(w.p)
			f.subjects[r][i] = subject
			if err := f.burst.Publish(k, subject, h.of(it.MsgID, it.Fingerprint), it.Data); err != nil {
				f.burst.Abandon(k, err)
				f.err = err
				return f
			}
			k++
		}
	}
	return f
}

// storedHeader is a stored event's headers: its dedup id, and its
// fingerprint when it has one (fingerprint.Set). The writer reuses one
// for every message it publishes, which costs no map and no slices per
// event or per group (a lone Publish is a group): a publish encodes the
// headers before it returns and keeps none of them.
type storedHeader struct {
	h         nats.Header
	msgID, fp []string
}

// of is the headers of one message, valid until the next call.
func (s *storedHeader) of(msgID string, fp []byte) nats.Header {
	if s.h == nil {
		s.h, s.msgID, s.fp = make(nats.Header, 2), make([]string, 1), make([]string, 1)
		s.h[jetstream.MsgIDHeader] = s.msgID
	}
	s.msgID[0] = msgID
	if len(fp) == 0 {
		delete(s.h, fingerprint.Header)
		return s.h
	}
	s.fp[0] = fingerprint.Encode(fp)
	s.h[fingerprint.Header] = s.fp
	return s.h
}

// ackLoop waits for the writes of each group in order, registers what was
// stored and answers the callers. On the first failure it closes failed,
// answers every caller still waiting with ErrWriteFailed, and returns the
// failure once flights is closed.
func (w *laneWriter) ackLoop(flights <-chan *flight, failed chan<- struct{}) error {
	var failure error
	for f := range flights {
		if failure != nil {
			f.fail()
			continue
		}
		if err := w.settle(f); err != nil {
			failure = w.writeFailed(err)
			close(failed)
		}
	}
	return failure
}

// writeFailed logs a failed write and is the partition's error: one that
// found no stream leader to take it (nats: no responders) was not stored,
// and is routine while the stream's leader moves (ErrStoreLeaderMoving).
func (w *laneWriter) writeFailed(err error) error {
	if errors.Is(err, nats.ErrNoResponders) {
		w.log.Warn("lane store had no leader to take a write (its leader is moving); restarting the partition", "error", err)
		return fmt.Errorf("%w: %w: %v", ErrWriteFailed, ErrStoreLeaderMoving, err)
	}
	if errors.Is(err, natsd.ErrLeaderChanged) {
		w.log.Warn("lane store write unanswered after its leader changed (dropped, or its ack lost); restarting the partition", "error", err)
		return fmt.Errorf("%w: %w: %v", ErrWriteFailed, ErrStoreLeaderMoving, err)
	}
	w.log.Error("lane store write failed; restarting the partition", "error", err)
	return fmt.Errorf("%w: %v", ErrWriteFailed, err)
}

// settle waits for one group's acks and registers it; all or nothing.
func (w *laneWriter) settle(f *flight) error {
	if f.err != nil {
		f.fail()
		return f.err
	}
	wait := w.ackWait
	if wait <= 0 {
		wait = ackTimeout
	}
	acks, err := f.wait(wait)
	if err == nil {
		err = w.register(f, acks)
	}
	if err != nil {
		f.fail()
		return err
	}
	w.fence.confirm(time.Now())
	w.recent.add(f.reqs)
	f.answer(lanes.LanesStream(w.p), acks)
	return nil
}

// fail answers every caller of the group with ErrWriteFailed.
func (f *flight) fail() {
	for _, req := range f.reqs {
		req.done <- appendResult{err: ErrWriteFailed}
	}
}

// wait collects the store's answer to every write of the group, in order;
// the first refusal, or timeout without every ack, ends it.
func (f *flight) wait(timeout time.Duration) ([][]storedAck, error) {
	all, err := f.burst.Wait(context.Background(), timeout)
	if err != nil {
		return nil, err
	}
	acks := make([][]storedAck, len(f.reqs))
	k := 0
	for r, req := range f.reqs {
		acks[r] = make([]storedAck, len(req.items))
		for i := range acks[r] {
			acks[r][i] = storedAck{seq: all[k].Seq, dup: all[k].Duplicate}
			k++
		}
	}
	return acks, nil
}

// answer tells every caller of a registered group where its events are.
func (f *flight) answer(stream string, acks [][]storedAck) {
	for r, req := range f.reqs {
		at := make([]Stored, len(acks[r]))
		for i, a := range acks[r] {
			at[i] = Stored{Stream: stream, Seq: a.seq, Duplicate: a.dup}
		}
		req.done <- appendResult{stored: len(req.items), at: at}
	}
}

// register hands a group's new events to the scheduler and then moves the
// registered mark past them; nothing of the group when a write is not the
// exact next sequence (see nextSequence).
func (w *laneWriter) register(f *flight, acks [][]storedAck) error {
	items := 0
	for _, req := range f.reqs {
		items += len(req.items)
	}
	// Sized for the group up front: no map growth per new lane.
	batch := laneBatch{byLane: make(map[string]int, items)}
	through := w.registeredThrough.Load()
	for r, req := range f.reqs {
		for i, a := range acks[r] {
			next, err := nextSequence(through, a)
			if err != nil {
				return err
			}
			if !next {
				continue // already registered (or delivered)
			}
			ev := req.items[i].Event
			// A duplicate's stored copy is the original's, not this
			// item's: delivery loads it.
			var data []byte
			if !a.dup {
				data = req.items[i].Data
			}
			batch.add(f.subjects[r][i], ev, scheduler.Entry{Seq: a.seq, EventID: ev.GetEventId(), AcceptedAt: ev.GetAcceptedAt().AsTime()}, data)
			through = a.seq
		}
	}
	w.schedMu.Lock()
	if !w.detached {
		// Cached only now that the whole group is registered: a group
		// refused above, or one a detached writer stored, keeps nothing.
		batch.keep(w.cache)
		w.sched.AppendAll(w.p, batch.appends)
	}
	w.schedMu.Unlock()
	// Only once the scheduler holds them may reclaim count these sequences
	// as registered: before, its low-water mark does not see them and a
	// purge would drop stored, undelivered events. (Once detached, reclaim
	// purges nothing; the mark still moves so that the next group's
	// sequences are checked against it.)
	w.registeredThrough.Store(through)
	return nil
}

// detach stops handing stored events to the scheduler, for good; call it
// before the scheduler drops the partition. A partition being handed off
// runs (its mover still moves INGEST) until its attempts in flight ended:
// a lane registered meanwhile would stay in the scheduler, waiting, until
// this agent took the partition back, and the rebuild would then put the
// whole lane behind it: its events would go out first, ahead of their
// lane, and again in their place. What is stored after the detach is for
// the next owner's rebuild to find.
func (w *laneWriter) detach() {
	w.schedMu.Lock()
	w.detached = true
	w.schedMu.Unlock()
}

// isDetached reports whether detach was called.
func (w *laneWriter) isDetached() bool {
	w.schedMu.Lock()
	defer w.schedMu.Unlock()
	return w.detached
}

// nextSequence reports whether a stored write extends the registered mark
// through: false for a duplicate at or below it (already registered, or
// delivered), an error for anything but the exact next sequence.
//
// The writer is the lane store's only one, so what it stores gets exactly
// the next sequences, in order. Anything else (writes reordered across a
// stream leader change, or a fenced-off owner's late write) means the
// store and the scheduler could disagree: register nothing and restart the
// partition, whose rebuild registers exactly what is stored. (Registering
// past a gap would let reclaim purge the events in the gap before they
// are registered.)
func nextSequence(through uint64, a storedAck) (bool, error) {
	switch {
	case a.dup && a.seq <= through:
		return false, nil
	case a.seq != through+1:
		return false, fmt.Errorf("lane store gave sequence %d (duplicate %v), expected %d: writes out of order; rebuilding", a.seq, a.dup, through+1)
	}
	return true, nil
}

// laneBatch groups a group's new entries by lane, lanes in the order they
// first appear, entries in sequence order.
type laneBatch struct {
	byLane  map[string]int // subject → index in appends
	appends []scheduler.LaneAppend
	// data is, beside each entry of appends, its event's stored encoding
	// (nil: not to be cached).
	data [][][]byte
}

func (b *laneBatch) add(subject string, ev *rivorav1.Event, e scheduler.Entry, data []byte) {
	if b.byLane == nil {
		b.byLane = make(map[string]int)
	}
	k, seen := b.byLane[subject]
	if !seen {
		k = len(b.appends)
		b.byLane[subject] = k
		b.appends = append(b.appends, scheduler.LaneAppend{ID: laneOf(ev), Subject: subject})
		b.data = append(b.data, nil)
	}
	b.appends[k].Entries = append(b.appends[k].Entries, e)
	b.data[k] = append(b.data[k], data)
}

// keep gives each entry the cache's copy of its encoding while the cache
// has room.
func (b *laneBatch) keep(c *eventCache) {
	for k, entries := range b.appends {
		for j := range entries.Entries {
			entries.Entries[j].Data = c.keep(b.data[k][j])
		}
	}
}

// gate is the fast-path gate: appends go straight into the lanes (direct)
// only once the mover moved every event INGEST held for this partition
// while nothing was on its way there (mover.openDirect); until then they
// go through INGEST (forward), behind the events it may still hold.
//
// Invariants: it opens only if no forward was in flight, and none began,
// between the mover's checks (observe) and open — forwardGen counts every
// forward begun; close (INGEST elected a leader) makes every later append
// forward until it opens again, and an open begun before it fails.
type gate struct {
	mu         sync.Mutex
	direct     bool
	forwarding int
	forwardGen uint64
}

// beginForward reports whether the gate is still closed; then it counts a
// forward in flight, which the caller ends with endForward.
func (g *gate) beginForward() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.direct {
		return false
	}
	g.forwarding++
	g.forwardGen++
	return true
}

func (g *gate) endForward() {
	g.mu.Lock()
	g.forwarding--
	g.mu.Unlock()
}

// observe reports whether the gate is open, else whether a forward is in
// flight, and the generation to pass to open once INGEST proved empty.
func (g *gate) observe() (gen uint64, open, busy bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.forwardGen, g.direct, g.forwarding > 0
}

// open opens the gate unless a forward is in flight or began since observe
// returned gen; it reports whether the gate is open.
func (g *gate) open(gen uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.forwarding == 0 && g.forwardGen == gen {
		g.direct = true
	}
	return g.direct
}

// close closes the gate; it reports whether it was open. An open whose
// observe came before it fails.
func (g *gate) close() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	was := g.direct
	g.direct = false
	g.forwardGen++
	return was
}
