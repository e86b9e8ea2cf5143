package owner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// rebuild reads the ledger and then scans the lane store, installing every
// pending lane in the scheduler.
func (o *Partition) rebuild(ctx context.Context) error {
	r := newRebuild(o)
	if err := r.readLedger(ctx); err != nil {
		return fmt.Errorf("read ledger: %w", err)
	}
	if !r.fromSnapshot(ctx) {
		if err := r.scanLanes(ctx); err != nil {
			return err
		}
	}
	r.install()
	return nil
}

// rebuildState is one rebuild of the partition's scheduler view: first
// what the ledger says (lane heads, dead and done sequences), then what
// the lane store holds. Nothing reaches the scheduler before install.
type rebuildState struct {
	o        *Partition
	start    time.Time
	epochs   epochFilter
	heads    map[string]*rivorav1.LaneHead // lane subject → head state
	deadSeqs map[uint64]bool
	doneSet  map[uint64]bool
	dead     []queuedDead
	// budgets: the destinations' budgets as saved (budgets.go), by
	// destination; budgetPrefix is their ledger subjects' prefix.
	budgets      map[string]scheduler.SavedBudget
	budgetPrefix string

	lastSeq uint64                  // the lane store's last sequence when its scan began
	found   map[string]*rebuiltLane // lane subject → its pending entries
	order   []string                // lane subjects, in the order first found
	events  int
	// snapshot: the lanes came from a pending snapshot (snapshot.go), not
	// a scan of the lane store.
	snapshot bool
}

type rebuiltLane struct {
	id      lanes.ID
	entries scheduler.Restored
}

func newRebuild(o *Partition) *rebuildState {
	return &rebuildState{
		o:        o,
		start:    time.Now(),
		epochs:   epochFilter{own: o.lease.Epoch},
		heads:    make(map[string]*rivorav1.LaneHead),
		deadSeqs: make(map[uint64]bool),
		doneSet:  make(map[uint64]bool),
		found:    make(map[string]*rebuiltLane),

		budgets:      make(map[string]scheduler.SavedBudget),
		budgetPrefix: lanes.BudgetSubject(o.p, ""),
	}
}

// epochFilter admits ledger entries, read in ledger order, by the epoch
// they were written under. An entry of a newer epoch than this owner's
// means another agent owns the partition now; one older than the newest
// seen so far was written by an owner that had already lost the partition
// when a newer owner wrote, and is ignored (counted in stale).
type epochFilter struct {
	own    uint64 // this owner's epoch
	newest uint64 // the newest epoch seen so far
	stale  int
}

func (f *epochFilter) admit(epoch, ledgerSeq uint64) (bool, error) {
	switch {
	case epoch > f.own:
		return false, fmt.Errorf("%w: the ledger holds an entry (seq %d) written under epoch %d, newer than this owner's %d; another agent owns the partition now (or the lock store was reset)", ErrFenced, ledgerSeq, epoch, f.own)
	case epoch < f.newest:
		f.stale++
		return false, nil
	default:
		f.newest = epoch
		return true, nil
	}
}

func (r *rebuildState) readLedger(ctx context.Context) error {
	if err := scan(ctx, r.o.deps.JS, r.o.ledger, r.ledgerEntry); err != nil {
		return err
	}
	if r.epochs.stale > 0 {
		r.o.log.Warn("ignored ledger entries of a fenced-off owner", "entries", r.epochs.stale, "epoch", r.o.lease.Epoch)
	}
	return nil
}

