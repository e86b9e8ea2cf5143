package deadletters

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent/archive"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// putCopy archives copies of dls (archived before) as another object of
// partition 0, named by ledger sequences first to last: the object an
// owner that changed between an object's write and its ledger's purge
// writes again.
func (rg *replayRig) putCopy(t *testing.T, first, last uint64, dls ...*rivorav1.DeadLetter) {
	t.Helper()
	var copies []*rivorav1.DeadLetter
	for _, dl := range dls {
		copies = append(copies, proto.Clone(dl).(*rivorav1.DeadLetter))
	}
	deadAt := dls[0].GetDeadAt().AsTime()
	if _, err := rg.arch.Put(context.Background(), archive.Key(dls[0].GetEvent().GetDestinationId(), deadAt, 0, first, last), copies); err != nil {
		t.Fatal(err)
	}
}

// dlqView is what dlq stats and dlq list say of a destination: the
// total and replayed counts, and the ids listed with whether each says
// replayed.
func dlqView(t *testing.T, s *Service, dest string) (total, replayed int64, listed map[string]bool, n int) {
	t.Helper()
	ctx := context.Background()
	f := &rivorav1.DeadLetterFilter{DestinationId: dest}
	stats, err := s.DeadLetterStats(ctx, connect.NewRequest(&rivorav1.DeadLetterStatsRequest{Filter: f}))
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, c := range stats.Msg.GetCounts() {
		sum += c.GetCount()
	}
	if sum != stats.Msg.GetTotal() {
		t.Errorf("stats: counts add up to %d, total %d", sum, stats.Msg.GetTotal())
	}
	list, err := s.ListDeadLetters(ctx, connect.NewRequest(&rivorav1.ListDeadLettersRequest{Filter: f}))
	if err != nil {
		t.Fatal(err)
	}
	listed = map[string]bool{}
	for _, dl := range list.Msg.GetDeadLetters() {
		listed[dl.GetEvent().GetEventId()] = dl.GetReplayedAt() != nil
	}
	return stats.Msg.GetTotal(), stats.Msg.GetReplayed(), listed, len(list.Msg.GetDeadLetters())
}

// A dead letter archived twice (two objects hold the same death) is one
// death: a dry run, stats and list count it once, and a replay sends it
// once and marks both lines, however long the replay runs (the stream's
// dedup window no longer matters).
func TestADeadLetterArchivedTwiceIsReplayedOnce(t *testing.T) {
	rg := newReplayRig(t)
	ctx := context.Background()
	a := deads("a", 3)
	rg.put(t, "orders", 0, 1, time.Hour, a...)
	// The copy holds a dead letter of its own besides (the new owner's
	// batch went further).
	b := dead("b-00", "acme", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS)
	b.Event.DestinationId, b.DeadAt = "orders", a[0].GetDeadAt()
	rg.putCopy(t, 1, 4, append(slices.Clone(a), b)...)
	orders := &rivorav1.DeadLetterFilter{DestinationId: "orders"}
	s := &Service{archive: rg.arch, replay: rg.replay}

	if total, replayed, listed, n := dlqView(t, s, "orders"); total != 4 || replayed != 0 || n != 4 || len(listed) != 4 {
		t.Fatalf("before the replay: stats total %d (replayed %d), %d listed %v; want the 4 dead letters once each", total, replayed, n, listed)
	}
	_, dry, err := rg.run(ctx, ReplayRequest{Filter: orders, DryRun: true}, nil)
	if err != nil || dry.Total != 4 || dry.Skipped != 0 || countOf(dry.Counts) != 4 {
		t.Fatalf("dry run: %+v, %v; want 4 to replay", dry, err)
	}
	// Paced, one a second: far longer than a dedup window would hold.
	_, end, err := rg.run(ctx, ReplayRequest{Filter: orders, Rate: rate(1)}, nil)
	if err != nil || end.Total != 4 || end.Replayed != 4 || end.Skipped != 0 {
		t.Fatalf("replay: %+v, %v; want the 4 replayed, none skipped", end, err)
	}
	if ids := rg.ingest.ids(); !slices.Equal(ids, []string{"a-00", "a-01", "a-02", "b-00"}) {
		t.Errorf("re-ingested %v; want each dead letter once, in archive order", ids)
	}
	if total, replayed, listed, n := dlqView(t, s, "orders"); total != 4 || replayed != 4 || n != 4 || !listed["a-00"] || !listed["b-00"] {
		t.Errorf("after the replay: stats total %d (replayed %d), %d listed %v; want 4, all replayed", total, replayed, n, listed)
	}
	// Both lines of each copied death are marked: a later replay skips
	// each once.
	for _, k := range []string{archive.Key("orders", a[0].GetDeadAt().AsTime(), 0, 1, 3), archive.Key("orders", a[0].GetDeadAt().AsTime(), 0, 1, 4)} {
		marks := newReplayMarks(rg.kv)
		if _, err := marks.load(ctx, k); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, ok := marks.handledAt(k, i); !ok {
				t.Errorf("line %d of %s not marked", i, k)
			}
		}
	}
	_, again, err := rg.run(ctx, ReplayRequest{Filter: orders}, nil)
	if err != nil || again.Total != 4 || again.Skipped != 4 || again.Replayed != 0 || len(rg.ingest.ids()) != 4 {
		t.Errorf("replay again: %+v, %v, %d re-ingested in all; want the 4 skipped, nothing sent", again, err, len(rg.ingest.ids()))
	}
}

