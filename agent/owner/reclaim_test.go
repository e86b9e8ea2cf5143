package owner

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/lanes"
)

func TestDoneRecordRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		seqs := make([]uint64, r.IntN(50))
		for i := range seqs {
			seqs[i] = r.Uint64N(1 << uint(1+r.IntN(62)))
		}
		want := slices.Sorted(slices.Values(seqs))
		got, err := decodeDone(encodeDone(slices.Clone(seqs)))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("decode(encode(%v)) = %v, want %v", seqs, got, want)
		}
	}
	if _, err := decodeDone([]byte{0x80}); err == nil {
		t.Fatal("a truncated varint decoded")
	}
}

func TestPurgeFloorNeverAboveTheRegisteredMark(t *testing.T) {
	cases := []struct{ registered, low, want uint64 }{
		{0, 0, 1},    // nothing stored: nothing to purge
		{10, 0, 11},  // nothing pending: everything registered may go
		{10, 4, 4},   // pending from 4 on: keep it
		{10, 10, 10}, // the last registered is pending
		{10, 30, 11}, // a low water above the mark never lifts the floor past it
	}
	for _, c := range cases {
		if got := purgeFloor(c.registered, c.low); got != c.want {
			t.Errorf("purgeFloor(registered %d, low %d) = %d, want %d", c.registered, c.low, got, c.want)
		}
	}
}

func TestCompactableOnlyFullyPurgedRecords(t *testing.T) {
	records := []doneRecord{{ledgerSeq: 3, max: 10}, {ledgerSeq: 7, max: 25}, {ledgerSeq: 9, max: 12}}
	for _, c := range []struct {
		purgedBelow uint64
		want        int
	}{{0, 0}, {9, 0}, {10, 1}, {24, 1}, {25, 3}, {100, 3}} {
		if got := compactable(records, c.purgedBelow); got != c.want {
			t.Errorf("purged below %d: %d records compactable, want %d", c.purgedBelow, got, c.want)
		}
	}
}

func TestSweepLanesOnlyUnderPressure(t *testing.T) {
	garbage := map[string]uint64{"a": 5, "b": 20, "c": 30}
	var purged []string
	purge := func(subject string, _ uint64) bool { purged = append(purged, subject); return true }
	sweepLanes(garbage, 10, purge)
	if len(purged) != 0 {
		t.Fatalf("purged %v with only %d lanes holding done events", purged, len(garbage))
	}
	if _, ok := garbage["a"]; ok || len(garbage) != 2 {
		t.Fatalf("garbage %v: want a (all below the purged mark) forgotten, b and c kept", garbage)
	}

	// Under pressure, lanes are freed until fewer than reclaimPressure
	// hold done events, or reclaimLanesPerTick were freed.
	garbage = make(map[string]uint64)
	for i := range reclaimPressure + 100 {
		garbage["lane-"+strconv.Itoa(i)] = 100 + uint64(i)
	}
	purged = nil
	sweepLanes(garbage, 10, purge)
	if len(purged) != 101 || len(garbage) != reclaimPressure-1 {
		t.Fatalf("just above pressure: purged %d lanes, %d left; want 101 purged", len(purged), len(garbage))
	}
	for i := range reclaimPressure + 2*reclaimLanesPerTick {
		garbage["lane-"+strconv.Itoa(i)] = 100 + uint64(i)
	}
	purged = nil
	sweepLanes(garbage, 10, purge)
	if len(purged) != reclaimLanesPerTick || len(garbage) != reclaimPressure+reclaimLanesPerTick {
		t.Fatalf("far above pressure: purged %d lanes, %d left; want %d purged", len(purged), len(garbage), reclaimLanesPerTick)
	}
	failing := func(string, uint64) bool { return false }
	before := len(garbage)
	sweepLanes(garbage, 10, failing)
	if len(garbage) != before {
		t.Fatalf("failed purges forgot lanes: %d left of %d", len(garbage), before)
	}
}

