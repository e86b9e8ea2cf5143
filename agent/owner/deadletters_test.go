package owner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/archive"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

var deadHour = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func testDead(dest string, laneSeq, ledgerSeq uint64, deadAt time.Time) queuedDead {
	return queuedDead{
		dl:        &rivorav1.DeadLetter{Event: &rivorav1.Event{DestinationId: dest, EventId: fmt.Sprint("ev-", laneSeq)}, LaneSeq: laneSeq, DeadAt: timestamppb.New(deadAt)},
		ledgerSeq: ledgerSeq,
	}
}

func ledgerSeqs(batch []queuedDead) []uint64 {
	var out []uint64
	for _, d := range batch {
		out = append(out, d.ledgerSeq)
	}
	return out
}

func TestDeadQueueOrderBatchesAndCounts(t *testing.T) {
	q := newDeadQueue()
	q.push()
	select {
	case <-q.ready:
		t.Fatal("pushing nothing signalled ready")
	default:
	}
	q.push(testDead("a", 10, 1, deadHour), testDead("b", 11, 2, deadHour))
	q.push(testDead("a", 12, 3, deadHour)) // does not block on a full ready
	select {
	case <-q.ready:
	default:
		t.Fatal("no ready signal after a push")
	}
	if q.count("a") != 2 || q.count("b") != 1 || q.count("c") != 0 {
		t.Fatalf("unarchived a=%d b=%d c=%d, want 2 1 0", q.count("a"), q.count("b"), q.count("c"))
	}
	first := q.take(2)
	if got := ledgerSeqs(first); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("first batch %v, want the oldest two (1, 2)", got)
	}
	if q.count("a") != 2 {
		t.Fatal("taking a batch counted it archived")
	}
	q.push(testDead("b", 13, 4, deadHour))
	second := q.take(10)
	if got := ledgerSeqs(second); !slices.Equal(got, []uint64{3, 4}) {
		t.Fatalf("second batch %v, want 3, 4", got)
	}
	if got := q.take(10); len(got) != 0 {
		t.Fatalf("an empty queue gave %v", got)
	}
	if !q.holds("ev-10") || !q.holds("ev-13") || q.holds("ev-99") {
		t.Fatal("a dead letter taken for the archive, not yet archived, is not held (or one never queued is)")
	}
	q.archived("a", []*rivorav1.DeadLetter{first[0].dl, second[0].dl})
	q.archived("b", []*rivorav1.DeadLetter{first[1].dl})
	if q.holds("ev-10") || q.holds("ev-12") || q.holds("ev-11") || !q.holds("ev-13") {
		t.Fatal("held after archiving: want only b's ev-13, not yet archived")
	}
	if q.count("a") != 0 || q.count("b") != 1 {
		t.Fatalf("after archiving: a=%d b=%d, want 0 1", q.count("a"), q.count("b"))
	}
	if _, ok := q.unarchived["a"]; ok {
		t.Fatal("a destination with nothing unarchived keeps an entry")
	}
	if q.archivedCount("a") != 2 || q.archivedCount("b") != 1 || q.archivedCount("c") != 0 {
		t.Fatalf("archived a=%d b=%d c=%d, want 2 1 0", q.archivedCount("a"), q.archivedCount("b"), q.archivedCount("c"))
	}
}

// An archive object holds one destination's dead letters of one hour; the
// objects come in the order their first dead letter was queued, each with
// its first and last ledger sequence.
func TestGroupBatchByDestinationAndHour(t *testing.T) {
	later := deadHour.Add(time.Hour + time.Minute)
	groups := groupBatch([]queuedDead{
		testDead("a", 10, 1, deadHour.Add(time.Minute)),
		testDead("b", 11, 2, deadHour),
		testDead("a", 12, 3, deadHour.Add(59*time.Minute)),
		testDead("a", 13, 4, later),
		testDead("b", 14, 5, deadHour.Add(2*time.Minute)),
	})
	type want struct {
		dest        string
		hour        time.Time
		first, last uint64
		laneSeqs    []uint64
	}
	wants := []want{
		{"a", deadHour, 1, 3, []uint64{10, 12}},
		{"b", deadHour, 2, 5, []uint64{11, 14}},
		{"a", deadHour.Add(time.Hour), 4, 4, []uint64{13}},
	}
	if len(groups) != len(wants) {
		t.Fatalf("%d groups, want %d", len(groups), len(wants))
	}
	for i, w := range wants {
		g := groups[i]
		var seqs []uint64
		for _, dl := range g.items {
			seqs = append(seqs, dl.GetLaneSeq())
		}
		if g.dest != w.dest || !g.hour.Equal(w.hour) || g.first != w.first || g.last != w.last || !slices.Equal(seqs, w.laneSeqs) {
			t.Errorf("group %d: %s %s %d..%d %v; want %+v", i, g.dest, g.hour, g.first, g.last, seqs, w)
		}
	}
}

// flakyArchive fails its first fails puts, then stores.
type flakyArchive struct {
	archive.Archive
	mu    sync.Mutex
	fails int
	keys  []string
}

