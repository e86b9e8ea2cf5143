package owner

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/lanes"
)

const (
	reclaimEvery = 200 * time.Millisecond
	// Above the low-water mark, space of done events is freed lane by lane
	// only when this many lanes hold some (a lane stuck behind a failing
	// destination keeps the mark low) and done events outnumber pending
	// ones there (doneOutweighsPending), and at most reclaimLanesPerTick
	// at a time.
	reclaimPressure     = 10_000
	reclaimLanesPerTick = 200
	// purgeBelowEvery spaces the lane store's purges while events are
	// still pending. A purge below the low-water mark makes JetStream
	// compact a block and write the stream's whole state file (its size
	// grows with the lanes): ~1 ms at 6k lanes, ten times that at 60k.
	// A lane's purge is an API call that loads the lane's blocks. At a
	// tick each, a deep backlog spent a tenth of the machine purging a
	// few sequences at a time, and once reclaimPressure lanes held done
	// events, a lane purge per delivery. A partition with nothing
	// pending purges below the mark at once: that frees everything.
	purgeBelowEvery = 5 * time.Second
)

// reclaimer makes "delivered" durable without a store operation per event
// and frees the space of done (delivered or dead-lettered) events. It owns
// the done bookkeeping (book), the done records in the ledger, and what
// its loop learnt (sweep).
//
// Invariants:
//   - it never purges the lane store at or above the lowest of the writer's
//     registered mark + 1 and the scheduler's low water: events there may
//     be stored but not yet registered, or still pending;
//   - once detached it purges nothing of the lane store: the scheduler's
//     low water no longer covers the partition;
//   - a done sequence is in book until a done record listing it is in the
//     ledger (a failed write puts it back);
//   - doneRecords are in ledger order, and one is dropped only once every
//     sequence it lists is purged from the lane store.
type reclaimer struct {
	p          int
	lanes      jetstream.Stream
	ledger     jetstream.Stream
	fence      *fence
	sched      *scheduler.Scheduler
	registered func() uint64 // the writer's registered mark
	// durable is the store's group commit (Deps.Durable; nil: none).
	durable *natsd.Syncer
	log     *slog.Logger

	// detached is set once the scheduler is told to forget the partition
	// (Detach); from then on, reclaim purges nothing below "low water".
	detached atomic.Bool

	book doneBook

	// doneRecords are the done records in the ledger, oldest first. Only
	// the rebuild (before run) and run touch them.
	doneRecords []doneRecord

	// keep is how run holds back purges within the lane store's duplicate
	// window (dedupKeep); nil: it does not (tests of the other rules).
	keep *dedupKeep
}

func newReclaimer(p int, lanes, ledger jetstream.Stream, f *fence, sched *scheduler.Scheduler, registered func() uint64, durable *natsd.Syncer, log *slog.Logger) *reclaimer {
	return &reclaimer{p: p, lanes: lanes, ledger: ledger, fence: f, sched: sched, registered: registered, durable: durable, log: log}
}

// noteDone records that the event at seq on a lane subject was delivered or
// dead-lettered: its space can be reclaimed.
func (r *reclaimer) noteDone(subject string, seq uint64) { r.book.noteDone(subject, seq) }

// noteLedgerPurge records a ledger subject whose entries are no longer
// needed (the head record of a lane that moved on).
func (r *reclaimer) noteLedgerPurge(subject string) { r.book.noteLedgerPurge(subject) }

// detach stops every purge of the lane store (see Partition.Detach).
func (r *reclaimer) detach() { r.detached.Store(true) }

// restoreRecord adds a done record found in the ledger by the rebuild.
func (r *reclaimer) restoreRecord(rec doneRecord) { r.doneRecords = append(r.doneRecords, rec) }

// doneBook is what was done since the reclaimer last looked: the sequences
// for the next done record, lanes whose done events' space may be freed,
// and ledger subjects to purge. Any goroutine may note; the reclaimer's
// loop takes.
type doneBook struct {
	mu     sync.Mutex
	seqs   []uint64          // delivered or dead since the last done record
	lanes  map[string]uint64 // lane subject → highest done seq, for space reclaim above the floor
	ledger []string          // ledger subjects to purge
}

func (b *doneBook) noteDone(subject string, seq uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seqs = append(b.seqs, seq)
	if b.lanes == nil {
		b.lanes = make(map[string]uint64)
	}
	if seq > b.lanes[subject] {
		b.lanes[subject] = seq
	}
}