// A copy written after a replay handled its dead letters, in an object
// that sorts before theirs, is handled too: a death is handled when any
// line of it is marked. The event that truly died again after the replay
// is still replayed, at its new death.
func TestACopyArchivedAfterAReplayIsHandledToo(t *testing.T) {
	rg := newReplayRig(t)
	ctx := context.Background()
	a := deads("a", 3)
	rg.put(t, "orders", 0, 1, time.Hour, a...)
	orders := &rivorav1.DeadLetterFilter{DestinationId: "orders"}
	if _, end, err := rg.run(ctx, ReplayRequest{Filter: orders}, nil); err != nil || end.Replayed != 3 {
		t.Fatalf("first replay: %+v, %v; want 3 replayed", end, err)
	}
	// The new owner archived a-00 and a-01 again, as an object of its
	// own that sorts first; a-02, replayed, died again.
	rg.putCopy(t, 1, 2, a[:2]...)
	rg.clock.Advance(time.Minute)
	again := dead("a-02", "acme", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS)
	again.Event.Replayed = true
	rg.put(t, "orders", 0, 5, -30*time.Second, again)
	rg.clock.Advance(time.Minute)

	_, dry, err := rg.run(ctx, ReplayRequest{Filter: orders, DryRun: true}, nil)
	if err != nil || dry.Total != 4 || dry.Skipped != 3 || countOf(dry.Counts) != 1 {
		t.Fatalf("dry run: %+v, %v; want 4 deaths, the 3 replayed skipped, 1 to replay", dry, err)
	}
	_, end, err := rg.run(ctx, ReplayRequest{Filter: orders}, nil)
	if err != nil || end.Total != 4 || end.Skipped != 3 || end.Replayed != 1 {
		t.Fatalf("second replay: %+v, %v; want a-02's new death replayed, the rest skipped", end, err)
	}
	if ids := rg.ingest.ids(); !slices.Equal(ids, []string{"a-00", "a-01", "a-02", "a-02"}) {
		t.Errorf("re-ingested over both replays %v; want a-02 again at its new death, nothing else twice", ids)
	}
	s := &Service{archive: rg.arch, replay: rg.replay}
	if total, replayed, listed, n := dlqView(t, s, "orders"); total != 4 || replayed != 4 || n != 4 || !listed["a-00"] {
		t.Errorf("stats total %d (replayed %d), %d listed %v; want 4, all replayed", total, replayed, n, listed)
	}
	shown, err := s.GetDeadLetter(ctx, connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: "a-00", DestinationId: "orders"}))
	if err != nil || shown.Msg.GetDeadLetter().GetReplayedAt() == nil {
		t.Errorf("show a-00: %v, %v; want it replayed (its other line is marked)", shown.Msg.GetDeadLetter(), err)
	}
}

// replayBesideAnother runs a paced replay of dest's dead letters and, at
// its first wait (the first dead letter sent and marked, the second's
// batch taken), another replay of them to its end; it returns what the
// other and the paced one counted.
func (rg *replayRig) replayBesideAnother(t *testing.T, dest string) (other, paced Progress) {
	t.Helper()
	ctx := context.Background()
	f := &rivorav1.DeadLetterFilter{DestinationId: dest}
	var otherErr error
	rg.onWait = func(n int) {
		if n != 1 {
			return
		}
		other, otherErr = rg.replay.Run(ctx, ReplayRequest{Filter: f}, func(Progress) error { return nil })
	}
	_, paced, err := rg.run(ctx, ReplayRequest{Filter: f, Rate: rate(10)}, nil)
	if err != nil || otherErr != nil {
		t.Fatalf("replays: %v, %v", err, otherErr)
	}
	return other, paced
}

