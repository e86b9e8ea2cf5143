package controlplane_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/e2e/consultest"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// The tests that start Consul do not run in parallel: a consultest server
// also listens on Consul's default gRPC-TLS port (8503), so two cannot run
// at once.

func consulClient(t *testing.T, srv *consultest.Server) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address, cfg.Scheme = srv.HTTPAddr, "http"
	client, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func openConsulStore(t *testing.T, client *api.Client) *controlplane.ConsulStore {
	t.Helper()
	s, err := controlplane.OpenConsulStore(context.Background(), client)
	if err != nil {
		t.Fatalf("OpenConsulStore: %v", err)
	}
	return s
}

func addDest(s controlplane.Store, id string) (uint64, error) {
	return s.Update(func(tx *controlplane.DestinationTx) error {
		tx.Put(&rivorav1.Destination{Id: id, Url: "https://example.com/" + id, CustomerWeights: map[string]float64{"a": 2}})
		return nil
	})
}

func destIDs(ds []*rivorav1.Destination) string {
	var ids []string
	for _, d := range ds {
		ids = append(ids, d.GetId())
	}
	return strings.Join(ids, ",")
}

func TestConsulStoreRoundTrip(t *testing.T) {
	client := consulClient(t, consultest.Start(t))
	s := openConsulStore(t, client)
	if v, ds := s.Snapshot(); v != 0 || len(ds) != 0 {
		t.Fatalf("new store: version %d, %d destinations", v, len(ds))
	}
	// The same changes to a file store, to compare the formats.
	dir := t.TempDir()
	fs, err := controlplane.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []controlplane.Store{s, fs} {
		for _, id := range []string{"b", "a"} {
			if _, err := addDest(st, id); err != nil {
				t.Fatalf("%T: add %s: %v", st, id, err)
			}
		}
		// A refused change changes nothing, not even the version.
		if _, err := st.Update(func(tx *controlplane.DestinationTx) error {
			tx.Delete("a")
			return errors.New("no")
		}); err == nil {
			t.Fatalf("%T: Update ignored fn's error", st)
		}
	}
	if v, ds := s.Snapshot(); v != 2 || destIDs(ds) != "a,b" {
		t.Fatalf("after two changes: version %d, %s", v, destIDs(ds))
	}
	// Snapshots and Gets are copies.
	_, ds := s.Snapshot()
	ds[0].Url = "mutated"
	if got, _ := s.Get("a"); got.GetUrl() != "https://example.com/a" {
		t.Fatalf("mutating a snapshot changed the store: %v", got)
	}

	// One key per destination, holding what the file store holds for it,
	// and the meta key.
	keys, _, err := client.KV().Keys(controlplane.ConsulStatePrefix, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(keys, " "); got != controlplane.ConsulDestinationsPrefix+"a "+controlplane.ConsulDestinationsPrefix+"b "+controlplane.ConsulStateMetaKey {
		t.Fatalf("keys under %s: %s", controlplane.ConsulStatePrefix, got)
	}
	for _, id := range []string{"a", "b"} {
		pair, _, err := client.KV().Get(controlplane.ConsulDestinationsPrefix+id, nil)
		if err != nil || pair == nil {
			t.Fatalf("read destination %s: %v, %v", id, pair, err)
		}
		d := &rivorav1.Destination{}
		if err := protojson.Unmarshal(pair.Value, d); err != nil {
			t.Fatal(err)
		}
		if want, _ := fs.Get(id); !proto.Equal(d, want) {
			t.Fatalf("Consul holds %v for %s, the file store %v", d, id, want)
		}
	}

	s2 := openConsulStore(t, client)
	v, ds := s2.Snapshot()
	if v != 2 || destIDs(ds) != "a,b" || ds[1].GetCustomerWeights()["a"] != 2 {
		t.Fatalf("reopened store: version %d, %v", v, ds)
	}

	for _, key := range []string{controlplane.ConsulDestinationsPrefix + "a", controlplane.ConsulStateMetaKey} {
		if _, err := client.KV().Put(&api.KVPair{Key: key, Value: []byte("{not json")}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := controlplane.OpenConsulStore(context.Background(), client); err == nil || !strings.Contains(err.Error(), key) {
			t.Fatalf("OpenConsulStore on a corrupt %s: %v, want an error naming the key", key, err)
		}
	}
}

// Two stores on one Consul: the one that read an older state cannot
// overwrite a newer one; it reloads instead, and its retry succeeds.
func TestConsulStoreConflict(t *testing.T) {
	client := consulClient(t, consultest.Start(t))
	s1, s2 := openConsulStore(t, client), openConsulStore(t, client)
	if v, err := addDest(s1, "one"); err != nil || v != 1 {
		t.Fatalf("s1 add one: version %d, %v", v, err)
	}
	_, err := addDest(s2, "two")
	if !errors.Is(err, controlplane.ErrConflict) {
		t.Fatalf("s2 add two over s1's newer state: %v, want ErrConflict", err)
	}
	if v, ds := s2.Snapshot(); v != 1 || destIDs(ds) != "one" {
		t.Fatalf("s2 after the conflict: version %d, %s; want it reloaded (1, one)", v, destIDs(ds))
	}
	if v, ds := openConsulStore(t, client).Snapshot(); v != 1 || destIDs(ds) != "one" {
		t.Fatalf("Consul after the conflict: version %d, %s; want s1's state", v, destIDs(ds))
	}
	if v, err := addDest(s2, "two"); err != nil || v != 2 {
		t.Fatalf("s2 retry: version %d, %v", v, err)
	}
	// Now s1 is the stale one.
	if _, err := addDest(s1, "three"); !errors.Is(err, controlplane.ErrConflict) {
		t.Fatalf("s1 add three over s2's newer state: %v, want ErrConflict", err)
	}
	if v, ds := openConsulStore(t, client).Snapshot(); v != 2 || destIDs(ds) != "one,two" {
		t.Fatalf("Consul at the end: version %d, %s", v, destIDs(ds))
	}
}

// The Consul audit log answers List exactly like the file one, and two
// logs appending to one Consul lose no entry.
func TestConsulAuditLog(t *testing.T) {
	client := consulClient(t, consultest.Start(t))
	a1, a2 := controlplane.NewConsulAuditLog(client), controlplane.NewConsulAuditLog(client)
	if got, err := a1.List(0, ""); err != nil || len(got) != 0 {
		t.Fatalf("empty log: %v, %v", got, err)
	}
	fl, err := controlplane.OpenAuditLog(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	entry := func(i int) *rivorav1.AuditEntry {
		return &rivorav1.AuditEntry{At: timestamppb.Now(), Version: uint64(i), Author: "test", Action: "destination.update", DestinationId: []string{"a", "b", "a"}[i%3], Detail: fmt.Sprint("change ", i)}
	}
	// Alternating logs: each one's idea of the next sequence number is
	// taken by the other every time.
	const n = 7
	for i := range n {
		e := entry(i)
		if err := fl.Append(e); err != nil {
			t.Fatal(err)
		}
		if err := []*controlplane.ConsulAuditLog{a1, a2}[i%2].Append(e); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	keys, _, err := client.KV().Keys(controlplane.ConsulAuditPrefix, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != n || keys[0] != controlplane.ConsulAuditPrefix+"00000000000000000001" || keys[n-1] != fmt.Sprintf("%s%020d", controlplane.ConsulAuditPrefix, n) {
		t.Fatalf("audit keys %v, want %d keys numbered from 1", keys, n)
	}
	for _, c := range []struct {
		limit int
		dest  string
	}{{0, ""}, {3, ""}, {n + 5, ""}, {0, "a"}, {2, "a"}, {1, "b"}, {0, "nope"}} {
		want, err := fl.List(c.limit, c.dest)
		if err != nil {
			t.Fatal(err)
		}
		got, err := a2.List(c.limit, c.dest)
		if err != nil {
			t.Fatalf("List(%d, %q): %v", c.limit, c.dest, err)
		}
		if len(got) != len(want) {
			t.Fatalf("List(%d, %q): %d entries, the file log gives %d", c.limit, c.dest, len(got), len(want))
		}
		for i := range got {
			if !proto.Equal(got[i], want[i]) {
				t.Fatalf("List(%d, %q)[%d] = %v, the file log gives %v", c.limit, c.dest, i, got[i], want[i])
			}
		}
	}
	// The newest limit, oldest first.
	if got, _ := a1.List(2, ""); len(got) != 2 || got[0].GetVersion() != n-2 || got[1].GetVersion() != n-1 {
		t.Fatalf("List(2) = %v, want versions %d, %d", got, n-2, n-1)
	}

	// Concurrent appends from both logs.
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() { errs <- []*controlplane.ConsulAuditLog{a1, a2}[i%2].Append(entry(100 + i)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent append: %v", err)
		}
	}
	all, err := a1.List(0, "")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for _, e := range all {
		seen[e.GetVersion()] = true
	}
	if len(all) != n+20 || len(seen) != n+20 {
		t.Fatalf("after concurrent appends: %d entries (%d distinct), want %d", len(all), len(seen), n+20)
	}

	if _, err := client.KV().Put(&api.KVPair{Key: controlplane.ConsulAuditPrefix + "00000000000000000003", Value: []byte("{bad")}, nil); err != nil {
		t.Fatal(err)
	}
	// A corrupt entry is skipped (and logged), not fatal: the rest list.
	rest, err := a1.List(0, "")
	if err != nil {
		t.Fatalf("List over a corrupt entry: %v", err)
	}
	if len(rest) != n+20-1 {
		t.Fatalf("List over a corrupt entry: %d entries, want the %d others", len(rest), n+20-1)
	}
}
