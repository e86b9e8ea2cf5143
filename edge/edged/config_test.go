package edged

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rivora/rivora/agent/destinations"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Deltas fold into the snapshot they follow — destinations and
// subscriptions by id, tokens and event types whole when they changed —
// and the whole config survives a round trip through its file.
func TestConfigFoldAndKeep(t *testing.T) {
	store := newConfigStore(filepath.Join(t.TempDir(), ConfigFile))
	if whole, err := store.load(); err != nil || whole != nil {
		t.Fatalf("load with no file: %v, %v; want nothing", whole, err)
	}
	snapshot := &rivorav1.WatchResponse{
		Version: 1, Snapshot: true, PartitionCount: 8, Partitions: []uint32{1, 2},
		Destinations:  []*rivorav1.Destination{{Id: "b"}, {Id: "a"}},
		Subscriptions: []*rivorav1.Subscription{{Id: "s1", DestinationId: "a"}},
		Tokens:        []*rivorav1.ApiToken{{Id: "tok_1", Hash: "h1"}},
		EventTypes:    []*rivorav1.EventType{{Name: "order.created"}},
	}
	whole := store.fold(snapshot)
	if err := store.keep(whole); err != nil {
		t.Fatal(err)
	}
	if whole.GetPartitions() != nil || !whole.GetSnapshot() {
		t.Fatalf("folded snapshot %v: want a snapshot without partitions", whole)
	}
	delta := &rivorav1.WatchResponse{
		Version:                2,
		Destinations:           []*rivorav1.Destination{{Id: "c"}, {Id: "a", Url: "https://new.example"}},
		RemovedDestinationIds:  []string{"b"},
		RemovedSubscriptionIds: []string{"s1"},
		Tokens:                 nil, TokensChanged: true, // every token revoked
	}
	whole = store.fold(delta)
	if err := store.keep(whole); err != nil {
		t.Fatal(err)
	}
	want := &rivorav1.WatchResponse{
		Version: 2, Snapshot: true, PartitionCount: 8,
		Destinations: []*rivorav1.Destination{{Id: "a", Url: "https://new.example"}, {Id: "c"}},
		EventTypes:   []*rivorav1.EventType{{Name: "order.created"}},
	}
	if !proto.Equal(whole, want) {
		t.Fatalf("folded config\n%v\nwant\n%v", whole, want)
	}
	loaded, err := newConfigStore(store.path).load()
	if err != nil || !proto.Equal(loaded, want) {
		t.Fatalf("loaded %v, %v; want %v", loaded, err, want)
	}
	if info, err := os.Stat(store.path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("config file %v, %v: want mode 0600 (it holds token hashes)", info, err)
	}
	if err := os.WriteFile(store.path, []byte("not a config"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newConfigStore(store.path).load(); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Fatalf("load of a corrupt file: %v, want an error saying so", err)
	}
}

// The edge's config has no signing secrets: its destinations still make
// a registry (ingest checks destinations in it).
func TestRedactedDestinationsInstall(t *testing.T) {
	reg := destinations.NewRegistry()
	if _, err := reg.Replace(unsigned([]*rivorav1.Destination{{Id: "orders", Url: "https://p.example", Secret: ""}, {Id: "billing", Secret: "redacted"}})); err != nil {
		t.Fatalf("redacted destinations: %v", err)
	}
	if _, ok := reg.Get("orders"); !ok {
		t.Fatal("orders not in the registry")
	}
}

// A destination's window longer than --buffer-max-age is warned about
// once per destination and window.
func TestWindowWarning(t *testing.T) {
	var logs bytes.Buffer
	e := &Edge{cfg: Config{BufferMaxAge: 24 * time.Hour}, registry: destinations.NewRegistry(), warnings: map[string]time.Duration{},
		log: slog.New(slog.NewTextHandler(&logs, nil))}
	install := func(window time.Duration) {
		t.Helper()
		if _, err := e.registry.Replace(unsigned([]*rivorav1.Destination{
			{Id: "long", Limits: &rivorav1.Limits{Window: durationpb.New(window)}},
			{Id: "short", Limits: &rivorav1.Limits{Window: durationpb.New(time.Hour)}},
		})); err != nil {
			t.Fatal(err)
		}
		e.warnWindows()
	}
	install(72 * time.Hour)
	install(72 * time.Hour)
	if n := strings.Count(logs.String(), "destination=long"); n != 1 || strings.Contains(logs.String(), "destination=short") {
		t.Fatalf("warnings:\n%s\nwant one, for destination long", logs.String())
	}
	install(96 * time.Hour)
	if n := strings.Count(logs.String(), "destination=long"); n != 2 {
		t.Fatalf("warnings after the window changed:\n%s\nwant a second one", logs.String())
	}
}