func (b *doneBook) noteLedgerPurge(subject string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ledger = append(b.ledger, subject)
}

// takeSeqs takes the sequences for a done record; idle when nothing at all
// was noted.
func (b *doneBook) takeSeqs() (seqs []uint64, idle bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	seqs, b.seqs = b.seqs, nil
	return seqs, len(seqs) == 0 && len(b.lanes) == 0 && len(b.ledger) == 0
}

// putBack returns sequences whose done record could not be written.
func (b *doneBook) putBack(seqs []uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seqs = append(b.seqs, seqs...)
}

// takeDirty takes the lanes and ledger subjects noted so far.
func (b *doneBook) takeDirty() (map[string]uint64, []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	lanes, ledger := b.lanes, b.ledger
	b.lanes, b.ledger = make(map[string]uint64), nil
	return lanes, ledger
}

// doneRecord is one done record in the ledger: its ledger sequence and the
// highest lane-store sequence it lists.
type doneRecord struct {
	ledgerSeq uint64
	max       uint64
}

// encodeDone packs sequences as sorted uvarint deltas.
func encodeDone(seqs []uint64) []byte {
	slices.Sort(seqs)
	out := make([]byte, 0, 3*len(seqs))
	var prev uint64
	for _, s := range seqs {
		out = binary.AppendUvarint(out, s-prev)
		prev = s
	}
	return out
}

func decodeDone(data []byte) ([]uint64, error) {
	var out []uint64
	var prev uint64
	for len(data) > 0 {
		d, n := binary.Uvarint(data)
		if n <= 0 {
			return nil, errors.New("bad varint")
		}
		prev += d
		out = append(out, prev)
		data = data[n:]
	}
	return out, nil
}

// sweep is what the reclaimer's loop keeps between ticks.
type sweep struct {
	purgedBelow uint64            // the lane store holds nothing at or below it
	garbage     map[string]uint64 // lanes above the mark holding done events
	// purgeEvery is the least time between two purges below the mark
	// while something is pending (0: every tick); lastPurge is the last.
	purgeEvery time.Duration
	lastPurge  time.Time
	// held is set when the last purge stopped short at the duplicate
	// window (dedupKeep): done events wait for it to pass, and the loop
	// keeps ticking for them while nothing else happens.
	held bool
}

// dedupKeep holds back the purge of what the lane store stored within its
// duplicate window, done or not. JetStream rebuilds a stream's duplicate
// detection at start from the messages the stream still holds: an event
// delivered and purged within the window would be forgotten by a restart,
// and a publish repeating its idempotency key would be stored and
// delivered again. Kept until the window has passed, a done event is
// still there for a restart's duplicate detection (and its done record
// keeps it out of the scheduler). The cost is disk: one window of
// deliveries (--dedup-window, 2 min by default).
//
// Which sequences are old enough it learns from marks: at each tick the
// writer's registered mark and the time; every sequence up to a mark was
// stored by the mark's time.
type dedupKeep struct {
	window time.Duration
	marks  []storedBy // oldest first, sequences increasing
}

// storedBy says every lane-store sequence up to seq was stored by at.
type storedBy struct {
	at  time.Time
	seq uint64
}

// newDedupKeep starts with what the store held before this owner: up to
// lastSeq, stored by lastTime.
func newDedupKeep(window time.Duration, lastSeq uint64, lastTime time.Time) *dedupKeep {
	if window <= 0 {
		window = 2 * time.Minute // JetStream's default duplicate window
	}
	k := &dedupKeep{window: window}
	k.note(lastTime, lastSeq)
	return k
}

// note records that every sequence up to seq was stored by at.
func (k *dedupKeep) note(at time.Time, seq uint64) {
	if k == nil || seq == 0 {
		return
	}
	if n := len(k.marks); n > 0 && k.marks[n-1].seq >= seq {
		return // nothing new: the older mark says as much, earlier
	}
	k.marks = append(k.marks, storedBy{at: at, seq: seq})
}

// floor is the lowest sequence that may have been stored within the
// window before now: purges stay below it. Marks it no longer needs are
// dropped. A nil keep has no floor.
func (k *dedupKeep) floor(now time.Time) uint64 {
	if k == nil {
		return math.MaxUint64
	}
	cut := now.Add(-k.window)
	old := 0 // marks at or before cut
	for old < len(k.marks) && !k.marks[old].at.After(cut) {
		old++
	}
	if old == 0 {
		return 1 // nothing known to be old enough
	}
	k.marks = k.marks[old-1:]
	return k.marks[0].seq + 1
}

