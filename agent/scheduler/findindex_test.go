package scheduler

import (
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/rivora/rivora/lanes"
)

func newIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7()).String()
	}
	return ids
}

// Find answers from the index: the right lane and place after appends,
// deliveries of heads, a destination taken and a partition dropped.
func TestFindFollowsEntriesThroughTheirLife(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	a, b := lid("d1", "c1", "a"), lid("d2", "c1", "b")
	idsA, idsB := newIDs(3), newIDs(2)
	var entriesA, entriesB []Entry
	for i, id := range idsA {
		entriesA = append(entriesA, Entry{Seq: uint64(i + 1), EventID: id, AcceptedAt: t0})
	}
	for i, id := range idsB {
		entriesB = append(entriesB, Entry{Seq: uint64(i + 10), EventID: id, AcceptedAt: t0})
	}
	s.AppendAll(0, []LaneAppend{{ID: a, Subject: a.Subject(0), Entries: entriesA}, {ID: b, Subject: b.Subject(0), Entries: entriesB}})
	s.AppendAll(1, []LaneAppend{{ID: lid("d3", "c1", "c"), Subject: lid("d3", "c1", "c").Subject(1), Entries: []Entry{{Seq: 1, EventID: "odd-id", AcceptedAt: t0}}}})
	expect := func(id string, lane lanes.ID, ahead int) {
		t.Helper()
		loc, ok := s.Find(id)
		if !ok || loc.Lane != lane || loc.Ahead != ahead || loc.Entry.EventID != id {
			t.Fatalf("Find(%s) = %+v, %v; want lane %v, %d ahead", id, loc, ok, lane, ahead)
		}
	}
	missing := func(id string) {
		t.Helper()
		if loc, ok := s.Find(id); ok {
			t.Fatalf("Find(%s) = %+v, want not pending", id, loc)
		}
	}
	// The index holds exactly the pending UUID ids: no leftovers.
	indexed := func(want int) {
		t.Helper()
		n := 0
		for _, x := range s.byEventID {
			n += len(x.lanes)
		}
		if n != want {
			t.Fatalf("%d ids in the index, want %d", n, want)
		}
	}
	indexed(5)
	for i, id := range idsA {
		expect(id, a, i)
	}
	expect(idsB[1], b, 1)
	expect("odd-id", lid("d3", "c1", "c"), 0)
	missing(uuid.Must(uuid.NewV7()).String())

	s.Succeeded(mustPick(t, s)) // a's head, delivered
	missing(idsA[0])
	indexed(4)
	expect(idsA[1], a, 0)
	expect(idsA[2], a, 1)

	if taken, _ := s.TakeDestination("d2"); len(taken) != 1 {
		t.Fatalf("TakeDestination took %d lanes, want 1", len(taken))
	}
	missing(idsB[0])
	missing(idsB[1])
	indexed(2)

	s.DropPartition(1)
	missing("odd-id")
	expect(idsA[2], a, 1)
	s.DropPartition(0)
	missing(idsA[1])
	indexed(0)
}

// BenchmarkFind looks events up among 1M pending (10 per lane): the
// index makes it independent of how many are pending.
func BenchmarkFind(b *testing.B) {
	s, _ := newSched()
	const nLanes, perLane = 100_000, 10
	ids := make([]string, 0, nLanes*perLane)
	seq := uint64(0)
	for l := range nLanes {
		var r Restored
		for range perLane {
			seq++
			id := uuid.Must(uuid.NewV7()).String()
			ids = append(ids, id)
			r.Add(seq, []byte(id), t0.UnixNano())
		}
		s.RestoreLane(0, lanes.ID{Destination: fmt.Sprintf("d%d", l%100), Customer: "c", Key: fmt.Sprintf("lane-%d", l)}, &r, Head{}, false)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, ok := s.Find(ids[(i*7919)%len(ids)]); !ok {
			b.Fatal("not found")
		}
	}
}

// Two pending ids that share an index key (64 of their 128 bits folded)
// are both found, in their own lanes, and the one left after the other
// is delivered still is.
func TestFindSharedIndexKey(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	first := uuid.Must(uuid.NewV7())
	second := first
	second[0] ^= 0x5a
	second[8] ^= 0x5a // the same change in both halves: the same key
	if first == second || indexKey(first) != indexKey(second) {
		t.Fatalf("ids %v and %v: want distinct ids with one key", first, second)
	}
	a, b := lid("d1", "c1", "a"), lid("d1", "c1", "b")
	s.AppendAll(0, []LaneAppend{
		{ID: a, Subject: a.Subject(0), Entries: []Entry{{Seq: 1, EventID: first.String(), AcceptedAt: t0}}},
		{ID: b, Subject: b.Subject(0), Entries: []Entry{{Seq: 2, EventID: second.String(), AcceptedAt: t0}}},
	})
	for id, lane := range map[string]lanes.ID{first.String(): a, second.String(): b} {
		if loc, ok := s.Find(id); !ok || loc.Lane != lane {
			t.Fatalf("Find(%s) = %+v, %v; want lane %v", id, loc, ok, lane)
		}
	}
	att := mustPick(t, s)
	s.Succeeded(att)
	left, leftLane := second.String(), b
	if att.Entry.EventID == second.String() {
		left, leftLane = first.String(), a
	}
	if _, ok := s.Find(att.Entry.EventID); ok {
		t.Fatalf("Find(%s) found the delivered event", att.Entry.EventID)
	}
	if loc, ok := s.Find(left); !ok || loc.Lane != leftLane {
		t.Fatalf("Find(%s) = %+v, %v; want lane %v", left, loc, ok, leftLane)
	}
}

// Each partition has its own index: two pending ids of different
// partitions that share an index key are both found, and dropping one
// partition (its index in one step) leaves the other's id found.
func TestFindSharedIndexKeyAcrossPartitions(t *testing.T) {
	s, _ := newSched()
	first := uuid.Must(uuid.NewV7())
	second := first
	second[0] ^= 0x5a
	second[8] ^= 0x5a // the same change in both halves: the same key
	a, b := lid("d1", "c1", "a"), lid("d2", "c1", "b")
	s.ExpectPending(1, 1)
	s.AppendAll(0, []LaneAppend{{ID: a, Subject: a.Subject(0), Entries: []Entry{{Seq: 1, EventID: first.String(), AcceptedAt: t0}}}})
	var r Restored
	r.AddUUID(1, second, t0.UnixNano())
	s.RestoreLane(1, b, &r, Head{}, false)
	for id, lane := range map[string]lanes.ID{first.String(): a, second.String(): b} {
		if loc, ok := s.Find(id); !ok || loc.Lane != lane {
			t.Fatalf("Find(%s) = %+v, %v; want lane %v", id, loc, ok, lane)
		}
	}
	s.DropPartition(0)
	if loc, ok := s.Find(first.String()); ok {
		t.Fatalf("Find(%s) after its partition was dropped = %+v, want not pending", first, loc)
	}
	if loc, ok := s.Find(second.String()); !ok || loc.Lane != b {
		t.Fatalf("Find(%s) after the other partition was dropped = %+v, %v; want lane %v", second, loc, ok, b)
	}
}
