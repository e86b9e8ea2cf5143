package owner

import (
	"errors"
	"testing"
)

// Ledger entries are admitted in ledger order by epoch: one of a newer
// owner fences this one off; one older than the newest seen was written
// by an owner already fenced off, and is skipped.
func TestEpochFilter(t *testing.T) {
	f := epochFilter{own: 7}
	for i, c := range []struct {
		epoch uint64
		admit bool
	}{{0, true}, {5, true}, {3, false}, {5, true}, {7, true}, {6, false}, {0, false}, {7, true}} {
		got, err := f.admit(c.epoch, uint64(i+1))
		if err != nil || got != c.admit {
			t.Fatalf("entry %d of epoch %d: admit %v, %v; want %v", i+1, c.epoch, got, err, c.admit)
		}
	}
	if f.stale != 3 {
		t.Fatalf("%d stale entries, want 3", f.stale)
	}
	if _, err := f.admit(8, 9); !errors.Is(err, ErrFenced) {
		t.Fatalf("an entry of a newer epoch: %v, want ErrFenced", err)
	}
}
