package owner

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/archive"
	"github.com/rivora/rivora/internal/backoff"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

const (
	archiveBatch = 500
	archiveEvery = time.Second
)

// Unarchived is how many dead letters of a destination wait for the
// archive.
func (o *Partition) Unarchived(destinationID string) int {
	return o.dead.queue.count(destinationID)
}

// DeadLetterUnarchived reports whether the dead letter of an event is
// kept in this partition's ledger, not yet written to the archive (it
// cannot be reached): replay does not find it until it is, and dlq list
// and show find it only through WaitingDeadLetters.
func (o *Partition) DeadLetterUnarchived(eventID string) bool {
	return o.dead.queue.holds(eventID)
}

// WaitingDeadLetters calls visit with each dead letter this partition's
// ledger holds for the archive — queued, or in a batch being written —
// in ledger order. It reads the same queue that Unarchived counts, not
// the ledger stream: what it visits is what `destinations health` counts
// as UNARCHIVED. visit runs without the queue's lock (dead letters keep
// dying meanwhile) and must neither change nor keep dl: it is the queue's
// own (clone it to keep it).
func (o *Partition) WaitingDeadLetters(visit func(dl *rivorav1.DeadLetter)) {
	taken, queued := o.dead.queue.waiting()
	for _, d := range taken {
		visit(d.dl)
	}
	for _, d := range queued {
		visit(d.dl)
	}
}

// ForgetDestination drops what the partition counts of a deleted
// destination.
func (o *Partition) ForgetDestination(destinationID string) {
	o.dead.queue.forget(destinationID)
	o.budgets.forget(destinationID)
}

// Archived is how many dead letters of a destination this partition
// archived since it opened here.
func (o *Partition) Archived(destinationID string) int64 {
	return o.dead.queue.archivedCount(destinationID)
}

// queuedDead is a dead letter waiting for the archive, with the ledger
// sequence of its record (the order archive objects are named in).
type queuedDead struct {
	dl        *rivorav1.DeadLetter
	ledgerSeq uint64
}

// deadQueue holds dead letters waiting for the archive; they are durable
// in the ledger, so the queue may grow while the archive is down.
//
// Invariants: items leave in the order they came (which deadLetters.record
// makes ledger order); taken holds those that left and are not archived
// yet, in the order they left; unarchived[d] counts d's dead letters in
// items and taken, and a destination with none has no entry; byEvent
// counts the same per event id (an event may die more than once);
// archivedTotal[d] only grows.
type deadQueue struct {
	mu            sync.Mutex
	items         []queuedDead
	taken         []queuedDead     // taken for the archive, not archived yet
	unarchived    map[string]int   // per destination: in the ledger, not yet archived
	byEvent       map[string]int   // per event id: in the ledger, not yet archived
	archivedTotal map[string]int64 // per destination: archived since the queue was made
	ready         chan struct{}    // signalled, never blocking, when items arrive
}

func newDeadQueue() *deadQueue {
	return &deadQueue{unarchived: make(map[string]int), byEvent: make(map[string]int), archivedTotal: make(map[string]int64), ready: make(chan struct{}, 1)}
}

func (q *deadQueue) push(dls ...queuedDead) {
	if len(dls) == 0 {
		return
	}
	q.mu.Lock()
	q.items = append(q.items, dls...)
	for _, d := range dls {
		q.unarchived[d.dl.GetEvent().GetDestinationId()]++
		q.byEvent[d.dl.GetEvent().GetEventId()]++
	}
	q.mu.Unlock()
	unarchived.Add(float64(len(dls)))
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// take removes up to n of the oldest dead letters.
func (q *deadQueue) take(n int) []queuedDead {
	q.mu.Lock()
	defer q.mu.Unlock()
	n = min(len(q.items), n)
	batch := q.items[:n:n]
	q.items = q.items[n:]
	q.taken = append(q.taken, batch...)
	return batch
}

// waiting is every dead letter not archived yet, in ledger order: those
// taken for the archive, then those queued. No element of the slices it
// returns is written to again (push and take append past their end,
// archived makes a new taken), so they are read without the lock, and
// not copied: the queue may hold many while the archive is down.
func (q *deadQueue) waiting() (taken, queued []queuedDead) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.taken[:len(q.taken):len(q.taken)], q.items[:len(q.items):len(q.items)]
}

// archived records that dead letters of a destination are archived.
func (q *deadQueue) archived(destinationID string, items []*rivorav1.DeadLetter) {
	n := len(items)
	unarchived.Sub(float64(n))
	q.mu.Lock()
	defer q.mu.Unlock()
	q.archivedTotal[destinationID] += int64(n)
	if q.unarchived[destinationID] -= n; q.unarchived[destinationID] <= 0 {
		delete(q.unarchived, destinationID)
	}
	done := make(map[*rivorav1.DeadLetter]bool, n)
	for _, dl := range items {
		done[dl] = true
		id := dl.GetEvent().GetEventId()
		if q.byEvent[id]--; q.byEvent[id] <= 0 {
			delete(q.byEvent, id)
		}
	}
	// A new slice: waiting's callers may still read the old one.
	taken := make([]queuedDead, 0, len(q.taken))
	for _, d := range q.taken {
		if !done[d.dl] {
			taken = append(taken, d)
		}
	}
	q.taken = taken
}

// holds reports whether a dead letter of the event is queued or being
// archived.
func (q *deadQueue) holds(eventID string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.byEvent[eventID] > 0
}

func (q *deadQueue) archivedCount(destinationID string) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.archivedTotal[destinationID]
}

// forget drops a deleted destination's archived count (its dead letters
// not yet archived still count until they are).
func (q *deadQueue) forget(destinationID string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.archivedTotal, destinationID)
}