// A replay leaves the dead letters another replay, running at the same
// time, handled after it counted them, and counts them: what it
// replayed, skipped and left to the other adds up to what matched.
func TestReplayCountsWhatAnotherReplayHandled(t *testing.T) {
	rg := newReplayRig(t)
	rg.put(t, "orders", 0, 1, time.Hour, deads("a", 5)...)
	other, end := rg.replayBesideAnother(t, "orders")
	if other.Total != 5 || other.Replayed != 4 || other.Skipped != 1 || other.ReplayedByAnother != 0 {
		t.Errorf("the other replay: %+v; want a-01 … a-04 replayed, a-00 skipped", other)
	}
	// a-01, in the batch it waited to send, is left to the other too: the
	// marks are read again after the wait.
	if end.Total != 5 || end.Replayed != 1 || end.Skipped != 0 || end.ReplayedByAnother != 4 {
		t.Errorf("the paced replay: %+v; want a-00 replayed, 4 replayed by the other", end)
	}
	if end.Replayed+end.Skipped+end.ReplayedByAnother != end.Total {
		t.Errorf("the paced replay's counts do not add up: %+v", end)
	}
	msg := progressMessage(end)
	if msg.GetReplayedByAnother() != 4 {
		t.Errorf("progress message: replayed_by_another %d, want 4", msg.GetReplayedByAnother())
	}
}

// A copy that sorts before the replayed object and holds a new dead
// letter besides: the next replay sends only the new one. The copied
// lines, unmarked in the copy but handled through their first object,
// are skipped, not sent again when the copy is visited for its new
// line.
func TestACopyWithANewDeadLetterSendsOnlyTheNewOne(t *testing.T) {
	rg := newReplayRig(t)
	ctx := context.Background()
	a := deads("a", 3)
	rg.put(t, "orders", 0, 2, time.Hour, a...)
	orders := &rivorav1.DeadLetterFilter{DestinationId: "orders"}
	if _, end, err := rg.run(ctx, ReplayRequest{Filter: orders}, nil); err != nil || end.Replayed != 3 {
		t.Fatalf("first replay: %+v, %v; want 3 replayed", end, err)
	}
	b := dead("b-00", "acme", rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS)
	b.Event.DestinationId, b.DeadAt = "orders", a[0].GetDeadAt()
	rg.putCopy(t, 1, 5, append(slices.Clone(a), b)...)

	_, dry, err := rg.run(ctx, ReplayRequest{Filter: orders, DryRun: true}, nil)
	if err != nil || dry.Total != 4 || dry.Skipped != 3 || countOf(dry.Counts) != 1 {
		t.Fatalf("dry run: %+v, %v; want 4 deaths, 3 skipped, 1 to replay", dry, err)
	}
	_, end, err := rg.run(ctx, ReplayRequest{Filter: orders}, nil)
	if err != nil || end.Total != 4 || end.Replayed != 1 || end.Skipped != 3 {
		t.Errorf("second replay: %+v, %v; want b-00 replayed, the 3 others skipped", end, err)
	}
	if ids := rg.ingest.ids(); !slices.Equal(ids, []string{"a-00", "a-01", "a-02", "b-00"}) {
		t.Errorf("re-ingested over both replays %v; want each dead letter once", ids)
	}
}

// Two replays at once: the paced one reads the marks of each object
// again before it sends a batch, so what the other sent meanwhile in an
// object it had not reached is left to the other and counted, not sent
// again.
func TestAReplaySendsNothingAnotherReplaySentMeanwhile(t *testing.T) {
	rg := newReplayRig(t)
	rg.put(t, "orders", 0, 1, time.Hour, deads("a", 2)...)
	rg.put(t, "orders", 0, 3, time.Hour, deads("b", 3)...)
	other, end := rg.replayBesideAnother(t, "orders")
	if other.Total != 5 || other.Replayed != 4 || other.Skipped != 1 {
		t.Errorf("the other replay: %+v; want a-01, b-00 … b-02 replayed, a-00 skipped", other)
	}
	if end.Total != 5 || end.Replayed != 1 || end.ReplayedByAnother != 4 {
		t.Errorf("the paced replay: %+v; want a-00 replayed, the 4 others replayed by the other", end)
	}
	if end.Replayed+end.Skipped+end.ReplayedByAnother != end.Total {
		t.Errorf("the paced replay's counts do not add up: %+v", end)
	}
	if ids := rg.ingest.ids(); !slices.Equal(ids, []string{"a-00", "a-01", "b-00", "b-01", "b-02"}) {
		t.Errorf("re-ingested by both %v; want each dead letter once", ids)
	}
}

// hours groups an hour directory's objects, variants included, and
// nothing else: what count keeps to tell copies apart is reset between.
func TestHoursSplitsKeysByHourDirectory(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	k1 := archive.Key("orders", at, 0, 1, 3)
	k2 := archive.VariantKey(k1, 2)
	k3 := archive.Key("orders", at.Add(59*time.Minute), 1, 1, 3)
	k4 := archive.Key("orders", at.Add(time.Hour), 0, 4, 6)
	got := hours([]string{k1, k2, k3, k4})
	if want := [][]string{{k1, k2, k3}, {k4}}; !reflect.DeepEqual(got, want) {
		t.Errorf("hours: %v, want %v", got, want)
	}
	if got := hours(nil); len(got) != 0 {
		t.Errorf("hours of none: %v", got)
	}
}