// run makes "delivered" durable without a store operation per event:
// every tick it appends one done record listing the sequences delivered or
// dead-lettered since the last (a restart skips them), purges the lane
// store below the partition's low-water mark in one operation, drops done
// records that only list purged sequences, and — only when many lanes
// above the mark hold done events, more of them than pending ones — frees
// those lane by lane. A crash
// loses at most one tick: those events are delivered again
// (at-least-once), never lost.
func (r *reclaimer) run(ctx context.Context) error {
	t := time.NewTicker(reclaimEvery)
	defer t.Stop()
	s := &sweep{garbage: make(map[string]uint64), purgeEvery: purgeBelowEvery}
	s.held = r.keep != nil // what the store held before may still be in its window
	for {
		select {
		case <-ctx.Done():
			r.recordDone(context.WithoutCancel(ctx))
			return nil
		case <-t.C:
		}
		r.tick(ctx, s)
	}
}

func (r *reclaimer) tick(ctx context.Context, s *sweep) {
	now := time.Now() // JetStream's duplicate window runs on the real clock
	r.keep.note(now, r.registered())
	due := s.purgeEvery == 0 || now.Sub(s.lastPurge) >= s.purgeEvery
	worked := r.recordDone(ctx)
	// With nothing new, only done events the duplicate window held back
	// bring a tick further, at the pace of due purges.
	if (!worked && !(s.held && due)) || r.fence.check() != nil {
		return
	}
	// With --fsync a dead letter's ledger record must survive a power
	// loss before its lane event is purged: else the purge loses it.
	if err := r.durable.Commit(ctx); err != nil {
		r.log.Warn("syncing the ledger failed; nothing purged this tick", "error", err)
		return
	}
	dirty, ledger := r.book.takeDirty()
	// In this order: Detach sets detached before the scheduler forgets
	// the partition, so a low water read from a scheduler that forgot it
	// is always seen as detached below.
	registered := r.registered()
	// The low water walks every lane of the partition under the
	// scheduler's lock: it is read only when a purge is due. In between,
	// a purge runs only when nothing is pending, which HasPending answers
	// from a few destinations (at 200k lanes the walk five times a second
	// cost 3 µs per delivery).
	var low uint64
	var pending int
	idle := false
	if due {
		low, pending = r.sched.Backlog(r.p)
		idle = low == 0
	} else {
		idle = !r.sched.HasPending(r.p)
	}
	if r.detached.Load() {
		// The scheduler forgot the partition: its low water says
		// nothing any more, and nothing may be purged on its word.
		return
	}
	s.addGarbage(dirty)
	// A partition with nothing pending purges at once, but what the
	// duplicate window holds back waits for the next due purge.
	if due || (idle && !s.held) {
		floor, keep := purgeFloor(registered, low), r.keep.floor(now)
		s.held = keep < floor
		r.purgeBelow(ctx, s, min(floor, keep))
		r.compactDone(ctx, s.purgedBelow)
		if due {
			s.lastPurge = time.Now()
			purge := func(subject string, seq uint64) bool { return seq < keep && r.purgeLane(ctx, subject, seq) }
			if !doneOutweighsPending(registered, s.purgedBelow, pending) {
				purge = nil
			}
			sweepLanes(s.garbage, s.purgedBelow, purge)
		}
	}
	r.purgeLedger(ctx, ledger)
}

// addGarbage adds lanes holding done events, each with its highest.
func (s *sweep) addGarbage(dirty map[string]uint64) {
	for subject, seq := range dirty {
		if seq > s.garbage[subject] {
			s.garbage[subject] = seq
		}
	}
}

// purgeLedger purges ledger subjects no longer needed (head records of
// lanes that moved on).
func (r *reclaimer) purgeLedger(ctx context.Context, subjects []string) {
	for _, subject := range subjects {
		if err := r.ledger.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
			r.log.Warn("purge ledger entry failed", "subject", subject, "error", err)
		}
	}
}