func (q *deadQueue) count(destinationID string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.unarchived[destinationID]
}

// deadLetters hands dead letters from the ledger to the archive. It owns
// the queue and the order of dead-letter writes.
//
// Invariants: the queue is in ledger order, and so in lane order (record);
// a dead letter leaves the ledger only after an archive object holding it
// is written, and only while this agent owns the partition.
type deadLetters struct {
	p       int
	ledger  jetstream.Stream
	fence   *fence
	archive archive.Archive
	log     *slog.Logger
	queue   *deadQueue

	// writeMu makes a dead letter's ledger write and its place in the
	// archive queue one step, so the queue is in ledger order — and so in
	// lane order, which archive object names keep for replay.
	writeMu sync.Mutex
}

func newDeadLetters(p int, ledger jetstream.Stream, f *fence, arch archive.Archive, log *slog.Logger) *deadLetters {
	return &deadLetters{p: p, ledger: ledger, fence: f, archive: arch, log: log, queue: newDeadQueue()}
}

// record makes a dead letter durable in the ledger and queues it for the
// archive, as one step (see writeMu). Until it returns, the lane must not
// advance: the lane's next dead letter comes after this one.
func (d *deadLetters) record(ctx context.Context, dl *rivorav1.DeadLetter) error {
	d.writeMu.Lock()
	defer d.writeMu.Unlock()
	seq, err := d.fence.appendLedger(ctx, lanes.DeadSubject(d.p, dl.GetLaneSeq()), dl)
	if err != nil {
		return err
	}
	d.queue.push(queuedDead{dl: dl, ledgerSeq: seq})
	return nil
}

// run batches dead letters into archive objects; a dead letter leaves the
// ledger only after its object is written. It waits up to archiveEvery for
// a batch to fill.
func (d *deadLetters) run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.queue.ready:
		}
		if !backoff.Sleep(ctx, archiveEvery) {
			return nil
		}
		for {
			batch := d.queue.take(archiveBatch)
			if len(batch) == 0 {
				break
			}
			if !d.archiveBatch(ctx, batch) {
				return nil
			}
		}
	}
}

// archiveGroup is the dead letters of one archive object: one destination,
// one hour, ledger sequences first through last.
type archiveGroup struct {
	dest        string
	hour        time.Time
	first, last uint64
	items       []*rivorav1.DeadLetter
}

// groupBatch splits a batch by destination and hour, groups in the order
// they first appear and each in batch order.
func groupBatch(batch []queuedDead) []*archiveGroup {
	groups := make(map[string]*archiveGroup)
	var order []*archiveGroup
	for _, d := range batch {
		dl := d.dl
		hour := dl.GetDeadAt().AsTime().UTC().Truncate(time.Hour)
		k := dl.GetEvent().GetDestinationId() + "|" + hour.String()
		g := groups[k]
		if g == nil {
			g = &archiveGroup{dest: dl.GetEvent().GetDestinationId(), hour: hour, first: d.ledgerSeq}
			groups[k] = g
			order = append(order, g)
		}
		g.items = append(g.items, dl)
		g.last = d.ledgerSeq
	}
	return order
}

// archiveBatch writes a batch, retrying until it succeeds; false when ctx
// ended or the partition was lost.
//
// The queue is in ledger order, which within a lane is lane order, so an
// object named by the ledger sequences of its first and last records sorts
// before every later object of its destination: replaying objects in key
// order replays each lane in order.
func (d *deadLetters) archiveBatch(ctx context.Context, batch []queuedDead) bool {
	for _, g := range groupBatch(batch) {
		if !d.archiveGroup(ctx, g) {
			return false
		}
	}
	return true
}

func (d *deadLetters) archiveGroup(ctx context.Context, g *archiveGroup) bool {
	key := archive.Key(g.dest, g.hour, d.p, g.first, g.last)
	written, ok := d.put(ctx, key, g.items)
	if !ok {
		return false
	}
	if written != key {
		// Another writer's dead letters hold the name: a fresh data
		// directory on the same bucket restarts ledger sequences. Both
		// objects are kept.
		d.log.Warn("archive object name taken by other dead letters; archived under a variant of it", "key", key, "written", written, "events", len(g.items))
	}
	if err := d.fence.check(); err != nil {
		// The new owner archives them again (the same object when it
		// batches them alike, else a duplicate object; never a loss).
		return false
	}
	for _, dl := range g.items {
		if err := d.ledger.Purge(ctx, jetstream.WithPurgeSubject(lanes.DeadSubject(d.p, dl.GetLaneSeq()))); err != nil {
			d.log.Warn("purge archived dead letter from ledger failed", "seq", dl.GetLaneSeq(), "error", err)
		}
	}
	archivedTotal.Add(float64(len(g.items)))
	d.queue.archived(g.dest, g.items)
	d.log.Info("dead letters archived", "key", written, "events", len(g.items))
	return true
}

// put writes one archive object, retrying until it succeeds, and returns
// the key it is stored under (key, or a variant of it when another
// writer's object holds key); false when ctx ended first.
func (d *deadLetters) put(ctx context.Context, key string, items []*rivorav1.DeadLetter) (string, bool) {
	wait := backoff.Backoff{Initial: 500 * time.Millisecond, Max: 30 * time.Second}
	for {
		written, err := d.archive.Put(ctx, key, items)
		if err == nil {
			return written, true
		}
		delay := wait.Next()
		d.log.Warn("archive write failed; dead letters stay in the ledger", "key", key, "events", len(items), "retry_in", delay, "error", err)
		if !backoff.Sleep(ctx, delay) {
			return "", false
		}
	}
}
