package owner

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/internal/durable"
	"github.com/rivora/rivora/lanes"
)

// A pending snapshot is the fast path of a restart. Reading every stored
// event back costs ~8 µs each inside NATS's consume path (a million
// pending events: 8 s on two cores); an owner that stops cleanly instead
// writes its partition's pending lanes (ids and entries: what
// Scheduler.RestoreLane needs) to one file, with the state of the lane
// store and the ledger it was taken against. The next Open uses the file
// only if both streams are exactly as recorded: the owner is their single
// writer, and sequences only grow, so an equal message count and equal
// last sequence mean nothing was written or removed since. Anything else
// (no file, another state, a damaged file) is the full scan. The file is
// removed as it is read: it is never used twice.
//
// The ledger is still read in full on both paths: it holds the lane heads,
// the done records, the dead letters to archive, and its epochs fence a
// stale owner off; the snapshot replaces only the lane store's scan.
//
// What the scan gives that the snapshot does not: the done events not
// yet purged from the lane store (noteDone). Their space is still freed
// once the partition's low water passes them (the reclaimer's floor), just
// not lane by lane above it.

// snapshotMagic starts every snapshot file; snapshotVersion is its
// format, bumped on any change (a file of another version is ignored).
const (
	snapshotMagic   = "RIVSNAP\n"
	snapshotVersion = 1
)

var snapshotCRC = crc32.MakeTable(crc32.Castagnoli)

// streamState is a stream's state as a snapshot records and checks it.
type streamState struct {
	Msgs, FirstSeq, LastSeq uint64
}

func stateOf(info *jetstream.StreamInfo) streamState {
	return streamState{Msgs: info.State.Msgs, FirstSeq: info.State.FirstSeq, LastSeq: info.State.LastSeq}
}

// pendingSnapshot is one partition's snapshot.
type pendingSnapshot struct {
	partition int
	laneStore streamState
	ledger    streamState
	lanes     []scheduler.ExportedLane // by first sequence
}

// snapshotTaker holds what Detach exported of a running partition until
// Run ends and can write it.
type snapshotTaker struct {
	mu         sync.Mutex
	ended      bool // Run returned: nothing to save any more
	registered uint64
	lanes      []scheduler.ExportedLane
	taken      bool
}

func (o *Partition) snapshotPath() string {
	if o.deps.SnapshotDir == "" {
		return ""
	}
	return filepath.Join(o.deps.SnapshotDir, fmt.Sprintf("partition-%d.snapshot", o.p))
}

// takeSnapshot copies the partition's lanes from the scheduler, before
// Detach makes it forget them, if Run still runs (a handoff). The writer
// may still store events; saveSnapshot notices (the lane store then ends
// past the registered mark read here) and saves nothing.
func (o *Partition) takeSnapshot() {
	if o.snapshotPath() == "" || o.writer == nil {
		return
	}
	o.snap.mu.Lock()
	defer o.snap.mu.Unlock()
	if o.snap.ended || o.snap.taken {
		return
	}
	// In this order: every event at or below the mark is in the
	// scheduler's lanes when they are exported.
	o.snap.registered = o.writer.registered()
	o.snap.lanes = o.deps.Scheduler.ExportPartition(o.p)
	o.snap.taken = true
}

// saveSnapshot writes what takeSnapshot exported, once Run's loops all
// ended cleanly (the writer stopped, its last write acknowledged, the
// last done record written), if the lane store holds nothing the export
// missed.
func (o *Partition) saveSnapshot(ctx context.Context) {
	o.snap.mu.Lock()
	o.snap.ended = true
	taken, registered, exported := o.snap.taken, o.snap.registered, o.snap.lanes
	o.snap.lanes = nil
	o.snap.mu.Unlock()
	if !taken || o.fence.check() != nil {
		return
	}
	o.reclaim.book.mu.Lock()
	unrecorded := len(o.reclaim.book.seqs)
	o.reclaim.book.mu.Unlock()
	if unrecorded > 0 {
		o.log.Info("no pending snapshot: done events without a done record", "events", unrecorded)
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apiTimeout)
	defer cancel()
	snap := &pendingSnapshot{partition: o.p, lanes: exported}
	for _, s := range []struct {
		st  jetstream.Stream
		out *streamState
	}{{o.lanes, &snap.laneStore}, {o.ledger, &snap.ledger}} {
		info, err := leaderInfo(ctx, s.st)
		if err != nil {
			o.log.Warn("no pending snapshot: stream info", "error", err)
			return
		}
		*s.out = stateOf(info)
	}
	if snap.laneStore.LastSeq != registered {
		o.log.Info("no pending snapshot: events were stored after the export", "last_seq", snap.laneStore.LastSeq, "registered", registered)
		return
	}
	path := o.snapshotPath()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		o.log.Warn("no pending snapshot", "error", err)
		return
	}
	data := encodeSnapshot(snap)
	if err := durable.WriteFile(path, data); err != nil {
		o.log.Warn("no pending snapshot", "error", err)
		return
	}
	o.log.Info("pending snapshot written", "lanes", len(snap.lanes), "bytes", len(data), "took", time.Since(start).Round(time.Millisecond))
}

