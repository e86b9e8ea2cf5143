package controlplane_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/e2e/consultest"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// modifyIndexes maps every key under the state prefix to its ModifyIndex.
func modifyIndexes(t *testing.T, client *api.Client) map[string]uint64 {
	t.Helper()
	pairs, _, err := client.KV().List(controlplane.ConsulStatePrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]uint64, len(pairs))
	for _, p := range pairs {
		out[p.Key] = p.ModifyIndex
	}
	return out
}

// changedKeys lists the keys whose index differs between before and
// after, or that only one of them has.
func changedKeys(before, after map[string]uint64) []string {
	var out []string
	for k, i := range after {
		if before[k] != i {
			out = append(out, k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			out = append(out, k+" (deleted)")
		}
	}
	return out
}

func destID(i int) string { return fmt.Sprintf("d%03d", i) }

// A change of one destination among 500 writes that destination's key
// and the meta key, and no other; a token change only the meta key. A
// change of hundreds of destinations (past Consul's 64 operations a
// transaction) works too.
func TestConsulStoreWritesOnlyTheChange(t *testing.T) {
	client := consulClient(t, consultest.Start(t))
	s := openConsulStore(t, client)
	const n = 500
	if v, err := s.Update(func(tx *controlplane.DestinationTx) error {
		for i := range n {
			tx.Put(&rivorav1.Destination{Id: destID(i), Url: "https://example.com/" + destID(i)})
		}
		return nil
	}); err != nil || v != 1 {
		t.Fatalf("create %d destinations: version %d, %v", n, v, err)
	}
	before := modifyIndexes(t, client)
	if len(before) != n+1 {
		t.Fatalf("%d keys under %s after creating %d destinations, want %d (no staged change left)", len(before), controlplane.ConsulStatePrefix, n, n+1)
	}

	check := func(what string, fn func(tx *controlplane.DestinationTx) error, want ...string) {
		t.Helper()
		if _, err := s.Update(fn); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		after := modifyIndexes(t, client)
		got := changedKeys(before, after)
		if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
			t.Fatalf("%s changed keys %v, want %v", what, got, want)
		}
		before = after
	}
	meta, key := controlplane.ConsulStateMetaKey, func(id string) string { return controlplane.ConsulDestinationsPrefix + id }
	check("an update of one destination", func(tx *controlplane.DestinationTx) error {
		if d, ok := tx.Get("d250"); ok {
			d.Url = "https://example.com/new"
		}
		return nil
	}, key("d250"), meta)
	check("a create", func(tx *controlplane.DestinationTx) error {
		tx.Put(&rivorav1.Destination{Id: "new/one", Url: "https://example.com/x"})
		return nil
	}, key("new%2Fone"), meta)
	check("a delete", func(tx *controlplane.DestinationTx) error {
		tx.Delete("d007")
		return nil
	}, key("d007")+" (deleted)", meta)
	if _, err := s.UpdateTokens(func(tokens map[string]*rivorav1.ApiToken) error {
		tokens["t1"] = &rivorav1.ApiToken{Id: "t1", Name: "ci", CreatedAt: timestamppb.Now()}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	after := modifyIndexes(t, client)
	if got := changedKeys(before, after); len(got) != 1 || got[0] != meta {
		t.Fatalf("a token change changed keys %v, want only %s", got, meta)
	}
	before = after

	// 200 updates and 100 deletes in one change.
	var want []string
	for i := 100; i < 400; i++ {
		if i < 300 {
			want = append(want, key(destID(i)))
		} else {
			want = append(want, key(destID(i))+" (deleted)")
		}
	}
	check("300 changes at once", func(tx *controlplane.DestinationTx) error {
		for i := 100; i < 400; i++ {
			if i < 300 {
				if d, ok := tx.Get(destID(i)); ok {
					d.Url = "https://example.com/batch"
				}
			} else {
				tx.Delete(destID(i))
			}
		}
		return nil
	}, append(want, meta)...)

	// What another store reads is what this one holds.
	v, ds := s.Snapshot()
	v2, ds2 := openConsulStore(t, client).Snapshot()
	if v != 6 || v2 != v || len(ds2) != n-100 || len(ds2) != len(ds) {
		t.Fatalf("reopened: version %d, %d destinations; the writer has version %d, %d", v2, len(ds2), v, len(ds))
	}
	for i := range ds {
		if a, b := protojson.Format(ds[i]), protojson.Format(ds2[i]); a != b {
			t.Fatalf("reopened destination %d: %s, the writer has %s", i, b, a)
		}
	}
	if d, ok := s.Get("d150"); !ok || d.GetUrl() != "https://example.com/batch" {
		t.Fatalf("d150 after the batch: %v", d)
	}
	if tokens := s.Tokens(); len(tokens) != 1 || tokens[0].GetName() != "ci" {
		t.Fatalf("tokens: %v", tokens)
	}
}

// A state kept by an older Rivora in one value is read, and the first
// write rewrites it into one key per destination, deleting the old key.
func TestConsulStoreMigratesTheSingleValueState(t *testing.T) {
	client := consulClient(t, consultest.Start(t))
	// The single value is FileStore's snapshot format.
	dir := t.TempDir()
	fs, err := controlplane.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	const n = 150 // more than one transaction holds
	if _, err := fs.Update(func(tx *controlplane.DestinationTx) error {
		for i := range n {
			tx.Put(&rivorav1.Destination{Id: destID(i), Url: "https://example.com/" + destID(i)})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.UpdateTokens(func(tokens map[string]*rivorav1.ApiToken) error {
		tokens["t1"] = &rivorav1.ApiToken{Id: "t1", Name: "ci", CreatedAt: timestamppb.Now()}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := fs.Compact(); err != nil {
		t.Fatal(err)
	}
	legacy, err := os.ReadFile(filepath.Join(dir, "controlplane.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.KV().Put(&api.KVPair{Key: controlplane.ConsulLegacyStateKey, Value: legacy}, nil); err != nil {
		t.Fatal(err)
	}

	s := openConsulStore(t, client)
	if v, ds := s.Snapshot(); v != 2 || len(ds) != n || len(s.Tokens()) != 1 {
		t.Fatalf("read from the single value: version %d, %d destinations, %d tokens", v, len(ds), len(s.Tokens()))
	}
	if v, err := addDest(s, "after"); err != nil || v != 3 {
		t.Fatalf("first write: version %d, %v", v, err)
	}
	if pair, _, err := client.KV().Get(controlplane.ConsulLegacyStateKey, nil); err != nil || pair == nil || string(pair.Value) != controlplane.ConsulLegacyTombstone {
		t.Fatalf("the single value after the migration: %v, %v; want the tombstone", pair, err)
	}
	if keys := modifyIndexes(t, client); len(keys) != n+2 {
		t.Fatalf("%d keys after the migration, want %d destinations and the meta key", len(keys), n+1)
	}
	v, ds := openConsulStore(t, client).Snapshot()
	if v != 3 || len(ds) != n+1 || ds[0].GetUrl() != "https://example.com/after" || ds[1].GetId() != destID(0) {
		t.Fatalf("reopened after the migration: version %d, %d destinations", v, len(ds))
	}

	// A store that read the single value while another migrated it
	// conflicts, and then reads the new layout.
	if _, err := client.KV().Put(&api.KVPair{Key: controlplane.ConsulLegacyStateKey, Value: legacy}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := client.KV().DeleteTree(controlplane.ConsulStatePrefix, nil); err != nil {
		t.Fatal(err)
	}
	s1, s2 := openConsulStore(t, client), openConsulStore(t, client)
	if _, err := addDest(s1, "one"); err != nil {
		t.Fatal(err)
	}
	if _, err := addDest(s2, "two"); err == nil || !strings.Contains(err.Error(), controlplane.ErrConflict.Error()) {
		t.Fatalf("second migration: %v, want ErrConflict", err)
	}
	if v, ds := s2.Snapshot(); v != 3 || len(ds) != n+1 {
		t.Fatalf("after the conflict: version %d, %d destinations", v, len(ds))
	}
}
