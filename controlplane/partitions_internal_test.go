package controlplane

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/rivora/rivora/e2e/consultest"
)

// A state dir keeps the partition count of its first start: a later
// start with another count is refused, naming both, and the same count
// starts again.
func TestPartitionCountIsFixedForAStateDir(t *testing.T) {
	dir := t.TempDir()
	start := func(partitions int) error {
		_, err := New(Config{StateDir: dir, Partitions: partitions, Keys: testKeys(t)}, slog.New(slog.DiscardHandler))
		return err
	}
	if err := start(16); err != nil {
		t.Fatalf("first start: %v", err)
	}
	for _, other := range []int{5, 32} {
		err := start(other)
		if err == nil || !strings.Contains(err.Error(), "made with 16 partitions, not") || !strings.Contains(err.Error(), "--partitions 16") {
			t.Fatalf("start with %d partitions on a 16-partition state dir: %v; want it refused, naming 16", other, err)
		}
	}
	if err := start(16); err != nil {
		t.Fatalf("start again with 16: %v", err)
	}

	// A state dir made before the count was recorded takes the count of
	// its next start.
	if err := os.Remove(filepath.Join(dir, partitionsFile)); err != nil {
		t.Fatal(err)
	}
	if err := start(8); err != nil {
		t.Fatalf("start of a state dir without a recorded count: %v", err)
	}
	if err := start(16); err == nil {
		t.Fatal("a start with 16 after the count 8 was recorded was not refused")
	}

	// A damaged record is an error that says what the file is.
	if err := os.WriteFile(filepath.Join(dir, partitionsFile), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := start(8); err == nil || !strings.Contains(err.Error(), "not a partition count") {
		t.Fatalf("start with a damaged count record: %v", err)
	}
}

// On Consul the first leader records the count; a control plane with
// another count is refused (it gives the leader lock back), naming the
// recorded one and where it is.
func TestPartitionCountIsFixedForACellOnConsul(t *testing.T) {
	client, err := newConsulClient(consultest.Start(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := fixPartitionsConsul(ctx, client.KV(), 16); err != nil {
		t.Fatalf("first leader: %v", err)
	}
	if err := fixPartitionsConsul(ctx, client.KV(), 16); err != nil {
		t.Fatalf("a leader with the same count: %v", err)
	}
	err = fixPartitionsConsul(ctx, client.KV(), 5)
	if err == nil || !strings.Contains(err.Error(), "made with 16 partitions, not 5") || !strings.Contains(err.Error(), ConsulPartitionsKey) {
		t.Fatalf("a leader with 5 partitions in a 16-partition cell: %v; want it refused, naming 16 and the key", err)
	}
	if _, err := client.KV().Put(&api.KVPair{Key: ConsulPartitionsKey, Value: []byte("sixteen")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := fixPartitionsConsul(ctx, client.KV(), 16); err == nil || !strings.Contains(err.Error(), "not a partition count") {
		t.Fatalf("a damaged count record: %v", err)
	}
}
