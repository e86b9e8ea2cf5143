package scheduler

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/rivora/rivora/lanes"
)

func TestCompactIDTakesExactlyCanonicalUUIDs(t *testing.T) {
	for range 100 {
		for _, id := range []string{uuid.Must(uuid.NewV7()).String(), uuid.NewString()} {
			u, ok := compactID(id)
			if !ok || u.String() != id {
				t.Fatalf("compactID(%q) = %v, %v; want its bytes", id, u, ok)
			}
		}
	}
	v7 := uuid.Must(uuid.NewV7()).String()
	for _, id := range []string{
		"", "ev-1", strings.ToUpper(v7), v7[:35], v7 + "0", uuid.Nil.String(),
		strings.Replace(v7, "-", "0", 1),       // a dash missing
		v7[:9] + "-" + v7[10:],                 // a dash where a digit goes
		"0123456g-89ab-cdef-0123-456789abcdef", // not hex
		"urn:uuid:" + v7, "{" + v7[:34] + "}",  // forms uuid.Parse takes
		strings.ReplaceAll(v7, "-", "") + "abcd", // 36 bytes, no dashes
	} {
		if u, ok := compactID(id); ok {
			t.Errorf("compactID(%q) = %v; want it kept as a string", id, u)
		}
	}
}

// A lane hands out what it was given, whichever way it keeps each id:
// UUIDs as 16 bytes, any other id as a string, and a zero AcceptedAt.
func TestEntriesRoundTripUUIDAndOtherIDs(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	id := lid("d1", "c1", "k")
	in := []Entry{
		{Seq: 1, EventID: uuid.Must(uuid.NewV7()).String(), AcceptedAt: t0.Add(time.Nanosecond)},
		{Seq: 2, EventID: "ev-2", AcceptedAt: t0.Add(2 * time.Millisecond)},
		{Seq: 3, EventID: strings.ToUpper(uuid.NewString())},
		{Seq: 4, EventID: uuid.Must(uuid.NewV7()).String(), AcceptedAt: t0, Data: "event 4, encoded"},
		{Seq: 5, EventID: "ev-5", AcceptedAt: t0, Data: "event 5, encoded"},
	}
	s.Restore(0, id, in[:2], Head{}, false)
	appendTo(s, 0, id, in[2:]...)

	for i, want := range in {
		loc, ok := s.Find(want.EventID)
		if !ok || loc.Entry != want || loc.Ahead != i {
			t.Fatalf("Find(%q) = %+v, %v; want entry %+v at %d", want.EventID, loc.Entry, ok, want, i)
		}
	}
	if _, ok := s.Find(strings.ToLower(in[2].EventID)); ok {
		t.Fatal("Find matched an id that differs in case")
	}
	if got := s.ListLanes("d1", LaneFilter{Limit: 1}).Lanes[0].HeadEventID; got != in[0].EventID {
		t.Fatalf("HeadEventID = %q, want %q", got, in[0].EventID)
	}
	evs, _ := s.PendingEvents(PendingFilter{Destination: "d1", Limit: 10})
	if len(evs) != len(in) {
		t.Fatalf("PendingEvents listed %d, want %d", len(evs), len(in))
	}
	for i, want := range in {
		a := mustPick(t, s)
		if a.Entry != want {
			t.Fatalf("attempt %d: entry %+v, want %+v", i, a.Entry, want)
		}
		if out := s.Succeeded(a); out.Drained != (i == len(in)-1) {
			t.Fatalf("attempt %d: drained %v", i, out.Drained)
		}
	}
	if n := len(s.dests["d1"].lanes); n != 0 {
		t.Fatalf("%d lanes left after the last event was delivered", n)
	}
	if _, ok := s.Find("ev-2"); ok {
		t.Fatal("a delivered event is still found")
	}
}

