package edged

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/subscriptions"
	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/routing"
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
	reg.Replace(time.Now(), unsigned([]*rivorav1.Destination{{Id: "orders", Url: "https://p.example", Secret: ""}, {Id: "billing", Secret: "redacted"}}))
	if _, ok := reg.Get("orders"); !ok {
		t.Fatal("orders not in the registry")
	}
	// As the edge's feed has them (controlplane forEdge): ed25519 and
	// legacy signatures without their keys. One failed the registry's
	// checks, which stopped the edge applying every config after it.
	feed := []*rivorav1.Destination{
		{Id: "v1a", Url: "https://p.example/a", SignatureScheme: "v1a", SigningKeyFingerprint: "fp"},
		{Id: "both", Url: "https://p.example/b", SignatureScheme: "both", SigningKeyFingerprint: "fp"},
		{Id: "legacy", Url: "https://p.example/l", LegacySignature: &rivorav1.LegacySignature{Header: "X-Signature", Algorithm: "sha256", Encoding: "hex", ReplaceStandard: true, SecretFingerprint: "fp"}},
	}
	reg.Replace(time.Now(), unsigned(feed))
	for _, d := range feed {
		if _, ok := reg.Get(d.GetId()); !ok {
			t.Errorf("%s not in the registry", d.GetId())
		}
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
		e.registry.Replace(time.Now(), unsigned([]*rivorav1.Destination{
			{Id: "long", Limits: &rivorav1.Limits{Window: durationpb.New(window)}},
			{Id: "short", Limits: &rivorav1.Limits{Window: durationpb.New(time.Hour)}},
		}))
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

// A config the edge cannot apply whole (an event type whose schema does
// not compile; a subscription that does not load no longer fails it)
// still brings its tokens: a revoked token is refused from
// then on, not for as long as the edge stays stuck on that config.
func TestARevocationAppliesWhenTheRestOfTheConfigFails(t *testing.T) {
	keys := auth.NewKeys(auth.CellTokenOf("0123456789abcdef0123456789abcdef"))
	e := &Edge{cfg: Config{Keys: keys}, log: slog.New(slog.DiscardHandler), registry: destinations.NewRegistry(),
		subs: subscriptions.NewTable(), catalogue: subscriptions.NewCatalogue(), warnings: map[string]time.Duration{}}
	a, b := &rivorav1.ApiToken{Id: "tok_a", Hash: "hash-a"}, &rivorav1.ApiToken{Id: "tok_b", Hash: "hash-b"}
	if err := e.install(&rivorav1.WatchResponse{Tokens: []*rivorav1.ApiToken{a, b}}); err != nil {
		t.Fatal(err)
	}
	bad := &rivorav1.EventType{Name: "order.created", Schema: `{"type": `}
	if err := e.install(&rivorav1.WatchResponse{Tokens: []*rivorav1.ApiToken{a}, EventTypes: []*rivorav1.EventType{bad}}); err == nil {
		t.Fatal("an event type whose schema does not compile was installed")
	}
	if n := keys.Count(); n != 1 {
		t.Fatalf("%d tokens in force after a config revoking one failed to apply; want 1", n)
	}
}

// A destination the edge cannot build (a server CA that is no PEM: the
// edge's feed keeps it) is registered all the same, unusable, and the
// rest of the config applies: one destination does not stop the edge
// taking every config after it, and its events are still accepted and
// forwarded (the edge never delivers).
func TestAnUnusableDestinationDoesNotStopTheEdgesConfig(t *testing.T) {
	e := &Edge{cfg: Config{Keys: auth.NewKeys(auth.CellTokenOf("0123456789abcdef0123456789abcdef"))}, log: slog.New(slog.DiscardHandler), registry: destinations.NewRegistry(),
		subs: subscriptions.NewTable(), catalogue: subscriptions.NewCatalogue(), warnings: map[string]time.Duration{}}
	bad := &rivorav1.Destination{Id: "bad", Url: "https://p.example", ServerCa: &rivorav1.Certificate{CertificatePem: "not a certificate"}}
	good := &rivorav1.Destination{Id: "good", Url: "https://p.example/g"}
	if err := e.install(&rivorav1.WatchResponse{Version: 7, PartitionCount: 4, Destinations: []*rivorav1.Destination{bad, good}}); err != nil {
		t.Fatalf("a config with one destination the edge cannot build: %v", err)
	}
	if d, ok := e.registry.Get("bad"); !ok || d.Unusable == nil {
		t.Fatalf("bad = %+v (registered %v); want registered, unusable", d, ok)
	}
	if d, ok := e.registry.Get("good"); !ok || d.Unusable != nil {
		t.Fatalf("good = %+v (registered %v); want registered, usable", d, ok)
	}
	if v := e.applied.Load(); v != 7 {
		t.Fatalf("applied version %d, want 7", v)
	}
}

// A subscription the edge cannot load (a filter a newer control plane
// takes) is installed all the same, unusable, and the rest of the config
// applies: one subscription does not stop the edge taking every config
// after it. Its filter fails every event (it routes none of the edge's);
// the others route as before.
func TestAnUnusableSubscriptionDoesNotStopTheEdgesConfig(t *testing.T) {
	e := &Edge{cfg: Config{Keys: auth.NewKeys(auth.CellTokenOf("0123456789abcdef0123456789abcdef"))}, log: slog.New(slog.DiscardHandler), registry: destinations.NewRegistry(),
		subs: subscriptions.NewTable(), catalogue: subscriptions.NewCatalogue(), warnings: map[string]time.Duration{}}
	dest := &rivorav1.Destination{Id: "erp", Url: "https://p.example/erp"}
	bad := &rivorav1.Subscription{Id: "sub_bad", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Filter: "data >"}
	good := &rivorav1.Subscription{Id: "sub_good", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}}
	if err := e.install(&rivorav1.WatchResponse{Version: 7, PartitionCount: 4, Destinations: []*rivorav1.Destination{dest}, Subscriptions: []*rivorav1.Subscription{bad, good}}); err != nil {
		t.Fatalf("a config with one subscription the edge cannot load: %v", err)
	}
	s, ok := e.subs.Get("sub_bad")
	if !ok || s.Unusable == nil || s.UnusableHeld {
		t.Fatalf("sub_bad = %+v (installed %v); want installed, unusable for its filter", s, ok)
	}
	input := func() routing.Input { return routing.Input{Data: map[string]any{}} }
	if ok, err := s.Matches(context.Background(), "order.created", input); ok || err != nil {
		t.Fatalf("sub_bad matched = %v, %v; want no (its filter fails every event)", ok, err)
	}
	g, ok := e.subs.Get("sub_good")
	if !ok || g.Unusable != nil {
		t.Fatalf("sub_good = %+v (installed %v); want installed, usable", g, ok)
	}
	if ok, err := g.Matches(context.Background(), "order.created", input); !ok || err != nil {
		t.Fatalf("sub_good matched = %v, %v; want yes", ok, err)
	}
	if _, ok := e.registry.Get("erp"); !ok {
		t.Fatal("the destination beside the unusable subscription was not registered")
	}
	if v := e.applied.Load(); v != 7 {
		t.Fatalf("applied version %d, want 7", v)
	}
}