func (r *rebuildState) ledgerEntry(msg jetstream.Msg, meta *jetstream.MsgMetadata) error {
	if ok, err := r.epochs.admit(epochOf(msg), meta.Sequence.Stream); !ok {
		return err
	}
	if msg.Subject() == lanes.DoneSubject(r.o.p) {
		return r.doneEntry(msg.Data(), meta.Sequence.Stream)
	}
	if dest, ok := strings.CutPrefix(msg.Subject(), r.budgetPrefix); ok {
		r.budgetEntry(dest, msg.Data())
		return nil
	}
	_, id, isDead, seq, err := lanes.ParseLedgerSubject(msg.Subject())
	if err != nil {
		r.o.log.Warn("ignoring malformed ledger entry", "subject", msg.Subject(), "error", err)
		return nil
	}
	if isDead {
		return r.deadEntry(msg.Data(), seq, meta.Sequence.Stream)
	}
	h := &rivorav1.LaneHead{}
	if err := proto.Unmarshal(msg.Data(), h); err != nil {
		return fmt.Errorf("decode lane head %s: %w", msg.Subject(), err)
	}
	r.heads[id.Subject(r.o.p)] = h
	return nil
}

// doneEntry is a done record: the lane-store sequences it lists were
// delivered or dead before the restart.
func (r *rebuildState) doneEntry(data []byte, ledgerSeq uint64) error {
	seqs, err := decodeDone(data)
	if err != nil {
		return fmt.Errorf("decode done record: %w", err)
	}
	rec := doneRecord{ledgerSeq: ledgerSeq}
	for _, s := range seqs {
		r.doneSet[s] = true
		rec.max = max(rec.max, s)
	}
	r.o.reclaim.restoreRecord(rec)
	return nil
}

// deadEntry is a dead letter not yet archived.
func (r *rebuildState) deadEntry(data []byte, laneSeq, ledgerSeq uint64) error {
	dl := &rivorav1.DeadLetter{}
	if err := proto.Unmarshal(data, dl); err != nil {
		return fmt.Errorf("decode dead letter %d: %w", laneSeq, err)
	}
	r.deadSeqs[laneSeq] = true
	r.dead = append(r.dead, queuedDead{dl: dl, ledgerSeq: ledgerSeq})
	return nil
}

func (r *rebuildState) scanLanes(ctx context.Context) error {
	info, err := leaderInfo(ctx, r.o.lanes)
	if err != nil {
		return fmt.Errorf("lane store info: %w", err)
	}
	r.lastSeq = info.State.LastSeq
	if err := scan(ctx, r.o.deps.JS, r.o.lanes, r.laneEntry); err != nil {
		return fmt.Errorf("scan lane store: %w", err)
	}
	return nil
}

func (r *rebuildState) laneEntry(msg jetstream.Msg, meta *jetstream.MsgMetadata) error {
	seq := meta.Sequence.Stream
	subject := msg.Subject()
	if r.deadSeqs[seq] || r.doneSet[seq] {
		// Delivered or dead before the restart; its space was not
		// reclaimed yet.
		r.o.reclaim.noteDone(subject, seq)
		return nil
	}
	id, acceptedAt, err := eventKey(msg.Data())
	if err != nil {
		return fmt.Errorf("decode event at seq %d: %w", seq, err)
	}
	lane, err := r.lane(subject)
	if err != nil {
		return err
	}
	lane.entries.Add(seq, id, acceptedAt)
	r.events++
	return nil
}

// eventKey reads what the scheduler keeps of a stored event, its id and
// when it was accepted (Unix ns, as AcceptedAt.AsTime() gives it: the
// epoch when unset), and skips the rest: decoding whole events (payload,
// strings, a Timestamp each) made a rebuild's time and garbage. Delivery
// loads the event by sequence.
func eventKey(data []byte) (id []byte, acceptedAt int64, err error) {
	const eventIDField, acceptedAtField = 1, 8
	var secs, nanos int64
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return nil, 0, protowire.ParseError(n)
		}
		data = data[n:]
		if typ == protowire.BytesType && (num == eventIDField || num == acceptedAtField) {
			v, n := protowire.ConsumeBytes(data)
			if n < 0 {
				return nil, 0, protowire.ParseError(n)
			}
			data = data[n:]
			if num == eventIDField {
				id = v
			} else if secs, nanos, err = timestampFields(v); err != nil {
				return nil, 0, err
			}
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, data); n < 0 {
			return nil, 0, protowire.ParseError(n)
		}
		data = data[n:]
	}
	return id, secs*int64(time.Second) + nanos, nil
}

