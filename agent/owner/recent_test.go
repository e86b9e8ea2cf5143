package owner

import (
	"strconv"
	"testing"
	"time"
)

func appendOf(ids ...string) []*appendReq {
	req := &appendReq{}
	for _, id := range ids {
		req.items = append(req.items, Item{MsgID: id})
	}
	return []*appendReq{req}
}

// An id the writer stored is held for at least a dedup window and
// forgotten after two; an id it never stored is not held, except while
// the store may hold ids from before the writer began.
func TestRecentIDs(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { return now }
	const window = 2 * time.Minute

	fresh := newRecentIDs(window, time.Time{}, clock)
	fresh.add(appendOf("a", "b"))
	if !fresh.mayHold("a") || !fresh.mayHold("b") {
		t.Fatal("an id just stored is not held")
	}
	held := 0
	for i := range 10_000 {
		if fresh.mayHold("never-" + strconv.Itoa(i)) {
			held++
		}
	}
	if held > 10 {
		t.Fatalf("%d of 10000 ids never stored are held, want about none", held)
	}
	now = now.Add(window + time.Second)
	if !fresh.mayHold("a") {
		t.Fatal("an id stored a window ago is forgotten")
	}
	fresh.add(appendOf("c"))
	now = now.Add(window + time.Second)
	if fresh.mayHold("a") || !fresh.mayHold("c") {
		t.Fatalf("after two windows: a held %v (want forgotten), c held %v (want held)", fresh.mayHold("a"), fresh.mayHold("c"))
	}

	// A store written a moment before the writer began: its dedup window
	// may hold ids the writer never saw, until a window after that write.
	lastWrite := now.Add(-time.Minute)
	reopened := newRecentIDs(window, lastWrite, clock)
	if !reopened.mayHold("unknown") {
		t.Fatal("an id the writer never saw is not held while the store's window may hold it")
	}
	now = lastWrite.Add(window)
	if reopened.mayHold("unknown") {
		t.Fatal("an id the writer never saw is held a window after the store's last write")
	}
}