// Each config message is a whole snapshot: the edge warns about an
// unusable destination or subscription when it becomes unusable or its
// error changes, not again for every message that still carries it, and
// says at info when one is usable again.
func TestUnusableWarnedOnceUntilItChanges(t *testing.T) {
	var logs bytes.Buffer
	e := &Edge{cfg: Config{Keys: auth.NewKeys(auth.CellTokenOf("0123456789abcdef0123456789abcdef"))}, log: slog.New(slog.NewTextHandler(&logs, nil)), registry: destinations.NewRegistry(),
		subs: subscriptions.NewTable(), catalogue: subscriptions.NewCatalogue(), warnings: map[string]time.Duration{}}
	install := func(ca, filter string) {
		t.Helper()
		dest := &rivorav1.Destination{Id: "erp", Url: "https://p.example/erp"}
		if ca != "" {
			dest.ServerCa = &rivorav1.Certificate{CertificatePem: ca}
		}
		sub := &rivorav1.Subscription{Id: "sub_1", CustomerId: "acme", DestinationId: "erp", Types: []string{"*"}, Filter: filter}
		if err := e.install(&rivorav1.WatchResponse{Version: 1, PartitionCount: 4, Destinations: []*rivorav1.Destination{dest}, Subscriptions: []*rivorav1.Subscription{sub}}); err != nil {
			t.Fatal(err)
		}
	}
	count := func(level, what string) int {
		n := 0
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "level="+level) && strings.Contains(line, what) {
				n++
			}
		}
		return n
	}
	install("not a certificate", "data >")
	install("not a certificate", "data >")
	install("not a certificate", "data >")
	if d, s := count("WARN", "destination=erp"), count("WARN", "subscription=sub_1"); d != 1 || s != 1 {
		t.Fatalf("after three configs carrying the same unusable ones: %d destination and %d subscription warnings, want one each:\n%s", d, s, logs.String())
	}
	install("not a certificate", "data.amount >")
	if s := count("WARN", "subscription=sub_1"); s != 2 {
		t.Fatalf("after the subscription's error changed: %d warnings, want a second:\n%s", s, logs.String())
	}
	install("", "data.amount > 1")
	if d, s := count("INFO", "destination=erp"), count("INFO", "subscription=sub_1"); d != 1 || s != 1 {
		t.Fatalf("after both mended: %d destination and %d subscription info lines, want one each:\n%s", d, s, logs.String())
	}
	install("", "data.amount > 1")
	if d, s := count("WARN", "destination=erp"), count("INFO", "subscription=sub_1"); d != 1 || s != 1 {
		t.Fatalf("a usable config again logged more:\n%s", logs.String())
	}
}
