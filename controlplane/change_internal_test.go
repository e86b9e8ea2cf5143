package controlplane

import (
	"fmt"
	"log/slog"
	"maps"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// seededControlPlane is a file-backed control plane with n destinations
// already registered (in one change, so seeding is quick).
func seededControlPlane(b testing.TB, n int) *ControlPlane {
	b.Helper()
	cell, err := auth.NewCellToken()
	if err != nil {
		b.Fatal(err)
	}
	cp, err := New(Config{StateDir: b.TempDir(), Keys: auth.NewKeys(cell), MaxDestinations: 1 << 20}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cp.store.Update(func(tx *DestinationTx) error {
		for i := range n {
			id := fmt.Sprintf("seed-%05d", i)
			tx.Put(&rivorav1.Destination{Id: id, Url: "https://example.com/" + id, Secret: "whsec_seed", Configured: &rivorav1.Limits{}, CreatedAt: timestamppb.Now(), UpdatedAt: timestamppb.Now()})
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	return cp
}

// A change costs what it changes: creating one destination costs the
// same with 0 and with 2,000 others registered (compare the two).
func BenchmarkCreateDestination(b *testing.B) {
	for _, n := range []int{0, 2000} {
		b.Run(fmt.Sprintf("existing=%d", n), func(b *testing.B) {
			cp := seededControlPlane(b, n)
			i := 0
			for b.Loop() {
				i++
				id := fmt.Sprintf("bench-%d", i)
				if _, _, err := cp.createDestination(&rivorav1.CreateDestinationRequest{Id: id, Url: "https://example.com/" + id}, systemActor); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A change copies and compares only the destinations it touches: a
// create copies none, a pause copies one, a limits reload and the
// override-expiry sweep copy none; every other destination stays the very
// object it was (issue 22: every change cloned and diffed all of them).
func TestChangeTouchesOnlyItsDestination(t *testing.T) {
	cp := seededControlPlane(t, 500)
	fs := cp.store.(*FileStore)
	stored := func() map[string]*rivorav1.Destination {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		return maps.Clone(fs.state.dests)
	}
	before, copies := stored(), fs.copies
	step := func(what string, wantCopies int, fn func() error) {
		t.Helper()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := fs.copies - copies; got != wantCopies {
			t.Errorf("%s copied %d destinations, want %d", what, got, wantCopies)
		}
		copies = fs.copies
	}
	step("create", 0, func() error {
		_, _, err := cp.createDestination(&rivorav1.CreateDestinationRequest{Id: "new", Url: "https://example.com/new"}, systemActor)
		return err
	})
	step("pause", 1, func() error {
		_, _, err := cp.pauseDestination("seed-00007", systemActor, "probe")
		return err
	})
	step("a limits reload's version", 0, func() error {
		_, err := cp.store.Update(func(*DestinationTx) error { return nil })
		return err
	})
	step("the override-expiry sweep", 0, func() error { cp.expireOverrides(); return nil })
	after := stored()
	if len(after) != 501 {
		t.Fatalf("%d destinations after one create, want 501", len(after))
	}
	for id, d := range before {
		if id == "seed-00007" {
			if after[id] == d || !after[id].GetPaused() {
				t.Errorf("the paused destination is the old object or not paused: %v", after[id])
			}
			continue
		}
		if after[id] != d {
			t.Fatalf("untouched destination %s was replaced by a copy", id)
		}
	}
}
