package controlplane_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/controlplane"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func putDest(t *testing.T, s controlplane.Store, id, url string) {
	t.Helper()
	if _, err := s.Update(func(tx *controlplane.DestinationTx) error {
		tx.Put(&rivorav1.Destination{Id: id, Url: url, Configured: &rivorav1.Limits{Burst: 3}})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func sameState(t *testing.T, what string, a, b controlplane.Store) {
	t.Helper()
	va, da := a.Snapshot()
	vb, db := b.Snapshot()
	if va != vb || len(da) != len(db) {
		t.Fatalf("%s: version %d with %d destinations, want version %d with %d", what, vb, len(db), va, len(da))
	}
	for i := range da {
		if !proto.Equal(da[i], db[i]) {
			t.Fatalf("%s: destination %d is %v, want %v", what, i, db[i], da[i])
		}
	}
	ta, tb := a.Tokens(), b.Tokens()
	if len(ta) != len(tb) {
		t.Fatalf("%s: %d tokens, want %d", what, len(tb), len(ta))
	}
}

// A change to one destination writes that destination, not the whole
// state: with 500 destinations stored, updating one appends a record the
// size of one destination and leaves the snapshot alone.
func TestFileStoreWritesOnlyTheChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := controlplane.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(func(tx *controlplane.DestinationTx) error {
		for i := range 500 {
			id := fmt.Sprintf("dest-%03d", i)
			tx.Put(&rivorav1.Destination{Id: id, Url: "https://example.com/" + id, Configured: &rivorav1.Limits{Burst: 3}})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	snapshot, log := filepath.Join(dir, "controlplane.json"), filepath.Join(dir, "controlplane.log")
	snapBefore, logBefore := fileSize(t, snapshot), fileSize(t, log)
	putDest(t, s, "dest-250", "https://example.com/changed")
	written := fileSize(t, log) - logBefore
	d, _ := s.Get("dest-250")
	one := int64(len(fmt.Sprint(d))) // about one destination's encoding
	if written <= 0 || written > 4*one+100 {
		t.Fatalf("updating one of 500 destinations appended %d bytes (one destination is ~%d; the snapshot is %d)", written, one, snapBefore)
	}
	if got := fileSize(t, snapshot); got != snapBefore {
		t.Fatalf("the snapshot was rewritten by a one-destination change (%d → %d bytes)", snapBefore, got)
	}
	// A delete is a record naming the id; a no-op version bump (a limits
	// reload) a record with the version alone.
	if _, err := s.Update(func(tx *controlplane.DestinationTx) error { tx.Delete("dest-001"); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(func(*controlplane.DestinationTx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	reopened, err := controlplane.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	sameState(t, "reopened", s, reopened)
	if got, _ := reopened.Get("dest-250"); got.GetUrl() != "https://example.com/changed" {
		t.Fatalf("reopened dest-250 = %v", got)
	}
	if _, ok := reopened.Get("dest-001"); ok {
		t.Fatal("a deleted destination came back on reopen")
	}
}

// A crash while appending leaves a torn last record: it is dropped (the
// change was never answered), and the store goes on from the last whole
// one. Damage before the last record is an error naming file and line.
func TestFileStoreTornAndDamagedLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := controlplane.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	putDest(t, s, "a", "https://example.com/a")
	putDest(t, s, "b", "https://example.com/b")
	log := filepath.Join(dir, "controlplane.log")
	whole, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	for _, torn := range []string{`{"version":3,"put":[{"id":"c","u`, `{"version":3,"pu` + "\n", "\x00\x00\x00"} {
		if err := os.WriteFile(log, append(append([]byte{}, whole...), torn...), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := controlplane.OpenStore(dir)
		if err != nil {
			t.Fatalf("torn tail %q: %v", torn, err)
		}
		sameState(t, fmt.Sprintf("after torn tail %q", torn), s, r)
		// The next change lands on a clean line and survives a reopen.
		putDest(t, r, "c", "https://example.com/c")
		r2, err := controlplane.OpenStore(dir)
		if err != nil {
			t.Fatalf("reopen after a change following a torn tail: %v", err)
		}
		if v, _ := r2.Snapshot(); v != 3 {
			t.Fatalf("after a torn tail and a change: version %d, want 3", v)
		}
		if _, ok := r2.Get("c"); !ok {
			t.Fatal("the change after a torn tail was lost")
		}
	}
	lines := strings.SplitAfter(string(whole), "\n")
	damaged := lines[0][:10] + "\n" + strings.Join(lines[1:], "")
	if err := os.WriteFile(log, []byte(damaged), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.OpenStore(dir); err == nil || !strings.Contains(err.Error(), "controlplane.log:1:") {
		t.Fatalf("a damaged first record: %v, want an error naming controlplane.log:1", err)
	}
	// A missing version (a record lost in the middle) is refused too.
	if err := os.WriteFile(log, []byte(lines[1]), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.OpenStore(dir); err == nil || !strings.Contains(err.Error(), "a change is missing") {
		t.Fatalf("a log missing version 1: %v, want an error saying a change is missing", err)
	}
}

// Compacting folds the log into the snapshot; a crash between writing the
// snapshot and emptying the log leaves records the snapshot holds, which
// loading skips.
func TestFileStoreCompaction(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := controlplane.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		putDest(t, s, fmt.Sprintf("d%d", i), "https://example.com/")
	}
	log := filepath.Join(dir, "controlplane.log")
	before, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	if n := fileSize(t, log); n != 0 {
		t.Fatalf("log after compaction: %d bytes", n)
	}
	r, err := controlplane.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	sameState(t, "after compaction", s, r)
	// The crash: the old log is still there beside the new snapshot.
	if err := os.WriteFile(log, before, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err = controlplane.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	sameState(t, "snapshot plus the log it holds", s, r)
	putDest(t, r, "d9", "https://example.com/")
	if v, _ := r.Snapshot(); v != 6 {
		t.Fatalf("version after one more change: %d, want 6", v)
	}
}

// The state's files hold signing secrets and header values: only their
// owner may read them, also a log made before it was created 0600.
func TestFileStoreFilesAreOwnerOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := filepath.Join(dir, "controlplane.log")
	if err := os.WriteFile(log, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := controlplane.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	putDest(t, s, "orders", "https://hooks.example.com/a")
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	putDest(t, s, "billing", "https://hooks.example.com/b")
	for _, name := range []string{"controlplane.json", "controlplane.log"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if mode := fi.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s has mode %o, want 600", name, mode)
		}
	}
}