func TestDoneBook(t *testing.T) {
	var b doneBook
	if seqs, idle := b.takeSeqs(); !idle || len(seqs) != 0 {
		t.Fatalf("an empty book: %v, idle %v", seqs, idle)
	}
	b.noteDone("lane-a", 7)
	b.noteDone("lane-a", 3)
	b.noteDone("lane-b", 5)
	seqs, idle := b.takeSeqs()
	if idle || !slices.Equal(seqs, []uint64{7, 3, 5}) {
		t.Fatalf("took %v (idle %v), want 7 3 5", seqs, idle)
	}
	// Taken sequences are gone, but the lanes still wait for the loop.
	if seqs, idle := b.takeSeqs(); idle || len(seqs) != 0 {
		t.Fatalf("second take: %v, idle %v; want none, not idle", seqs, idle)
	}
	b.putBack(seqs)
	if again, _ := b.takeSeqs(); !slices.Equal(again, seqs) {
		t.Fatalf("after a failed write took %v, want %v back", again, seqs)
	}
	b.noteLedgerPurge("head-a")
	dirty, ledger := b.takeDirty()
	if dirty["lane-a"] != 7 || dirty["lane-b"] != 5 || len(dirty) != 2 || !slices.Equal(ledger, []string{"head-a"}) {
		t.Fatalf("dirty %v ledger %v: want the highest done seq per lane and head-a", dirty, ledger)
	}
	if _, idle := b.takeSeqs(); !idle {
		t.Fatal("a book with everything taken is not idle")
	}
}

type reclaimRig struct {
	r             *reclaimer
	sched         *scheduler.Scheduler
	js            *fakeJS
	lanes, ledger *fakeStream
	registered    uint64
}

func newReclaimRig(t *testing.T) *reclaimRig {
	rig := &reclaimRig{sched: scheduler.New(clock.NewManual(time.Unix(0, 0))), js: &fakeJS{}, lanes: &fakeStream{}, ledger: &fakeStream{}}
	f, _ := testFence(t, 0, rig.js)
	rig.r = newReclaimer(0, rig.lanes, rig.ledger, f, rig.sched, func() uint64 { return rig.registered }, nil, discardLog())
	return rig
}

func (rig *reclaimRig) pending(id lanes.ID, seqs ...uint64) {
	var entries []scheduler.Entry
	for _, s := range seqs {
		entries = append(entries, scheduler.Entry{Seq: s, EventID: "ev-" + strconv.FormatUint(s, 10)})
	}
	rig.sched.Restore(0, id, entries, scheduler.Head{}, false)
}

// lanePurgesBelow lists the lane-store purges "below seq" of a tick.
func lanePurgesBelow(purges []jetstream.StreamPurgeRequest) []uint64 {
	var out []uint64
	for _, p := range purges {
		if p.Subject == "" {
			out = append(out, p.Sequence)
		}
	}
	return out
}

// One tick writes the done record of what was delivered, and purges the
// lane store below the lower of the scheduler's low water and the first
// unregistered sequence; a done record is dropped once all it lists is
// purged.
func TestReclaimTickPurgesBelowLowWaterAndRegisteredMark(t *testing.T) {
	rig := newReclaimRig(t)
	ctx := context.Background()
	lane := lanes.ID{Destination: "orders", Customer: "acme", Key: "u1"}
	subject := lane.Subject(0)
	rig.pending(lane, 5, 6)
	rig.registered = 8
	for _, s := range []uint64{3, 1, 4, 2, 7, 8} {
		rig.r.noteDone(subject, s)
	}
	s := &sweep{garbage: make(map[string]uint64)}
	rig.r.tick(ctx, s)
	msgs := rig.js.published()
	if len(msgs) != 1 || msgs[0].Subject != lanes.DoneSubject(0) || msgs[0].Header.Get(EpochHeader) == "" {
		t.Fatalf("published %v, want one done record with its epoch", msgs)
	}
	if seqs, _ := decodeDone(msgs[0].Data); !slices.Equal(seqs, []uint64{1, 2, 3, 4, 7, 8}) {
		t.Fatalf("done record lists %v", seqs)
	}
	if got := lanePurgesBelow(rig.lanes.takePurges()); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("lane store purged below %v, want below 5 (the low water)", got)
	}
	if len(rig.ledger.takePurges()) != 0 || len(rig.r.doneRecords) != 1 {
		t.Fatalf("the done record (lists 8) was compacted with only 1..4 purged")
	}

	// Nothing pending any more, but the mark stands at 6: 7 and 8 are
	// stored but not registered, whatever is done.
	rig.sched.DropPartition(0)
	rig.registered = 6
	rig.r.noteDone(subject, 6)
	rig.r.tick(ctx, s)
	if got := lanePurgesBelow(rig.lanes.takePurges()); !slices.Equal(got, []uint64{7}) {
		t.Fatalf("lane store purged below %v, want below 7 (the registered mark + 1)", got)
	}
	rig.registered = 8
	rig.r.noteDone(subject, 9)
	rig.r.tick(ctx, s)
	if got := lanePurgesBelow(rig.lanes.takePurges()); !slices.Equal(got, []uint64{9}) {
		t.Fatalf("lane store purged below %v, want below 9", got)
	}
	compacted := rig.ledger.takePurges()
	if len(compacted) != 1 || compacted[0].Subject != lanes.DoneSubject(0) || compacted[0].Sequence != 3 {
		t.Fatalf("ledger purges %+v, want the first two done records (ledger seqs 1, 2) compacted", compacted)
	}
	if len(rig.r.doneRecords) != 1 || rig.r.doneRecords[0].max != 9 {
		t.Fatalf("done records left %+v, want the one listing 9", rig.r.doneRecords)
	}
}