// timestampFields reads a google.protobuf.Timestamp's seconds and nanos.
func timestampFields(data []byte) (secs, nanos int64, err error) {
	const secondsField, nanosField = 1, 2
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return 0, 0, protowire.ParseError(n)
		}
		data = data[n:]
		if typ == protowire.VarintType && (num == secondsField || num == nanosField) {
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return 0, 0, protowire.ParseError(n)
			}
			data = data[n:]
			if num == secondsField {
				secs = int64(v)
			} else {
				nanos = int64(int32(v))
			}
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, data); n < 0 {
			return 0, 0, protowire.ParseError(n)
		}
		data = data[n:]
	}
	return secs, nanos, nil
}

// lane returns the rebuilt lane of a subject, found now if it is new.
func (r *rebuildState) lane(subject string) (*rebuiltLane, error) {
	if l := r.found[subject]; l != nil {
		return l, nil
	}
	_, id, err := lanes.ParseSubject(subject)
	if err != nil {
		return nil, err
	}
	l := &rebuiltLane{id: id}
	r.found[subject] = l
	r.order = append(r.order, subject)
	return l, nil
}

// install hands the rebuilt lanes to the scheduler, then the dead letters
// to the archive queue; only then is every stored sequence registered.
func (r *rebuildState) install() {
	o := r.o
	r.dropLeftovers()
	o.deps.Scheduler.ExpectPending(o.p, r.events)
	for _, subject := range r.order {
		l := r.found[subject]
		var head scheduler.Head
		h, hasLedger := r.heads[subject]
		if hasLedger && h.GetSeq() == l.entries.FirstSeq() {
			head = headFromProto(h)
		}
		o.deps.Scheduler.RestoreLane(o.p, l.id, &l.entries, head, hasLedger)
		delete(r.heads, subject)
	}
	for subject := range r.heads {
		// Head records of lanes that drained before the crash.
		_, id, err := lanes.ParseSubject(subject)
		if err == nil {
			o.reclaim.noteLedgerPurge(id.HeadSubject(o.p))
		}
	}
	for dest, saved := range r.budgets {
		o.deps.Scheduler.RestoreBudget(dest, o.p, saved)
	}
	o.writer.restored(r.lastSeq)
	o.dead.queue.push(r.dead...)
	if r.snapshot {
		o.log.Info("partition rebuilt from snapshot", "lanes", len(r.order), "events", r.events, "dead_unarchived", len(r.dead), "took", time.Since(r.start).Round(time.Millisecond))
	} else if r.events > 0 || len(r.dead) > 0 {
		o.log.Info("partition rebuilt", "lanes", len(r.order), "events", r.events, "dead_unarchived", len(r.dead), "took", time.Since(r.start).Round(time.Millisecond))
	}
}

// dropLeftovers makes the scheduler forget whatever it still holds of the
// partition before the rebuild's lanes go in: the rebuild registers
// exactly what is stored, and a lane left from before (registered by an
// earlier run here after it was detached) would put its events ahead of
// their lane, and deliver them twice. Nothing should be left (the writer
// registers nothing once detached): a leftover is logged.
func (r *rebuildState) dropLeftovers() {
	if low := r.o.deps.Scheduler.LowWater(r.o.p); low != 0 {
		r.o.log.Warn("the scheduler still held lanes of the partition from an earlier run; dropped before the rebuild's", "lowest_seq", low)
		r.o.deps.Scheduler.DropPartition(r.o.p)
	}
}