// fromSnapshot installs the partition's lanes from its snapshot instead of
// scanning the lane store, if there is a usable one; false: scan.
// readLedger must have run (its done and dead sequences filter the
// snapshot's entries, as they filter the scan's).
func (r *rebuildState) fromSnapshot(ctx context.Context) bool {
	o := r.o
	path := o.snapshotPath()
	if path == "" {
		return false
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			o.log.Warn("pending snapshot unreadable; full scan", "error", err)
		}
		return false
	}
	// Used at most once, whatever follows.
	if err := os.Remove(path); err != nil {
		o.log.Warn("pending snapshot not removed; full scan", "error", err)
		return false
	}
	dec, err := openSnapshot(data)
	if err != nil {
		o.log.Warn("pending snapshot ignored; full scan", "error", err)
		return false
	}
	if dec.partition != o.p {
		o.log.Warn("pending snapshot of another partition ignored; full scan", "snapshot_partition", dec.partition)
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	laneInfo, err := leaderInfo(cctx, o.lanes)
	if err != nil {
		o.log.Warn("pending snapshot: lane store info; full scan", "error", err)
		return false
	}
	ledgerInfo, err := leaderInfo(cctx, o.ledger)
	if err != nil {
		o.log.Warn("pending snapshot: ledger info; full scan", "error", err)
		return false
	}
	if stateOf(laneInfo) != dec.laneStore || stateOf(ledgerInfo) != dec.ledger {
		o.log.Info("pending snapshot stale (the store changed since); full scan",
			"lanes_then", dec.laneStore, "lanes_now", stateOf(laneInfo), "ledger_then", dec.ledger, "ledger_now", stateOf(ledgerInfo))
		return false
	}
	found, order, events, err := r.restoreLanes(dec)
	if err != nil {
		o.log.Warn("pending snapshot ignored; full scan", "error", err)
		return false
	}
	r.found, r.order, r.events = found, order, events
	r.lastSeq = laneInfo.State.LastSeq
	r.snapshot = true
	return true
}

// restoreLanes decodes the snapshot's lanes into rebuilt lanes, leaving
// out what the ledger says is done or dead, exactly as laneEntry does.
// Nothing of r changes on an error.
func (r *rebuildState) restoreLanes(dec *snapshotDecoder) (map[string]*rebuiltLane, []string, int, error) {
	found := make(map[string]*rebuiltLane, dec.lanes)
	type firstSeq struct {
		subject string
		seq     uint64
	}
	order := make([]firstSeq, 0, dec.lanes)
	var done []firstSeq
	events := 0
	for range dec.lanes {
		l := &rebuiltLane{}
		var subject string
		err := dec.lane(func(id lanes.ID, entries int) {
			l.id, subject = id, id.Subject(r.o.p)
			l.entries.Grow(entries)
		}, func(e scheduler.ExportedEntry) {
			if r.deadSeqs[e.Seq] || r.doneSet[e.Seq] {
				done = append(done, firstSeq{subject, e.Seq})
				return
			}
			if e.OddID != "" {
				l.entries.Add(e.Seq, []byte(e.OddID), e.AcceptedAt)
			} else {
				l.entries.AddUUID(e.Seq, e.ID, e.AcceptedAt)
			}
		})
		if err != nil {
			return nil, nil, 0, err
		}
		if l.entries.Len() == 0 {
			continue
		}
		if found[subject] != nil {
			return nil, nil, 0, fmt.Errorf("lane %s twice", subject)
		}
		found[subject] = l
		order = append(order, firstSeq{subject, l.entries.FirstSeq()})
		events += l.entries.Len()
	}
	if err := dec.end(); err != nil {
		return nil, nil, 0, err
	}
	for _, d := range done {
		r.o.reclaim.noteDone(d.subject, d.seq)
	}
	// The scan's order: a lane is found at its first pending event.
	bySeq := func(a, b firstSeq) int { return cmp.Compare(a.seq, b.seq) }
	if !slices.IsSortedFunc(order, bySeq) {
		slices.SortFunc(order, bySeq)
	}
	subjects := make([]string, len(order))
	for i, f := range order {
		subjects[i] = f.subject
	}
	return found, subjects, events, nil
}

// ---- encoding --------------------------------------------------------------
//
// A snapshot file: the magic, then uvarints: version, partition, the lane
// store's msgs/first/last, the ledger's msgs/first/last, the lane count;
// then each lane: its id's four strings (uvarint length, bytes), its entry
// count, and each entry: uvarint (sequence delta from the lane's previous
// entry << 1 | odd), zigzag varint acceptedAt delta, then the id: 16 bytes,
// or when odd a uvarint length and its bytes. Last, a CRC-32C of
// everything before it (4 bytes, little endian): a truncated or damaged
// file is refused before anything in it is used.