// Once detached, the reclaimer still records what is done but purges
// nothing of the lane store.
func TestReclaimPurgesNothingAfterDetach(t *testing.T) {
	rig := newReclaimRig(t)
	rig.registered = 8
	rig.r.detach()
	rig.r.noteDone("lanes.x", 3)
	rig.r.noteLedgerPurge("ledger.head")
	rig.r.tick(context.Background(), &sweep{garbage: make(map[string]uint64)})
	if len(rig.js.published()) != 1 {
		t.Fatal("the done record was not written after detach")
	}
	if p := rig.lanes.takePurges(); len(p) != 0 {
		t.Fatalf("lane store purged %+v after detach", p)
	}
	if p := rig.ledger.takePurges(); len(p) != 0 {
		t.Fatalf("ledger purged %+v after detach", p)
	}
}

// A fenced-off owner writes no done record and purges nothing; what it
// took waits in the book.
func TestReclaimFencedWritesNothing(t *testing.T) {
	rig := newReclaimRig(t)
	rig.registered = 8
	if err := rig.r.fence.lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	rig.r.noteDone("lanes.x", 3)
	rig.r.tick(context.Background(), &sweep{garbage: make(map[string]uint64)})
	if len(rig.js.published()) != 0 || len(rig.lanes.takePurges()) != 0 || len(rig.ledger.takePurges()) != 0 {
		t.Fatal("a fenced-off reclaimer wrote to the store")
	}
	if seqs, _ := rig.r.book.takeSeqs(); !slices.Equal(seqs, []uint64{3}) {
		t.Fatalf("book holds %v after a refused done record, want 3 back", seqs)
	}
}

// While events are pending, the lane store is purged below the low water
// at most once per purgeEvery (each purge rewrites the stream's state);
// done records are still written every tick, and a partition with
// nothing pending is purged at once.
func TestReclaimSpacesPurgesWhileEventsArePending(t *testing.T) {
	rig := newReclaimRig(t)
	ctx := context.Background()
	lane := lanes.ID{Destination: "orders", Customer: "acme", Key: "u1"}
	subject := lane.Subject(0)
	rig.pending(lane, 5, 6)
	rig.registered = 8
	s := &sweep{garbage: make(map[string]uint64), purgeEvery: time.Hour}

	rig.r.noteDone(subject, 3)
	rig.r.tick(ctx, s)
	if got := lanePurgesBelow(rig.lanes.takePurges()); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("first tick purged below %v, want below 5", got)
	}
	// The low water moves on (5 delivered), but within purgeEvery.
	rig.sched.DropPartition(0)
	rig.pending(lane, 6)
	rig.r.noteDone(subject, 5)
	rig.r.tick(ctx, s)
	if got := lanePurgesBelow(rig.lanes.takePurges()); len(got) != 0 {
		t.Fatalf("purged below %v within purgeEvery while events are pending", got)
	}
	if n := len(rig.js.published()); n != 2 {
		t.Fatalf("%d done records after two ticks, want one each", n)
	}
	// Nothing pending: purged at once, within purgeEvery too.
	rig.sched.DropPartition(0)
	rig.r.noteDone(subject, 6)
	rig.r.tick(ctx, s)
	if got := lanePurgesBelow(rig.lanes.takePurges()); !slices.Equal(got, []uint64{9}) {
		t.Fatalf("with nothing pending purged below %v, want below 9 (the registered mark + 1)", got)
	}
}