// scan calls fn for every message of a stream, in order, through at least
// the last sequence its leader reported when the scan began.
//
// The ordered consumer that reads the stream is placed on any one of its
// replicas, and a replica may be behind the leader: one that rejoins after
// a network cut can stay tens of seconds behind while it catches up. Such
// a replica serves what it has applied, a true prefix of the stream, and
// then reports nothing pending. Ending there rebuilt a partition without
// its latest events, and the new owner never delivered them. So the end
// is the leader's to say: when the replica has nothing more below the
// leader's last sequence, the scan asks the leader (leaderHasAfter)
// whether a message follows the last one read. If one does, the scan
// reads on from there through a new consumer (placed anew, most likely
// on a replica that is caught up), within scanCatchUp.
func scan(ctx context.Context, js jetstream.JetStream, st jetstream.Stream, fn func(jetstream.Msg, *jetstream.MsgMetadata) error) error {
	cctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	info, err := leaderInfo(cctx, st)
	if err != nil {
		return err
	}
	if info.State.Msgs == 0 {
		return nil
	}
	s := &streamScan{js: js, st: st, stream: info.Config.Name, last: info.State.LastSeq, msgs: info.State.Msgs, fn: fn}
	for {
		done, err := s.readFrom(ctx)
		if done || err != nil {
			return err
		}
	}
}

// streamScan is one scan's progress: read is the last sequence read.
type streamScan struct {
	js           jetstream.JetStream
	st           jetstream.Stream
	stream       string
	last, msgs   uint64 // the leader's last sequence and message count
	placements   int    // consumers placed again because their replica's count differed
	fn           func(jetstream.Msg, *jetstream.MsgMetadata) error
	read         uint64    // the last sequence read
	count        uint64    // messages read through s.last
	waitingSince time.Time // since when nothing came while the leader had more (zero: not waiting)
}

// readFrom reads from the message after s.read through one ordered
// consumer until the scan is done (true), or its replica gives nothing
// while the leader has more (false: read on through a new consumer).
func (s *streamScan) readFrom(ctx context.Context) (done bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	// A consumer left behind (a re-placement, a stall) ends on the
	// server soon; a consumer that cannot be recreated ends the scan
	// (the open is tried again) rather than retrying without end.
	cfg := jetstream.OrderedConsumerConfig{InactiveThreshold: 15 * time.Second, MaxResetAttempts: 3}
	if s.read > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, s.read+1
	}
	cons, err := s.st.OrderedConsumer(cctx, cfg)
	if err != nil {
		return false, err
	}
	if s.read == 0 && s.placements < maxPlacements {
		// A replica whose count differs from the leader's is behind, and
		// may also hold events purged since (delivered again if read):
		// place the consumer anew while one is likely to be caught up.
		if info := cons.CachedInfo(); info != nil && info.NumPending != s.msgs {
			s.placements++
			return false, nil
		}
	}
	// Short heartbeats: a consumer lost with a dead stream leader is
	// noticed (and recreated where it left off) in about 2s, not 10s.
	it, err := cons.Messages(jetstream.PullMaxMessages(4096), jetstream.PullExpiry(4*time.Second), jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return false, err
	}
	defer it.Stop()
	// The iterator's own recreation of a lost consumer does not watch
	// Next's context: stopping it when ctx ends (a lost lease) does.
	defer context.AfterFunc(ctx, it.Stop)()
	for {
		msg, err := nextWithin(ctx, it, scanWait)
		if errors.Is(err, errScanWait) {
			return s.stalled(ctx)
		}
		if err != nil {
			return false, err
		}
		meta, err := msg.Metadata()
		if err != nil {
			return false, err
		}
		if err := s.fn(msg, meta); err != nil {
			return false, err
		}
		s.read, s.waitingSince = meta.Sequence.Stream, time.Time{}
		if s.read <= s.last {
			s.count++
		}
		if s.read >= s.last {
			return s.end()
		}
		if meta.NumPending == 0 {
			// The replica has nothing more: the end, unless its leader
			// has more (or cannot say yet): the next wait finds out.
			if more, err := leaderHasAfter(ctx, s.js, s.stream, s.read, s.last); err == nil && !more {
				return s.end()
			}
		}
	}
}

