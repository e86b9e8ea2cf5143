package controlplane

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rivora/rivora/e2e/consultest"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func stateIndexes(t *testing.T, client *api.Client) map[string]uint64 {
	t.Helper()
	pairs, _, err := client.KV().List(ConsulStatePrefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, p := range pairs {
		out[p.Key] = p.ModifyIndex
	}
	return out
}

func sameIndexes(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, i := range a {
		if b[k] != i {
			return false
		}
	}
	return true
}

// setDests is a change of destinations first..last-1 (created or given a
// new URL).
func setDests(first, last int, url string) func(*DestinationTx) error {
	return func(tx *DestinationTx) error {
		for i := first; i < last; i++ {
			id := fmt.Sprintf("d%03d", i)
			tx.Put(&rivorav1.Destination{Id: id, Url: url})
		}
		return nil
	}
}

func fencedStore(t *testing.T, client *api.Client) (*ConsulStore, string) {
	t.Helper()
	session, _, err := client.Session().CreateNoChecks(&api.SessionEntry{TTL: "10s", Behavior: api.SessionBehaviorRelease}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := newConsulStore(client)
	s.fence(ConsulLeaderKey, session)
	return s, session
}

// A deposed leader's write, of one destination or of more than one
// transaction holds, writes nothing once another leader holds the lock.
func TestConsulStoreFenceRefusesAStaleLeader(t *testing.T) {
	client, err := newConsulClient(consultest.Start(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	old, oldSession := fencedStore(t, client)
	if ok, _, err := client.KV().Acquire(&api.KVPair{Key: ConsulLeaderKey, Session: oldSession}, nil); !ok || err != nil {
		t.Fatalf("acquire: %v, %v", ok, err)
	}
	if err := old.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Update(setDests(0, 100, "https://example.com/old")); err != nil {
		t.Fatalf("the leader's write: %v", err)
	}
	// The lock moves to another control plane, which writes.
	if _, _, err := client.KV().Release(&api.KVPair{Key: ConsulLeaderKey, Session: oldSession}, nil); err != nil {
		t.Fatal(err)
	}
	leader, session := fencedStore(t, client)
	if ok, _, err := client.KV().Acquire(&api.KVPair{Key: ConsulLeaderKey, Session: session}, nil); !ok || err != nil {
		t.Fatalf("acquire by the new leader: %v, %v", ok, err)
	}
	if err := leader.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Update(setDests(50, 60, "https://example.com/new")); err != nil {
		t.Fatalf("the new leader's write: %v", err)
	}
	before := stateIndexes(t, client)
	for _, c := range []struct {
		what string
		fn   func(*DestinationTx) error
	}{
		{"one destination", setDests(5, 6, "https://example.com/stale")},
		{"90 destinations", setDests(0, 90, "https://example.com/stale")},
		{"90 deletes", func(tx *DestinationTx) error {
			for i := range 90 {
				tx.Delete(fmt.Sprintf("d%03d", i))
			}
			return nil
		}},
	} {
		if _, err := old.Update(c.fn); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("the stale leader's write of %s: %v, want ErrNotLeader", c.what, err)
		}
		if after := stateIndexes(t, client); !sameIndexes(before, after) {
			t.Fatalf("the stale leader's write of %s changed Consul", c.what)
		}
	}
	v, ds := openConsulStoreT(t, client).Snapshot()
	if v != 2 || len(ds) != 100 || ds[55].GetUrl() != "https://example.com/new" || ds[5].GetUrl() != "https://example.com/old" {
		t.Fatalf("state after the stale writes: version %d, %d destinations", v, len(ds))
	}
}

func openConsulStoreT(t *testing.T, client *api.Client) *ConsulStore {
	t.Helper()
	s, err := OpenConsulStore(context.Background(), client)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A leader that crashed while writing a large change leaves a whole
// state: the old one if it crashed before the commit (what it staged is
// ignored, then deleted), the new one after it (and the change is
// finished by the next write, or the next leader).
func TestConsulStoreStagedChangeSurvivesACrash(t *testing.T) {
	client, err := newConsulClient(consultest.Start(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	s := openConsulStoreT(t, client)
	if _, err := s.Update(setDests(0, 10, "https://example.com/a")); err != nil {
		t.Fatal(err)
	}
	put := func(key string, value []byte) {
		t.Helper()
		if _, err := client.KV().Put(&api.KVPair{Key: key, Value: value}, nil); err != nil {
			t.Fatal(err)
		}
	}
	destJSON := func(id, url string) []byte {
		raw, err := protojson.Marshal(&rivorav1.Destination{Id: id, Url: url})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}

	// Crashed before the commit: staged keys of version 2, and of an
	// older attempt.
	put(pendingKey(2, "d001"), destJSON("d001", "https://example.com/lost"))
	put(pendingKey(2, "d002"), nil)
	put(pendingKey(1, "zzz"), destJSON("zzz", "https://example.com/lost"))
	s = openConsulStoreT(t, client)
	if v, ds := s.Snapshot(); v != 1 || len(ds) != 10 || ds[1].GetUrl() != "https://example.com/a" {
		t.Fatalf("after a crash before the commit: version %d, %v", v, ds)
	}
	if _, err := s.Update(setDests(3, 4, "https://example.com/b")); err != nil {
		t.Fatal(err)
	}
	if keys, _, _ := client.KV().Keys(consulPendingPrefix, "", nil); len(keys) != 0 {
		t.Fatalf("staged keys left after the next write: %v", keys)
	}

	// Crashed after the commit: the meta key names version 3 as pending.
	put(pendingKey(3, "d001"), destJSON("d001", "https://example.com/c"))
	put(pendingKey(3, "d002"), nil)
	put(pendingKey(3, "new"), destJSON("new", "https://example.com/c"))
	put(pendingKey(2, "d004"), destJSON("d004", "https://example.com/lost"))
	meta, err := encodeMeta(state{version: 3}, 3)
	if err != nil {
		t.Fatal(err)
	}
	put(ConsulStateMetaKey, meta)
	want := func(s *ConsulStore, version uint64) {
		t.Helper()
		v, ds := s.Snapshot()
		got := map[string]string{}
		for _, d := range ds {
			got[d.GetId()] = d.GetUrl()
		}
		if v != version || len(ds) != 10 || got["d001"] != "https://example.com/c" || got["new"] != "https://example.com/c" || got["d003"] != "https://example.com/b" || got["d004"] != "https://example.com/a" {
			t.Fatalf("version %d (want %d), %v", v, version, got)
		}
		if _, ok := got["d002"]; ok {
			t.Fatalf("d002 deleted by the committed change is back: %v", got)
		}
	}
	want(openConsulStoreT(t, client), 3) // a reader overlays the staged change

	// The next leader finishes the change as it starts.
	session, _, err := client.Session().CreateNoChecks(&api.SessionEntry{TTL: "10s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := client.KV().Acquire(&api.KVPair{Key: ConsulLeaderKey, Session: session}, nil); !ok || err != nil {
		t.Fatalf("acquire: %v, %v", ok, err)
	}
	leader := newConsulStore(client)
	leader.fence(ConsulLeaderKey, session)
	if err := leader.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if keys, _, _ := client.KV().Keys(consulPendingPrefix, "", nil); len(keys) != 0 {
		t.Fatalf("staged keys left after the new leader started: %v", keys)
	}
	if pair, _, _ := client.KV().Get(destKey("d002"), nil); pair != nil {
		t.Fatalf("d002 still has its key")
	}
	want(leader, 3)
	want(openConsulStoreT(t, client), 3)
}

// The leader migrates the single-value state as it starts.
func TestConsulStoreLeaderMigratesAtStart(t *testing.T) {
	client, err := newConsulClient(consultest.Start(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	st := emptyState()
	st.version = 7
	st.dests["a"] = &rivorav1.Destination{Id: "a", Url: "https://example.com/a"}
	legacy, err := encodeState(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.KV().Put(&api.KVPair{Key: ConsulLegacyStateKey, Value: legacy}, nil); err != nil {
		t.Fatal(err)
	}
	s, session := fencedStore(t, client)
	if err := s.Reload(context.Background()); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("migration without the lock: %v, want ErrNotLeader", err)
	}
	if ok, _, err := client.KV().Acquire(&api.KVPair{Key: ConsulLeaderKey, Session: session}, nil); !ok || err != nil {
		t.Fatalf("acquire: %v, %v", ok, err)
	}
	if err := s.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if pair, _, _ := client.KV().Get(ConsulLegacyStateKey, nil); pair == nil || string(pair.Value) != ConsulLegacyTombstone {
		t.Fatalf("the single value after the migration: %v, want the tombstone", pair)
	}
	// The single-value layout's reader (a control plane not yet upgraded)
	// refuses the tombstone rather than taking it for an empty state.
	if _, err := decodeState([]byte(ConsulLegacyTombstone)); err == nil {
		t.Fatal("the tombstone parses as a state")
	}
	if v, ds := openConsulStoreT(t, client).Snapshot(); v != 7 || len(ds) != 1 || ds[0].GetUrl() != "https://example.com/a" {
		t.Fatalf("migrated: version %d, %v", v, ds)
	}
}

// A change larger than a Consul transaction carries in bytes is split by
// bytes too; one destination larger than that is refused, naming it.
func TestConsulStoreLargeValues(t *testing.T) {
	client, err := newConsulClient(consultest.Start(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	s := openConsulStoreT(t, client)
	big := "https://example.com/" + strings.Repeat("x", 100<<10)
	if _, err := s.Update(setDests(0, 8, big)); err != nil {
		t.Fatalf("8 destinations of 100 KiB: %v", err)
	}
	if v, ds := openConsulStoreT(t, client).Snapshot(); v != 1 || len(ds) != 8 || ds[7].GetUrl() != big {
		t.Fatalf("reopened: version %d, %d destinations", v, len(ds))
	}
	huge := "https://example.com/" + strings.Repeat("x", consulMaxValueBytes)
	if _, err := s.Update(setDests(3, 4, huge)); err == nil || !strings.Contains(err.Error(), `destination "d003"`) {
		t.Fatalf("a destination over the limit: %v, want an error naming it", err)
	}
	if v, _ := s.Snapshot(); v != 1 {
		t.Fatalf("the refused change changed the version to %d", v)
	}
}