// Lane purges wait until the done events above the purge floor outnumber
// the pending ones: a draining backlog's mark follows its done events.
func TestLanePurgesOnlyWhenDoneOutweighsPending(t *testing.T) {
	for _, c := range []struct {
		registered, purgedBelow uint64
		pending                 int
		want                    bool
	}{
		{registered: 0, purgedBelow: 0, pending: 0, want: false},
		{registered: 100, purgedBelow: 100, pending: 0, want: false},
		{registered: 10_000_000, purgedBelow: 0, pending: 9_000_000, want: false}, // a deep backlog draining
		{registered: 2_000, purgedBelow: 0, pending: 1_000, want: false},          // as many done as pending
		{registered: 2_001, purgedBelow: 0, pending: 1_000, want: true},
		{registered: 1_000_100, purgedBelow: 100, pending: 1, want: true}, // one lane stuck, the rest delivered
		{registered: 50, purgedBelow: 100, pending: 0, want: false},       // purged past the registered mark
	} {
		if got := doneOutweighsPending(c.registered, c.purgedBelow, c.pending); got != c.want {
			t.Errorf("registered %d, purged below %d, %d pending: %v, want %v", c.registered, c.purgedBelow, c.pending, got, c.want)
		}
	}

	// Without a purge, the sweep frees nothing and still forgets the
	// lanes the purge below the mark freed.
	garbage := make(map[string]uint64)
	for i := range reclaimPressure + 100 {
		garbage["lane-"+strconv.Itoa(i)] = uint64(i)
	}
	sweepLanes(garbage, 99, nil)
	if len(garbage) != reclaimPressure {
		t.Fatalf("%d lanes left, want %d (those at or below 99 forgotten, none freed)", len(garbage), reclaimPressure)
	}
}

// What the lane store stored within its duplicate window stays, done or
// not, so that a restart's duplicate detection still finds it; once the
// window has passed it goes, with no other work to bring the loop there.
func TestReclaimKeepsTheDuplicateWindow(t *testing.T) {
	rig := newReclaimRig(t)
	ctx := context.Background()
	subject := lanes.ID{Destination: "orders", Customer: "acme", Key: "u1"}.Subject(0)
	rig.registered = 8
	now := time.Now()
	rig.r.keep = newDedupKeep(time.Minute, 3, now.Add(-2*time.Minute)) // 1..3 stored before the window
	rig.r.keep.note(now.Add(-10*time.Second), 6)                       // 4..6 within it
	for seq := uint64(1); seq <= 8; seq++ {
		rig.r.noteDone(subject, seq)
	}
	s := &sweep{garbage: make(map[string]uint64)}
	rig.r.tick(ctx, s)
	if got := lanePurgesBelow(rig.lanes.takePurges()); !slices.Equal(got, []uint64{4}) {
		t.Fatalf("lane store purged below %v, want below 4 (what the window holds stays)", got)
	}
	if !s.held {
		t.Fatal("the sweep does not know done events wait for the window")
	}
	// Nothing else happens; the window passes for everything noted.
	for i := range rig.r.keep.marks {
		rig.r.keep.marks[i].at = now.Add(-2 * time.Minute)
	}
	rig.r.tick(ctx, s)
	if got := lanePurgesBelow(rig.lanes.takePurges()); !slices.Equal(got, []uint64{9}) {
		t.Fatalf("lane store purged below %v once the window passed, want below 9", got)
	}
	if s.held {
		t.Fatal("the sweep still waits with nothing held back")
	}
	// Idle and nothing held: the loop rests.
	rig.r.tick(ctx, s)
	if p := rig.lanes.takePurges(); len(p) != 0 {
		t.Fatalf("an idle tick purged %+v", p)
	}
}

func TestDedupKeepFloor(t *testing.T) {
	now := time.Now()
	k := newDedupKeep(time.Minute, 0, time.Time{})
	if f := k.floor(now); f != 1 {
		t.Fatalf("floor of an empty keep = %d, want 1 (nothing known old)", f)
	}
	k.note(now.Add(-90*time.Second), 10)
	k.note(now.Add(-70*time.Second), 10) // nothing new: ignored
	k.note(now.Add(-61*time.Second), 20)
	k.note(now.Add(-30*time.Second), 30)
	if f := k.floor(now); f != 21 {
		t.Fatalf("floor = %d, want 21 (one above the newest mark a window old)", f)
	}
	if len(k.marks) != 2 {
		t.Fatalf("keep holds %d marks, want 2 (the newest old one and the one after)", len(k.marks))
	}
	if f := k.floor(now.Add(time.Minute)); f != 31 {
		t.Fatalf("a minute later floor = %d, want 31", f)
	}
	var none *dedupKeep
	if f := none.floor(now); f != math.MaxUint64 {
		t.Fatalf("a nil keep's floor = %d, want none", f)
	}
}