func (a *flakyArchive) Put(_ context.Context, key string, _ []*rivorav1.DeadLetter) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fails > 0 {
		a.fails--
		return "", errors.New("archive down")
	}
	a.keys = append(a.keys, key)
	return key, nil
}

// Dead letters recorded in the ledger are archived in ledger order and
// only then purged from the ledger; an archive failure is retried.
func TestDeadLettersRecordThenArchive(t *testing.T) {
	js, ledger, arch := &fakeJS{}, &fakeStream{}, &flakyArchive{fails: 1}
	f, _ := testFence(t, 3, js)
	d := newDeadLetters(3, ledger, f, arch, discardLog())
	ctx := context.Background()
	for _, seq := range []uint64{40, 41} {
		if err := d.record(ctx, testDead("a", seq, 0, deadHour).dl); err != nil {
			t.Fatal(err)
		}
	}
	msgs := js.published()
	if len(msgs) != 2 || msgs[0].Subject != lanes.DeadSubject(3, 40) || msgs[1].Header.Get(EpochHeader) == "" {
		t.Fatalf("ledger writes %v, want the two dead letters, stamped", msgs)
	}
	batch := d.queue.take(archiveBatch)
	if got := ledgerSeqs(batch); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("queued with ledger seqs %v, want 1, 2", got)
	}
	if !d.archiveBatch(ctx, batch) {
		t.Fatal("archiving failed")
	}
	if want := archive.Key("a", deadHour, 3, 1, 2); !slices.Equal(arch.keys, []string{want}) {
		t.Fatalf("archived %v, want %s", arch.keys, want)
	}
	purges := ledger.takePurges()
	if len(purges) != 2 || purges[0].Subject != lanes.DeadSubject(3, 40) || purges[1].Subject != lanes.DeadSubject(3, 41) {
		t.Fatalf("ledger purges %+v, want both dead letters", purges)
	}
	if n := d.queue.count("a"); n != 0 {
		t.Fatalf("%d unarchived after archiving", n)
	}
}

// A fenced-off owner leaves archived dead letters in the ledger (the next
// owner archives them again) and writes no new ones.
func TestDeadLettersFenced(t *testing.T) {
	js, ledger, arch := &fakeJS{}, &fakeStream{}, &flakyArchive{}
	f, lease := testFence(t, 3, js)
	d := newDeadLetters(3, ledger, f, arch, discardLog())
	ctx := context.Background()
	if err := d.record(ctx, testDead("a", 40, 0, deadHour).dl); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.record(ctx, testDead("a", 41, 0, deadHour).dl); !errors.Is(err, ErrFenced) {
		t.Fatalf("record after the lease was lost: %v, want ErrFenced", err)
	}
	if d.archiveBatch(ctx, d.queue.take(archiveBatch)) {
		t.Fatal("archiving went on after the lease was lost")
	}
	if len(ledger.takePurges()) != 0 || d.queue.count("a") != 1 || len(js.published()) != 1 {
		t.Fatal("a fenced-off owner purged or recorded dead letters")
	}
}

// What waits for the archive is listed in ledger order, a batch being
// written (taken, not archived yet) included, and exactly what the
// UNARCHIVED counts count: a dead letter leaves the list when, and only
// when, it is archived.
func TestDeadQueueWaitingListsWhatIsCounted(t *testing.T) {
	q := newDeadQueue()
	q.push(testDead("a", 10, 1, deadHour), testDead("b", 11, 2, deadHour), testDead("a", 12, 3, deadHour))
	waiting := func() []queuedDead {
		taken, queued := q.waiting()
		return append(slices.Clone(taken), queued...)
	}
	seqs := func() []uint64 { return ledgerSeqs(waiting()) }
	if got := seqs(); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("waiting %v, want 1, 2, 3", got)
	}
	batch := q.take(2)
	beforeTaken, beforeQueued := q.waiting() // read later, as a listing does
	q.push(testDead("b", 13, 4, deadHour))
	if got := seqs(); !slices.Equal(got, []uint64{1, 2, 3, 4}) {
		t.Fatalf("with a batch being written: waiting %v, want 1, 2, 3, 4", got)
	}
	q.archived("b", []*rivorav1.DeadLetter{batch[1].dl})
	if got := seqs(); !slices.Equal(got, []uint64{1, 3, 4}) {
		t.Fatalf("after b's part of the batch was archived: waiting %v, want 1, 3, 4", got)
	}
	if got := ledgerSeqs(append(slices.Clone(beforeTaken), beforeQueued...)); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("a list taken earlier changed to %v, want it as it was (1, 2, 3)", got)
	}
	if n := q.count("a") + q.count("b"); n != len(waiting()) {
		t.Fatalf("counted %d unarchived, listed %d", n, len(waiting()))
	}
	q.archived("a", []*rivorav1.DeadLetter{batch[0].dl})
	rest := q.take(10)
	q.archived("a", []*rivorav1.DeadLetter{rest[0].dl})
	q.archived("b", []*rivorav1.DeadLetter{rest[1].dl})
	if got := waiting(); len(got) != 0 {
		t.Fatalf("all archived, still waiting: %v", ledgerSeqs(got))
	}
}
