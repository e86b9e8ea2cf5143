package edge

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// The room admits a store only when what the buffer holds, or may, plus
// the store fits under the limit; a refused store reserves nothing.
func TestRoomAdmitsUpToTheLimit(t *testing.T) {
	r := &room{limit: 1000, held: 300}
	a, ok := r.reserve(500)
	if !ok {
		t.Fatal("500 bytes refused with 300 of 1000 held")
	}
	if _, ok := r.reserve(201); ok {
		t.Fatal("201 bytes admitted with 300 held and 500 reserved of 1000")
	}
	b, ok := r.reserve(200)
	if !ok {
		t.Fatal("200 bytes refused with 300 held and 500 reserved of 1000: exactly the limit fits")
	}
	a(true)
	a(true) // a second call changes nothing
	b(false)
	if got := r.used(); got != 800 {
		t.Fatalf("used %d after a store of 500 and one that wrote nothing, want 800", got)
	}
	if _, ok := r.reserve(201); ok {
		t.Fatal("201 bytes admitted with 800 of 1000 used")
	}
}

// A read bases the count on the stream's bytes; a store that returned
// while the read ran may or may not be in what it read, so it stays
// counted until the next read; one that returned before it began is in
// it, and is counted once.
func TestRoomReadKeepsWhatItMayHaveMissed(t *testing.T) {
	r := &room{limit: 1 << 20}
	before, _ := r.reserve(100)
	before(true)
	during, _ := r.reserve(40)
	if err := r.read(func() (int64, error) {
		during(true) // returns while the stream's state is read
		return 100, nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := r.used(); got != 140 {
		t.Fatalf("used %d after a read of 100 during which a store of 40 returned, want 140", got)
	}
	if err := r.read(func() (int64, error) { return 140, nil }); err != nil {
		t.Fatal(err)
	}
	if got := r.used(); got != 140 {
		t.Fatalf("used %d after the next read of 140, want 140", got)
	}
	// A failed read keeps the count as it was.
	c, _ := r.reserve(10)
	if err := r.read(func() (int64, error) { c(true); return 0, errors.New("timeout") }); err == nil {
		t.Fatal("a failed read answered no error")
	}
	if got := r.used(); got != 150 {
		t.Fatalf("used %d after a failed read, want 150", got)
	}
}

// Against a model of the stream (what it truly holds, which the cell
// drains at random), the room's count is never below the truth, so an
// admitted store never takes the stream past the limit; and after a read
// with nothing in flight it is the truth again.
func TestRoomNeverCountsLessThanTheStreamHolds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const limit = 10_000
	r := &room{limit: limit}
	var truth int64
	type flight struct {
		n      int64
		done   func(bool)
		stored bool
	}
	var inFlight []flight
	for step := range 20_000 {
		switch op := rng.IntN(5); {
		case op == 0: // a request reserves room
			n := 1 + rng.Int64N(900)
			if done, ok := r.reserve(n); ok {
				inFlight = append(inFlight, flight{n: n, done: done})
			}
		case op == 1 && len(inFlight) > 0: // a store lands in the stream
			i := rng.IntN(len(inFlight))
			if !inFlight[i].stored {
				inFlight[i].stored = true
				truth += inFlight[i].n
			}
		case op == 2 && len(inFlight) > 0: // a store returns
			i := rng.IntN(len(inFlight))
			f := inFlight[i]
			if !f.stored && rng.IntN(2) == 0 {
				f.stored, truth = true, truth+f.n
			}
			f.done(f.stored)
			inFlight = append(inFlight[:i], inFlight[i+1:]...)
		case op == 3: // the cell takes some
			truth -= rng.Int64N(truth/2 + 1)
		case op == 4: // a read, during which a store may land and return
			err := r.read(func() (int64, error) {
				seen := truth
				if len(inFlight) > 0 && rng.IntN(2) == 0 {
					f := inFlight[0]
					if !f.stored {
						f.stored, truth = true, truth+f.n
					}
					f.done(true)
					inFlight = inFlight[1:]
				}
				return seen, nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if truth > limit {
			t.Fatalf("step %d: the stream holds %d, past the limit %d", step, truth, limit)
		}
		if used := r.used(); used < truth {
			t.Fatalf("step %d: the room counts %d, less than the stream's %d", step, used, truth)
		}
	}
	for _, f := range inFlight {
		f.done(f.stored)
	}
	if err := r.read(func() (int64, error) { return truth, nil }); err != nil {
		t.Fatal(err)
	}
	if used := r.used(); used != truth {
		t.Fatalf("after a read with nothing in flight the room counts %d, the stream holds %d", used, truth)
	}
}

// The stream's own limit sits above --max-buffer; MaxBytesWithin inverts
// it.
func TestStreamMaxBytesAndItsInverse(t *testing.T) {
	for _, m := range []int64{1 << 20, 64 << 20, 65 << 20, 1 << 30, 10<<30 + 12345, 1 << 50} {
		hard := StreamMaxBytes(m)
		if hard-m < 1<<20 || hard-m < m/64 {
			t.Errorf("StreamMaxBytes(%d) = %d: headroom %d, want at least 1 MiB and a 64th", m, hard, hard-m)
		}
		if got := MaxBytesWithin(hard); got != m {
			t.Errorf("MaxBytesWithin(StreamMaxBytes(%d)) = %d", m, got)
		}
		if got := MaxBytesWithin(hard - 1); got >= m || StreamMaxBytes(got) > hard-1 {
			t.Errorf("MaxBytesWithin(%d) = %d: want the largest below %d whose stream fits", hard-1, got, m)
		}
	}
	if got := MaxBytesWithin(1 << 20); got != 0 {
		t.Errorf("MaxBytesWithin(1 MiB) = %d, want 0 (the headroom alone takes it)", got)
	}
}