// purgeFloor is the lowest lane-store sequence that must stay: the first
// one not yet registered, or the scheduler's low water (0: nothing
// pending) when lower.
func purgeFloor(registered, low uint64) uint64 {
	floor := registered + 1
	if low != 0 && low < floor {
		floor = low
	}
	return floor
}

// purgeBelow purges the lane store below floor in one operation, when
// that frees anything new.
func (r *reclaimer) purgeBelow(ctx context.Context, s *sweep, floor uint64) {
	if floor <= s.purgedBelow+1 {
		return
	}
	if err := r.lanes.Purge(ctx, jetstream.WithPurgeSequence(floor)); err != nil {
		r.log.Warn("purge below low water failed", "seq", floor, "error", err)
		return
	}
	s.purgedBelow = floor - 1
}

// doneOutweighsPending reports whether the lane store holds more done
// events above its purge floor than pending ones: only then are done
// events freed lane by lane. Everything stored above the floor is at
// most registered − purgedBelow events (lanes already freed one by one
// count as stored: an overestimate, so this errs towards freeing).
//
// While a deep backlog drains, every lane holds a few done events above
// the low-water mark, yet the mark follows them (the drain delivers each
// lane's oldest first): at 1M lanes, lane purges — an API call each,
// loading the lane's blocks, that frees one or two events — cost ~3.5 µs
// per delivery (bench scale at 10M) and freed what the next purge below
// the mark would. A
// lane stuck behind a failing destination holds the mark while the
// others deliver: their done events soon outnumber the pending ones, and
// lane purges free them as before.
func doneOutweighsPending(registered, purgedBelow uint64, pending int) bool {
	if registered <= purgedBelow {
		return false
	}
	stored := registered - purgedBelow
	return stored > 2*uint64(pending)
}

// sweepLanes forgets lanes whose done events are all below purgedBelow
// and, only while at least reclaimPressure lanes hold done events, frees
// up to reclaimLanesPerTick of them with purge (which reports success;
// nil: forget only, free none).
func sweepLanes(garbage map[string]uint64, purgedBelow uint64, purge func(subject string, seq uint64) bool) {
	purged := 0
	for subject, seq := range garbage {
		if seq <= purgedBelow {
			delete(garbage, subject)
			continue
		}
		if purge == nil || len(garbage) < reclaimPressure || purged >= reclaimLanesPerTick {
			continue
		}
		if !purge(subject, seq) {
			continue
		}
		delete(garbage, subject)
		purged++
	}
}

// purgeLane frees a lane's events up to seq.
func (r *reclaimer) purgeLane(ctx context.Context, subject string, seq uint64) bool {
	if err := r.lanes.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(seq+1)); err != nil {
		r.log.Warn("purge done events failed", "lane", subject, "error", err)
		return false
	}
	return true
}

// recordDone appends the done record of this tick; false when there was
// nothing new and nothing to do.
func (r *reclaimer) recordDone(ctx context.Context) bool {
	seqs, idle := r.book.takeSeqs()
	if idle {
		return false
	}
	if len(seqs) == 0 {
		return true
	}
	msg := nats.NewMsg(lanes.DoneSubject(r.p))
	msg.Data = encodeDone(seqs)
	ack, err := r.fence.publish(ctx, msg)
	if err != nil {
		r.log.Warn("done record write failed; retrying next tick", "events", len(seqs), "error", err)
		r.book.putBack(seqs)
		return true
	}
	r.doneRecords = append(r.doneRecords, doneRecord{ledgerSeq: ack.Sequence, max: slices.Max(seqs)})
	return true
}

// compactDone drops the oldest done records once every sequence they list
// is purged from the lane store.
func (r *reclaimer) compactDone(ctx context.Context, purgedBelow uint64) {
	k := compactable(r.doneRecords, purgedBelow)
	if k == 0 {
		return
	}
	if r.fence.check() != nil {
		return
	}
	if err := r.ledger.Purge(ctx, jetstream.WithPurgeSubject(lanes.DoneSubject(r.p)), jetstream.WithPurgeSequence(r.doneRecords[k-1].ledgerSeq+1)); err != nil {
		r.log.Warn("compact done records failed", "error", err)
		return
	}
	r.doneRecords = r.doneRecords[k:]
}

// compactable is how many of the oldest records list only sequences at or
// below purgedBelow.
func compactable(records []doneRecord, purgedBelow uint64) int {
	k := 0
	for k < len(records) && records[k].max <= purgedBelow {
		k++
	}
	return k
}
