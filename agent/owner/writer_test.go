package owner

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/scheduler"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func TestNextSequenceOnlyTheExactNext(t *testing.T) {
	cases := []struct {
		name    string
		through uint64
		ack     storedAck
		next    bool
		wantErr bool
	}{
		{"the next", 5, storedAck{seq: 6}, true, false},
		{"the first ever", 0, storedAck{seq: 1}, true, false},
		{"a duplicate already registered", 5, storedAck{seq: 3, dup: true}, false, false},
		{"a duplicate of the mark itself", 5, storedAck{seq: 5, dup: true}, false, false},
		{"a duplicate above the mark is the next one stored", 5, storedAck{seq: 6, dup: true}, true, false},
		{"a gap", 5, storedAck{seq: 7}, false, true},
		{"a duplicate beyond a gap", 5, storedAck{seq: 8, dup: true}, false, true},
		{"a new write at or below the mark", 5, storedAck{seq: 5}, false, true},
		{"a new write far below the mark", 5, storedAck{seq: 2}, false, true},
	}
	for _, c := range cases {
		next, err := nextSequence(c.through, c.ack)
		if next != c.next || (err != nil) != c.wantErr {
			t.Errorf("%s: nextSequence(%d, %+v) = %v, %v; want %v, error %v", c.name, c.through, c.ack, next, err, c.next, c.wantErr)
		}
	}
}

func testEvent(id, lane string) *rivorav1.Event {
	return &rivorav1.Event{EventId: id, DestinationId: "orders", CustomerId: "acme", LaneKey: lane, Payload: []byte(`{}`)}
}

// testFlight is a group of one request per event list, as publish leaves
// it (subjects filled in).
func testFlight(p int, reqs ...[]*rivorav1.Event) *flight {
	f := &flight{}
	for _, evs := range reqs {
		req := &appendReq{done: make(chan appendResult, 1)}
		var subjects []string
		for _, ev := range evs {
			data, err := proto.Marshal(ev)
			if err != nil {
				panic(err)
			}
			req.items = append(req.items, Item{Event: ev, Data: data, MsgID: ev.GetEventId()})
			subjects = append(subjects, laneOf(ev).Subject(p))
		}
		f.reqs = append(f.reqs, req)
		f.subjects = append(f.subjects, subjects)
	}
	return f
}

func testWriter(sched *scheduler.Scheduler) *laneWriter {
	return newLaneWriter(0, nil, nil, sched, &eventCache{}, discardLog())
}

// A group stored at exactly the next sequences is registered, lane by
// lane, and the mark moves to its last; duplicates already registered are
// skipped.
func TestRegisterExactNextSequences(t *testing.T) {
	sched := scheduler.New(clock.NewManual(time.Unix(0, 0)))
	w := testWriter(sched)
	w.restored(5)
	f := testFlight(0,
		[]*rivorav1.Event{testEvent("a1", "a"), testEvent("old", "a")},
		[]*rivorav1.Event{testEvent("b1", "b"), testEvent("a2", "a")},
	)
	acks := [][]storedAck{{{seq: 6}, {seq: 4, dup: true}}, {{seq: 7}, {seq: 8}}}
	if err := w.register(f, acks); err != nil {
		t.Fatal(err)
	}
	if got := w.registered(); got != 8 {
		t.Fatalf("registered through %d, want 8", got)
	}
	want := map[string]struct {
		lane  string
		seq   uint64
		ahead int
	}{"a1": {"a", 6, 0}, "a2": {"a", 8, 1}, "b1": {"b", 7, 0}}
	for id, w := range want {
		loc, ok := sched.Find(id)
		if !ok || loc.Lane.Key != w.lane || loc.Entry.Seq != w.seq || loc.Ahead != w.ahead {
			t.Errorf("%s: %+v (found %v), want lane %s seq %d behind %d", id, loc, ok, w.lane, w.seq, w.ahead)
		}
	}
	if _, ok := sched.Find("old"); ok {
		t.Error("a duplicate below the mark was registered again")
	}
	// Each registered entry carries the cache's copy of what was stored.
	var counted int64
	for r, req := range f.reqs {
		for i, it := range req.items {
			if acks[r][i].dup {
				continue
			}
			loc, _ := sched.Find(it.Event.GetEventId())
			if loc.Entry.Data != string(it.Data) {
				t.Errorf("%s: cached %d bytes, want its %d stored ones", it.Event.GetEventId(), len(loc.Entry.Data), len(it.Data))
			}
			counted += cachedSize(len(it.Data))
		}
	}
	if got := w.cache.bytes.Load(); got != counted {
		t.Errorf("the cache counts %d bytes, want %d (the three registered events, not the duplicate)", got, counted)
	}
	f.answer("LANES_0", acks)
	if res := <-f.reqs[0].done; res.stored != 2 || res.err != nil || !res.at[1].Duplicate || res.at[0].Duplicate {
		t.Errorf("first caller answered %+v, want 2 stored, the second a duplicate", res)
	}
}

