package controlplane

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
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
				if _, _, err := cp.createDestination(&rivorav1.CreateDestinationRequest{Id: id, Url: "https://example.com/" + id}, systemActor, everything); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCreateDestinationFed is BenchmarkCreateDestination with one
// agent's feed sending each change (render, compare, build the response).
func BenchmarkCreateDestinationFed(b *testing.B) {
	for _, n := range []int{0, 2000} {
		b.Run(fmt.Sprintf("existing=%d", n), func(b *testing.B) {
			cp := seededControlPlane(b, n)
			f := &configFeed{partitionCount: uint32(cp.cfg.Partitions)}
			_, sent := cp.nextConfig(f, "a1")
			sent()
			i := 0
			for b.Loop() {
				i++
				id := fmt.Sprintf("bench-%d", i)
				if _, _, err := cp.createDestination(&rivorav1.CreateDestinationRequest{Id: id, Url: "https://example.com/" + id}, systemActor, everything); err != nil {
					b.Fatal(err)
				}
				if resp, sent := cp.nextConfig(f, "a1"); len(resp.GetDestinations()) != 1 {
					b.Fatalf("the feed sent %d destinations, want 1", len(resp.GetDestinations()))
				} else {
					sent()
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
		_, _, err := cp.createDestination(&rivorav1.CreateDestinationRequest{Id: "new", Url: "https://example.com/new"}, systemActor, everything)
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

// The agents' feed, after its snapshot, renders and compares only what a
// change touched: one destination for a create or a pause, none for a
// delete (it is named), and every one only when the limits file changes
// (issue 22: every change re-rendered and compared all of them, for every
// agent).
func TestFeedComparesOnlyTheChange(t *testing.T) {
	cp := seededControlPlane(t, 500)
	f := &configFeed{partitionCount: uint32(cp.cfg.Partitions)}
	next := func(what string, wantCompared int) *rivorav1.WatchResponse {
		t.Helper()
		resp, sent := cp.nextConfig(f, "a1")
		sent()
		if f.compared != wantCompared {
			t.Errorf("%s: the feed compared %d destinations, want %d", what, f.compared, wantCompared)
		}
		return resp
	}
	if resp := next("the snapshot", 500); !resp.GetSnapshot() || len(resp.GetDestinations()) != 500 {
		t.Fatalf("snapshot: %d destinations, snapshot %v", len(resp.GetDestinations()), resp.GetSnapshot())
	}
	if resp := next("no change", 0); resp != nil {
		t.Fatalf("no change sent %v", resp)
	}
	if _, _, err := cp.createDestination(&rivorav1.CreateDestinationRequest{Id: "new", Url: "https://example.com/new"}, systemActor, everything); err != nil {
		t.Fatal(err)
	}
	if resp := next("a create", 1); len(resp.GetDestinations()) != 1 || resp.GetDestinations()[0].GetId() != "new" || resp.GetDestinations()[0].GetSecret() == "" {
		t.Fatalf("after a create the feed sent %v, want the new destination with its secret", resp)
	}
	if _, _, err := cp.pauseDestination("seed-00007", systemActor, "probe"); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.store.Update(func(tx *DestinationTx) error { tx.Delete("seed-00008"); return nil }); err != nil {
		t.Fatal(err)
	}
	resp := next("a pause and a delete", 1)
	if len(resp.GetDestinations()) != 1 || !resp.GetDestinations()[0].GetPaused() || !slices.Equal(resp.GetRemovedDestinationIds(), []string{"seed-00008"}) {
		t.Fatalf("after a pause and a delete the feed sent %v", resp)
	}
	cp.limits.Store(&LimitsFile{Defaults: &rivorav1.Limits{Burst: 7}})
	if resp := next("a limits file change", 500); len(resp.GetDestinations()) != 500 || resp.GetDestinations()[0].GetLimits().GetBurst() != 7 {
		t.Fatalf("after a limits change the feed sent %d destinations, want all 500 with burst 7", len(resp.GetDestinations()))
	}
	if len(f.dests) != 500 {
		t.Fatalf("the feed holds %d destinations, want 500", len(f.dests))
	}
}

// The journal names what changed since a version while it reaches back
// that far; past journalVersions versions, or on a version that is not
// the next, a reader is told to compare everything.
func TestJournal(t *testing.T) {
	st := emptyState()
	put := func(id string) {
		st.apply(delta{version: st.version + 1, dests: map[string]*rivorav1.Destination{id: {Id: id}}})
	}
	if ids, ok := st.changedSince(0); !ok || len(ids) != 0 {
		t.Fatalf("nothing changed: %v %v", ids, ok)
	}
	put("a")
	put("b")
	st.apply(delta{version: st.version + 1, dests: map[string]*rivorav1.Destination{"a": nil}})
	if ids, ok := st.changedSince(1); !ok || !slices.Equal(ids, []string{"a", "b"}) {
		t.Fatalf("since 1: %v %v, want a (deleted) and b", ids, ok)
	}
	if _, ok := st.changedSince(st.version + 1); ok {
		t.Fatal("a version ahead of the store was answered")
	}
	for range journalVersions {
		put("c")
	}
	if _, ok := st.changedSince(1); ok {
		t.Fatalf("%d versions behind was answered from a journal of %d", st.version-1, journalVersions)
	}
	if ids, ok := st.changedSince(st.version - journalVersions); !ok || !slices.Equal(ids, []string{"c"}) {
		t.Fatalf("exactly %d behind: %v %v", journalVersions, ids, ok)
	}
	st.apply(delta{version: st.version}) // a rewrite at the same version (a migration)
	if _, ok := st.changedSince(st.version - 1); ok {
		t.Fatal("after a rewrite at the same version, an older version was answered")
	}
}

// A delete's refusal counts pending events in words: "1 pending event",
// not "1 pending events".
func TestPendingEvents(t *testing.T) {
	for n, want := range map[int64]string{1: "1 pending event", 3: "3 pending events"} {
		if got := pendingEvents(n); got != want {
			t.Errorf("pendingEvents(%d) = %q, want %q", n, got, want)
		}
	}
}
