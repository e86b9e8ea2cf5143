package controlplane_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/e2e/consultest"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// registerEdges adds edges to s, each registered at a distinct second.
func registerEdges(t *testing.T, s controlplane.Store, names ...string) {
	t.Helper()
	if _, err := s.UpdateEdges(func(edges map[string]*rivorav1.Edge) error {
		for i, n := range names {
			edges[n] = &rivorav1.Edge{Name: n, RegisteredAt: timestamppb.New(time.Unix(1_700_000_000+int64(i), 0))}
		}
		return nil
	}); err != nil {
		t.Fatalf("%T: register %v: %v", s, names, err)
	}
}

func removeEdge(t *testing.T, s controlplane.Store, name string) {
	t.Helper()
	if _, err := s.UpdateEdges(func(edges map[string]*rivorav1.Edge) error {
		delete(edges, name)
		return nil
	}); err != nil {
		t.Fatalf("%T: remove %s: %v", s, name, err)
	}
}

// storedEdges is "name@unix-seconds" of each stored edge, in the store's
// order.
func storedEdges(s controlplane.Store) string {
	var out []string
	for _, e := range s.Edges() {
		out = append(out, e.GetName()+"@"+time.Unix(e.GetRegisteredAt().GetSeconds(), 0).UTC().Format("15:04:05"))
	}
	return strings.Join(out, ",")
}

// Registered edges are state: a new version each change, kept across a
// reopen from the change log and from a compacted snapshot.
func TestFileStoreKeepsEdges(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := controlplane.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	registerEdges(t, s, "oslo", "bergen", "tromso")
	removeEdge(t, s, "bergen")
	const want = "oslo@22:13:20,tromso@22:13:22"
	if v, _ := s.Snapshot(); v != 2 || storedEdges(s) != want {
		t.Fatalf("version %d, edges %s; want 2, %s", v, storedEdges(s), want)
	}
	// A refused change changes nothing.
	if _, err := s.UpdateEdges(func(edges map[string]*rivorav1.Edge) error {
		delete(edges, "oslo")
		return errors.New("no")
	}); err == nil || storedEdges(s) != want {
		t.Fatalf("a refused change: %v, edges %s", err, storedEdges(s))
	}
	if _, ok := s.Edge("bergen"); ok {
		t.Fatal("Edge finds the removed bergen")
	}
	// Copies: editing what Edges and Edge return changes nothing stored.
	s.Edges()[0].Name = "mutated"
	if e, ok := s.Edge("tromso"); !ok || e.GetRegisteredAt().GetSeconds() != 1_700_000_002 {
		t.Fatalf("Edge(tromso) = %v, %v", e, ok)
	} else {
		e.Name = "mutated"
	}

	fromLog, err := controlplane.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := storedEdges(fromLog); got != want {
		t.Fatalf("reopened from the log: %s, want %s", got, want)
	}
	if err := fromLog.Compact(); err != nil {
		t.Fatal(err)
	}
	fromSnapshot, err := controlplane.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := fromSnapshot.Snapshot(); v != 2 || storedEdges(fromSnapshot) != want {
		t.Fatalf("reopened from the snapshot: version %d, edges %s; want 2, %s", v, storedEdges(fromSnapshot), want)
	}
}

// In Consul the edges live in the meta key (no key of their own), are
// read again by a new store (a new leader), and are written with the same
// check-and-set as the rest: a store that missed another's registration
// reloads instead of overwriting it.
func TestConsulStoreKeepsEdges(t *testing.T) {
	client := consulClient(t, consultest.Start(t))
	s1, s2 := openConsulStore(t, client), openConsulStore(t, client)
	registerEdges(t, s1, "oslo", "bergen")
	removeEdge(t, s1, "bergen")

	keys, _, err := client.KV().Keys(controlplane.ConsulStatePrefix, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keys, []string{controlplane.ConsulStateMetaKey}) {
		t.Fatalf("keys under %s: %v, want the meta key alone", controlplane.ConsulStatePrefix, keys)
	}

	_, err = s2.UpdateEdges(func(edges map[string]*rivorav1.Edge) error {
		edges["lyon"] = &rivorav1.Edge{Name: "lyon"}
		return nil
	})
	if !errors.Is(err, controlplane.ErrConflict) {
		t.Fatalf("a stale store's UpdateEdges: %v, want ErrConflict", err)
	}
	if got := storedEdges(s2); got != "oslo@22:13:20" {
		t.Fatalf("the stale store reloaded edges %s, want oslo", got)
	}
	registerEdges(t, s2, "lyon")

	reopened := openConsulStore(t, client)
	if v, _ := reopened.Snapshot(); v != 3 || storedEdges(reopened) != "lyon@22:13:20,oslo@22:13:20" {
		t.Fatalf("a new store reads version %d, edges %s", v, storedEdges(reopened))
	}
}