// A gap registers nothing of the group and leaves the mark; settle then
// answers every caller ErrWriteFailed.
func TestRegisterRefusesAGap(t *testing.T) {
	sched := scheduler.New(clock.NewManual(time.Unix(0, 0)))
	w := testWriter(sched)
	w.restored(5)
	f := testFlight(0, []*rivorav1.Event{testEvent("a1", "a"), testEvent("a2", "a")}, []*rivorav1.Event{testEvent("b1", "b")})
	if err := w.register(f, [][]storedAck{{{seq: 6}, {seq: 8}}, {{seq: 9}}}); err == nil {
		t.Fatal("a gap (6, then 8) was registered")
	}
	if got := w.registered(); got != 5 {
		t.Fatalf("registered through %d after a refused group, want 5", got)
	}
	if got := w.cache.bytes.Load(); got != 0 {
		t.Errorf("a refused group left %d bytes counted in the cache", got)
	}
	for _, id := range []string{"a1", "a2", "b1"} {
		if _, ok := sched.Find(id); ok {
			t.Errorf("%s of a refused group is scheduled", id)
		}
	}
	f.err = errors.New("refused")
	if err := w.settle(f); err == nil {
		t.Fatal("settle of a refused group succeeded")
	}
	for i, req := range f.reqs {
		if res := <-req.done; !errors.Is(res.err, ErrWriteFailed) || res.stored != 0 {
			t.Errorf("caller %d answered %+v, want ErrWriteFailed", i, res)
		}
	}
}

// A duplicate stored at the next sequence is the original's copy (a
// fenced-off owner's late write): it is registered, but its entry caches
// nothing, so that delivery loads what is stored rather than the item
// that was refused as a duplicate. A detached writer registers and caches
// nothing.
func TestRegisterCachesOnlyWhatItStored(t *testing.T) {
	sched := scheduler.New(clock.NewManual(time.Unix(0, 0)))
	w := testWriter(sched)
	w.restored(5)
	if err := w.register(testFlight(0, []*rivorav1.Event{testEvent("dup", "a")}), [][]storedAck{{{seq: 6, dup: true}}}); err != nil {
		t.Fatal(err)
	}
	if loc, ok := sched.Find("dup"); !ok || loc.Entry.Seq != 6 || loc.Entry.Data != "" {
		t.Fatalf("the duplicate at the next sequence: %+v (found %v), want seq 6 with nothing cached", loc.Entry, ok)
	}
	w.detach()
	if err := w.register(testFlight(0, []*rivorav1.Event{testEvent("late", "a")}), [][]storedAck{{{seq: 7}}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := sched.Find("late"); ok {
		t.Error("a detached writer registered an event")
	}
	if got := w.cache.bytes.Load(); got != 0 {
		t.Errorf("the cache counts %d bytes, want 0: nothing it holds was cached", got)
	}
}

// The gate opens only when no forward is in flight and none began since
// INGEST was looked at; once open it stays open.
func TestGateOpensOnlyWithNoForwardSinceObserved(t *testing.T) {
	var g gate
	if _, open, busy := g.observe(); open || busy {
		t.Fatalf("a new gate: open %v busy %v, want closed and idle", open, busy)
	}
	if !g.beginForward() {
		t.Fatal("a closed gate did not forward")
	}
	gen, _, busy := g.observe()
	if !busy {
		t.Fatal("a forward in flight is not seen")
	}
	if g.open(gen) {
		t.Fatal("the gate opened while a forward was in flight")
	}
	g.endForward()
	gen, open, busy := g.observe()
	if open || busy {
		t.Fatalf("after the forward: open %v busy %v", open, busy)
	}
	// A forward begins and ends between the look at INGEST and open: its
	// event may be in INGEST now.
	g.beginForward()
	g.endForward()
	if g.open(gen) {
		t.Fatal("the gate opened although a forward began after INGEST was checked")
	}
	gen, _, _ = g.observe()
	if !g.open(gen) {
		t.Fatal("the gate did not open with nothing forwarded since the check")
	}
	if g.beginForward() {
		t.Fatal("an open gate still forwards")
	}
	if _, open, _ := g.observe(); !open || !g.open(0) {
		t.Fatal("an open gate closed again")
	}
}

func TestEventCacheStaysWithinBudget(t *testing.T) {
	var c eventCache
	big := make([]byte, cacheBudget/2)
	kept := c.keep(big)
	if kept == "" {
		t.Fatal("an empty cache refused an event")
	}
	if c.keep(big) != "" {
		t.Fatal("the cache kept an event beyond its budget")
	}
	small := []byte("x")
	keptSmall := c.keep(small)
	if keptSmall != "x" {
		t.Fatalf("the cache kept %q of a small event within its budget, want %q", keptSmall, small)
	}
	small[0] = 'y' // the caller's bytes are not the cache's
	c.forget(scheduler.Entry{Data: kept})
	c.forget(scheduler.Entry{Data: keptSmall})
	c.forget(scheduler.Entry{}) // not cached: nothing to give back
	if got := c.bytes.Load(); got != 0 {
		t.Fatalf("%d bytes left after every event was forgotten", got)
	}
	if keptSmall != "x" {
		t.Fatalf("the cached event changed with its caller's bytes: %q", keptSmall)
	}
}

// A write that found no leader of the lane store was not stored and is
// routine while the leader moves (ErrStoreLeaderMoving); another failure
// is not.
func TestWriteFailedTellsALeaderMovingFromOtherFailures(t *testing.T) {
	w := &laneWriter{log: slog.New(slog.DiscardHandler)}
	moving := w.writeFailed(fmt.Errorf("%w: %w", jetstream.ErrNoStreamResponse, nats.ErrNoResponders))
	if !errors.Is(moving, ErrWriteFailed) || !errors.Is(moving, ErrStoreLeaderMoving) {
		t.Errorf("no responders: %v, want ErrWriteFailed and ErrStoreLeaderMoving", moving)
	}
	other := w.writeFailed(errors.New("maximum bytes exceeded"))
	if !errors.Is(other, ErrWriteFailed) || errors.Is(other, ErrStoreLeaderMoving) {
		t.Errorf("a refused write: %v, want ErrWriteFailed only", other)
	}
}