// end checks, once the scan read through the leader's last sequence,
// that it read as many messages as the leader stores through it: a
// replica behind the leader may also hold messages the leader deleted
// since (events delivered and purged), and reading them would deliver
// them again. Nothing writes or deletes a partition's streams while it
// opens, so a difference means a stale read: the open is tried again.
func (s *streamScan) end() (done bool, err error) {
	if s.count != s.msgs {
		return false, fmt.Errorf("%w: stream %s: read %d messages through seq %d, its leader stores %d", errStaleRead, s.stream, s.count, s.last, s.msgs)
	}
	return true, nil
}

// stalled decides, once nothing came within scanWait, whether the scan is
// done: the leader has nothing after s.read. An error asking the leader
// is "not known yet" (a leader being elected). Either way the scan reads
// on through a new consumer, within scanCatchUp.
func (s *streamScan) stalled(ctx context.Context) (done bool, err error) {
	more, err := leaderHasAfter(ctx, s.js, s.stream, s.read, s.last)
	if err == nil && !more {
		return s.end()
	}
	if s.waitingSince.IsZero() {
		s.waitingSince = time.Now()
	} else if time.Since(s.waitingSince) > scanCatchUp {
		if err != nil {
			return false, err
		}
		return false, fmt.Errorf("%w: stream %s read through seq %d of %d", errReplicaBehind, s.stream, s.read, s.last)
	}
	return false, nil
}

// leaderInfo is the stream's info as a leader with a quorum behind it
// answers it. While a replicated stream has no leader, another server may
// answer with its own replica's state (the answer names no leader), and
// for a moment after a cut heals a former leader may still answer as one,
// its replicas long unheard: both can be far behind. Such an answer is
// an error here, and the caller tries again.
func leaderInfo(ctx context.Context, st jetstream.Stream) (*jetstream.StreamInfo, error) {
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	if !quorumBehind(info) {
		return nil, fmt.Errorf("%w: stream %s", errNoLeader, info.Config.Name)
	}
	return info, nil
}

// scanWait is how long a scan waits for its consumer's next message before
// it asks the leader whether one should come; scanCatchUp bounds how long
// it reads on without progress while the leader has more (the open then
// fails, and is tried again).
const (
	scanWait    = 2 * time.Second
	scanCatchUp = 20 * time.Second
	// maxPlacements bounds how many times a scan places its first
	// consumer anew; then it reads on from a replica that is behind.
	maxPlacements = 6
)

var (
	errNoLeader      = errors.New("no leader with a quorum answered for the stream (an election is under way)")
	errScanWait      = errors.New("no message within the scan's wait")
	errReplicaBehind = errors.New("the replica serving the scan stayed behind its stream's leader")
	errStaleRead     = errors.New("the scan read another state than its stream's leader stores")
)

// nextWithin is the iterator's next message, or errScanWait once wait
// passed without one.
func nextWithin(ctx context.Context, it jetstream.MessagesContext, wait time.Duration) (jetstream.Msg, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	msg, err := it.Next(jetstream.NextContext(wctx))
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, errScanWait
	}
	return msg, err
}

// leaderHasAfter asks the stream's leader whether it stores a message
// after sequence read and at most at last.
func leaderHasAfter(ctx context.Context, js jetstream.JetStream, stream string, read, last uint64) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	req := []byte(`{"seq":` + strconv.FormatUint(read+1, 10) + `,"next_by_subj":">"}`)
	msg, err := getFromLeader(ctx, js, apiSubject(js, "STREAM.MSG.GET."+stream), req)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return msg.Sequence <= last, nil
}

func headFromProto(h *rivorav1.LaneHead) scheduler.Head {
	return scheduler.Head{
		Attempts:          int(h.GetAttempts()),
		NotBefore:         h.GetNotBefore().AsTime(),
		LastStatus:        int(h.GetLastStatus()),
		LastError:         h.GetLastError(),
		FirstAttemptAt:    h.GetFirstAttemptAt().AsTime(),
		LastAttemptAt:     h.GetLastAttemptAt().AsTime(),
		HeldByDestination: h.GetHeldByDestination(),
	}
}