func encodeSnapshot(s *pendingSnapshot) []byte {
	slices.SortFunc(s.lanes, func(a, b scheduler.ExportedLane) int { return cmp.Compare(a.Entries[0].Seq, b.Entries[0].Seq) })
	entries := 0
	for _, l := range s.lanes {
		entries += len(l.Entries)
	}
	buf := make([]byte, 0, 64+len(s.lanes)*64+entries*24)
	buf = append(buf, snapshotMagic...)
	for _, v := range []uint64{snapshotVersion, uint64(s.partition),
		s.laneStore.Msgs, s.laneStore.FirstSeq, s.laneStore.LastSeq,
		s.ledger.Msgs, s.ledger.FirstSeq, s.ledger.LastSeq, uint64(len(s.lanes))} {
		buf = binary.AppendUvarint(buf, v)
	}
	for _, l := range s.lanes {
		for _, str := range []string{l.ID.Destination, l.ID.Customer, l.ID.Key, l.ID.Subscription} {
			buf = appendString(buf, str)
		}
		buf = binary.AppendUvarint(buf, uint64(len(l.Entries)))
		var seq uint64
		var at int64
		for _, e := range l.Entries {
			tag := (e.Seq - seq) << 1
			if e.OddID != "" {
				tag |= 1
			}
			buf = binary.AppendUvarint(buf, tag)
			buf = binary.AppendVarint(buf, e.AcceptedAt-at)
			if e.OddID != "" {
				buf = appendString(buf, e.OddID)
			} else {
				buf = append(buf, e.ID[:]...)
			}
			seq, at = e.Seq, e.AcceptedAt
		}
	}
	return binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf, snapshotCRC))
}

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

var errSnapshotShort = errors.New("truncated")

// snapshotDecoder reads a snapshot file: openSnapshot checks it and reads
// its header, lane reads one lane at a time, end checks nothing is left.
type snapshotDecoder struct {
	data      []byte
	partition int
	laneStore streamState
	ledger    streamState
	lanes     int
}

func openSnapshot(data []byte) (*snapshotDecoder, error) {
	if len(data) < len(snapshotMagic)+4 || string(data[:len(snapshotMagic)]) != snapshotMagic {
		return nil, errors.New("not a pending snapshot (magic)")
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, snapshotCRC) != sum {
		return nil, errors.New("checksum mismatch (truncated or damaged)")
	}
	d := &snapshotDecoder{data: body[len(snapshotMagic):]}
	version, err := d.uvarint()
	if err != nil {
		return nil, err
	}
	if version != snapshotVersion {
		return nil, fmt.Errorf("version %d, want %d", version, snapshotVersion)
	}
	var h [8]uint64
	for i := range h {
		if h[i], err = d.uvarint(); err != nil {
			return nil, err
		}
	}
	d.partition = int(h[0])
	d.laneStore = streamState{h[1], h[2], h[3]}
	d.ledger = streamState{h[4], h[5], h[6]}
	if h[7] > uint64(len(d.data)) { // each lane takes bytes: a bound before any allocation
		return nil, fmt.Errorf("%d lanes in %d bytes", h[7], len(d.data))
	}
	d.lanes = int(h[7])
	return d, nil
}

// lane reads the next lane: its id and how many entries follow (bounded
// by what is left of the file), then each entry.
func (d *snapshotDecoder) lane(id func(lanes.ID, int), entry func(scheduler.ExportedEntry)) error {
	var strs [4]string
	for i := range strs {
		s, err := d.string()
		if err != nil {
			return err
		}
		strs[i] = s
	}
	n, err := d.uvarint()
	if err != nil {
		return err
	}
	// An entry takes at least 3 bytes: a count beyond that is a damaged
	// file, not an allocation to make.
	id(lanes.ID{Destination: strs[0], Customer: strs[1], Key: strs[2], Subscription: strs[3]}, int(min(n, uint64(len(d.data)/3))))
	var seq uint64
	var at int64
	for range n {
		tag, err := d.uvarint()
		if err != nil {
			return err
		}
		delta, k := binary.Varint(d.data)
		if k <= 0 {
			return errSnapshotShort
		}
		d.data = d.data[k:]
		seq, at = seq+tag>>1, at+delta
		e := scheduler.ExportedEntry{Seq: seq, AcceptedAt: at}
		if tag&1 == 1 {
			if e.OddID, err = d.string(); err != nil {
				return err
			}
		} else {
			if len(d.data) < len(uuid.UUID{}) {
				return errSnapshotShort
			}
			d.data = d.data[copy(e.ID[:], d.data):]
		}
		entry(e)
	}
	return nil
}

func (d *snapshotDecoder) end() error {
	if len(d.data) != 0 {
		return fmt.Errorf("%d bytes after the last lane", len(d.data))
	}
	return nil
}

func (d *snapshotDecoder) uvarint() (uint64, error) {
	v, k := binary.Uvarint(d.data)
	if k <= 0 {
		return 0, errSnapshotShort
	}
	d.data = d.data[k:]
	return v, nil
}

func (d *snapshotDecoder) string() (string, error) {
	n, err := d.uvarint()
	if err != nil {
		return "", err
	}
	if n > uint64(len(d.data)) {
		return "", errSnapshotShort
	}
	s := string(d.data[:n])
	d.data = d.data[n:]
	return s, nil
}