// An operator's skip names the head by its id, a UUID or not.
func TestTakeHeadComparesCompactIDs(t *testing.T) {
	s, _ := newSched()
	id := lid("d1", "c1", "k")
	first, second := uuid.Must(uuid.NewV7()).String(), uuid.Must(uuid.NewV7()).String()
	s.Restore(0, id, []Entry{{Seq: 1, EventID: first}, {Seq: 2, EventID: second}}, Head{}, false)
	if _, err := s.TakeHead(id, second); !errors.Is(err, ErrHeadMoved) || !strings.Contains(err.Error(), first) {
		t.Fatalf("TakeHead(second) = %v, want ErrHeadMoved naming the head %s", err, first)
	}
	a, err := s.TakeHead(id, first)
	if err != nil || a.Entry.EventID != first {
		t.Fatalf("TakeHead(first) = %+v, %v", a, err)
	}
}

// pendingHeapBytes is the heap the scheduler keeps for nLanes lanes of
// perLane events each (UUID ids, as the agent makes them), restored as a
// rebuild restores them, per event.
func pendingHeapBytes(nLanes, perLane int) (perEvent float64, s *Scheduler, baseline uint64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, _ = newSched()
	seq := uint64(0)
	for l := range nLanes {
		var r Restored
		for range perLane {
			seq++
			id := uuid.Must(uuid.NewV7())
			r.Add(seq, []byte(id.String()), t0.Add(time.Duration(seq)).UnixNano())
		}
		s.RestoreLane(0, lanes.ID{Destination: fmt.Sprintf("d%d", l%4), Customer: "c", Key: fmt.Sprintf("lane-%d", l)}, &r, Head{}, false)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(nLanes*perLane), s, before.HeapAlloc
}

// The scheduler's share of issue 26's budget of 300 B of heap per pending
// event (10 events per lane, as the scale bench has them), with room for
// the rest of the agent.
func TestPendingEventHeapIsSmall(t *testing.T) {
	const nLanes, perLane = 20_000, 10
	perEvent, s, baseline := pendingHeapBytes(nLanes, perLane)
	if perEvent > 120 {
		t.Errorf("the scheduler keeps %.0f B per pending event, want at most 120", perEvent)
	}

	// Lanes disappear when they drain: what is left of nLanes drained
	// lanes is their destinations (whose lane map and slice keep their
	// capacity).
	for _, d := range []string{"d0", "d1", "d2", "d3"} {
		s.SetLimits(d, 0, unlimited)
	}
	for range nLanes * perLane {
		s.Succeeded(mustPick(t, s))
	}
	mustNone(t, s)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	lanesLeft := 0
	for _, d := range s.dests {
		lanesLeft += len(d.lanes) + len(d.order) + len(d.customers)
	}
	if lanesLeft != 0 {
		t.Fatalf("%d lanes, slots or customers left once every lane drained", lanesLeft)
	}
	t.Logf("%.0f B per pending event; %.0f B per drained lane", perEvent, (float64(after.HeapAlloc)-float64(baseline))/nLanes)
	if perLane := (float64(after.HeapAlloc) - float64(baseline)) / nLanes; perLane > 100 {
		t.Errorf("drained lanes keep %.0f B each, want at most 100 (they should be gone)", perLane)
	}
	runtime.KeepAlive(s)
}

// RestoreLane keeps what Restore keeps, from a rebuild's compact record,
// also onto a lane that already has entries.
func TestRestoreLaneMatchesRestore(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	id := lid("d1", "c1", "k")
	v7 := uuid.Must(uuid.NewV7()).String()
	want := []Entry{
		{Seq: 7, EventID: v7, AcceptedAt: t0.Add(time.Second)},
		{Seq: 9, EventID: "ev-9", AcceptedAt: time.Unix(0, 0).UTC()},
		{Seq: 12, EventID: "ev-12", AcceptedAt: t0},
	}
	var first, second Restored
	first.Add(7, []byte(v7), t0.Add(time.Second).UnixNano())
	first.Add(9, []byte("ev-9"), 0)
	second.Add(12, []byte("ev-12"), t0.UnixNano())
	if first.Len() != 2 || first.FirstSeq() != 7 {
		t.Fatalf("Restored: %d entries from seq %d, want 2 from 7", first.Len(), first.FirstSeq())
	}
	s.RestoreLane(0, id, &first, Head{}, false)
	s.RestoreLane(0, id, &second, Head{}, false)
	if got := s.Pending("d1"); got != len(want) {
		t.Fatalf("pending %d, want %d", got, len(want))
	}
	if ls := s.ListLanes("d1", LaneFilter{Limit: 1}).Lanes[0]; !ls.HeadSince.Equal(want[0].AcceptedAt) || ls.Depth != 3 {
		t.Fatalf("lane summary %+v: want depth 3, head since its acceptance %v", ls, want[0].AcceptedAt)
	}
	for i, w := range want {
		if loc, ok := s.Find(w.EventID); !ok || loc.Entry != w || loc.Ahead != i {
			t.Fatalf("Find(%q) = %+v, %v", w.EventID, loc, ok)
		}
	}
	for _, w := range want {
		a := mustPick(t, s)
		if a.Entry != w {
			t.Fatalf("attempt entry %+v, want %+v", a.Entry, w)
		}
		s.Succeeded(a)
	}
}

// An entry holds no pointer: a cached event is kept beside it, in its
// destination, and goes when the entry goes (delivered, or taken).
func TestCachedEventsLeaveWithTheirEntries(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	id, other := lid("d1", "c1", "k"), lid("d1", "c1", "other")
	cached := func(seq uint64) Entry {
		return Entry{Seq: seq, EventID: uuid.Must(uuid.NewV7()).String(), AcceptedAt: t0, Data: fmt.Sprintf("event %d, encoded", seq)}
	}
	in := []Entry{cached(1), cached(2), ev(3)}
	appendTo(s, 0, id, in...)
	appendTo(s, 0, other, cached(4))
	if n := len(s.dests["d1"].cached); n != 3 {
		t.Fatalf("%d cached events kept, want 3", n)
	}
	a := mustPick(t, s)
	if a.Entry != in[0] || a.Entry.Data == "" {
		t.Fatalf("attempt: entry %+v, want %+v with its event", a.Entry, in[0])
	}
	s.Succeeded(a)
	if n := len(s.dests["d1"].cached); n != 2 {
		t.Fatalf("%d cached events kept after a delivery, want 2", n)
	}
	taken, _ := s.TakeDestination("d1")
	events := 0
	for _, tl := range taken {
		for _, e := range tl {
			if e.Data != "" {
				events++
				if want := fmt.Sprintf("event %d, encoded", e.Seq); e.Data != want {
					t.Errorf("TakeDestination handed seq %d with %q, want %q", e.Seq, e.Data, want)
				}
			}
		}
	}
	if events != 2 {
		t.Fatalf("TakeDestination handed %d cached events, want 2", events)
	}
	if d := s.dests["d1"]; d != nil && len(d.cached) != 0 {
		t.Fatalf("%d cached events kept after the destination's lanes were taken", len(d.cached))
	}
}

// The map of cached events gives its memory back once most of what it
// held was delivered (a map made for what is left), down to a small one
// that a shallow backlog keeps.
func TestCachedEventsMapShrinks(t *testing.T) {
	s, _ := newSched()
	s.SetLimits("d1", 0, unlimited)
	id := lid("d1", "c1", "k")
	in := make([]Entry, 4*shrinkFrom)
	for i := range in {
		in[i] = Entry{Seq: uint64(i + 1), EventID: uuid.Must(uuid.NewV7()).String(), AcceptedAt: t0, Data: "encoded"}
	}
	appendTo(s, 0, id, in...)
	d := s.dests["d1"]
	if d.cachedPeak != len(in) {
		t.Fatalf("peak %d, want %d", d.cachedPeak, len(in))
	}
	for range 3 * shrinkFrom {
		s.Succeeded(mustPick(t, s))
	}
	if len(d.cached) != shrinkFrom || d.cachedPeak != shrinkFrom {
		t.Fatalf("after three quarters were delivered: %d cached, peak %d; want %d, %d (a map made for what is left)", len(d.cached), d.cachedPeak, shrinkFrom, shrinkFrom)
	}
	for range shrinkFrom {
		s.Succeeded(mustPick(t, s))
	}
	if d := s.dests["d1"]; d != nil && (len(d.cached) != 0 || d.cachedPeak > shrinkFrom/4) {
		t.Fatalf("after the last delivery: %d cached, peak %d; want none in a map made for at most %d", len(d.cached), d.cachedPeak, shrinkFrom/4)
	}
}
