package controlplane

import (
	"slices"
	"testing"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// step sends u through f as the feed does: the response, then recorded
// as sent.
func step(f *configFeed, u feedUpdate) *rivorav1.WatchResponse {
	resp := f.response(u)
	f.sent(u, nil, resp)
	return resp
}

func idsOf[M identified](ms []M) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.GetId())
	}
	return out
}

// A Watch stream sends the snapshot once, then only what changed since
// the last response that went out.
func TestConfigFeedDelta(t *testing.T) {
	f := &configFeed{partitionCount: 4}
	a := &rivorav1.Destination{Id: "a", Url: "http://a.example/"}
	b := &rivorav1.Destination{Id: "b", Url: "http://b.example/"}

	first := feedUpdate{version: 1, whole: true, dests: []*rivorav1.Destination{a, b}, partitions: []uint32{0, 1}}
	resp := f.response(first)
	if resp == nil || !resp.GetSnapshot() || !slices.Equal(idsOf(resp.GetDestinations()), []string{"a", "b"}) || resp.GetPartitionCount() != 4 {
		t.Fatalf("first response = %v, want the snapshot of a and b", resp)
	}
	if again := f.response(first); again == nil || !again.GetSnapshot() {
		t.Fatalf("before the snapshot went out the next response is still the snapshot, got %v", again)
	}
	f.sent(first, nil, resp)
	if resp := f.response(first); resp != nil {
		t.Fatalf("nothing changed, yet a response: %v", resp)
	}

	b2 := &rivorav1.Destination{Id: "b", Url: "http://b2.example/"}
	resp = step(f, feedUpdate{version: 2, whole: true, dests: []*rivorav1.Destination{b2}, partitions: []uint32{0, 1}})
	if resp.GetSnapshot() || !slices.Equal(idsOf(resp.GetDestinations()), []string{"b"}) || !slices.Equal(resp.GetRemovedDestinationIds(), []string{"a"}) {
		t.Fatalf("delta = %v, want b changed and a removed", resp)
	}
	resp = step(f, feedUpdate{version: 2, whole: true, dests: []*rivorav1.Destination{b2}, partitions: []uint32{2}})
	if resp == nil || len(resp.GetDestinations()) != 0 || !slices.Equal(resp.GetPartitions(), []uint32{2}) {
		t.Fatalf("partitions moved: %v, want a delta with partitions [2] only", resp)
	}
	if k := f.keepalive(3); k.GetVersion() != 3 || !slices.Equal(k.GetPartitions(), []uint32{2}) || len(k.GetDestinations()) != 0 || k.GetSnapshot() {
		t.Fatalf("keepalive = %v", k)
	}
}

// The API tokens go whole on the snapshot and whenever they change, with
// tokens_changed; otherwise not at all.
func TestConfigFeedTokens(t *testing.T) {
	f := &configFeed{partitionCount: 4}
	t1 := &rivorav1.ApiToken{Id: "tok_1", Name: "one", Role: rivorav1.Role_ROLE_ADMIN, Hash: "h1"}
	t2 := &rivorav1.ApiToken{Id: "tok_2", Name: "two", Role: rivorav1.Role_ROLE_VIEWER, Hash: "h2"}

	resp := step(f, feedUpdate{version: 1, whole: true, tokens: []*rivorav1.ApiToken{t1}})
	if !resp.GetSnapshot() || !resp.GetTokensChanged() || len(resp.GetTokens()) != 1 || resp.GetTokens()[0].GetHash() != "h1" {
		t.Fatalf("snapshot = %v, want token tok_1 with its hash", resp)
	}
	if resp := step(f, feedUpdate{version: 1, whole: true, tokens: []*rivorav1.ApiToken{t1}}); resp != nil {
		t.Fatalf("tokens unchanged, yet a response: %v", resp)
	}
	resp = step(f, feedUpdate{version: 2, tokens: []*rivorav1.ApiToken{t1, t2}})
	if resp == nil || !resp.GetTokensChanged() || len(resp.GetTokens()) != 2 {
		t.Fatalf("a token added: %v, want both tokens, tokens_changed", resp)
	}
	resp = step(f, feedUpdate{version: 3})
	if resp == nil || !resp.GetTokensChanged() || len(resp.GetTokens()) != 0 {
		t.Fatalf("every token revoked: %v, want tokens_changed with no token", resp)
	}
}

// Subscriptions follow destinations' rules (all on the snapshot, then the
// changed ones and the removed ids); the catalogue goes whole, with
// strict_event_types, on the snapshot and whenever it changes.
func TestConfigFeedSubscriptionsAndCatalogue(t *testing.T) {
	f := &configFeed{partitionCount: 4, strict: true}
	s1 := &rivorav1.Subscription{Id: "sub_1", CustomerId: "c1", DestinationId: "d1", Types: []string{"order.*"}, Secret: "whsec_x"}
	s2 := &rivorav1.Subscription{Id: "sub_2", CustomerId: "c1", DestinationId: "d1", Types: []string{"*"}}
	order := &rivorav1.EventType{Name: "order.created"}

	resp := step(f, feedUpdate{version: 1, whole: true, subs: []*rivorav1.Subscription{s1, s2}, types: []*rivorav1.EventType{order}})
	if !resp.GetSnapshot() || !slices.Equal(idsOf(resp.GetSubscriptions()), []string{"sub_1", "sub_2"}) || resp.GetSubscriptions()[0].GetSecret() != "whsec_x" {
		t.Fatalf("snapshot = %v, want both subscriptions, with their secrets", resp)
	}
	if !resp.GetEventTypesChanged() || len(resp.GetEventTypes()) != 1 || !resp.GetStrictEventTypes() {
		t.Fatalf("snapshot = %v, want the catalogue and strict_event_types", resp)
	}
	s1p := &rivorav1.Subscription{Id: "sub_1", CustomerId: "c1", DestinationId: "d1", Types: []string{"order.*"}, Secret: "whsec_x", Paused: true}
	resp = step(f, feedUpdate{version: 2, subs: []*rivorav1.Subscription{s1p}, deletedSubs: []string{"sub_2", "sub_never_sent"}, types: []*rivorav1.EventType{order}})
	if resp.GetSnapshot() || !slices.Equal(idsOf(resp.GetSubscriptions()), []string{"sub_1"}) || !resp.GetSubscriptions()[0].GetPaused() ||
		!slices.Equal(resp.GetRemovedSubscriptionIds(), []string{"sub_2"}) || resp.GetEventTypesChanged() {
		t.Fatalf("delta = %v, want sub_1 paused, sub_2 removed, the catalogue unchanged", resp)
	}
	invoice := &rivorav1.EventType{Name: "invoice.paid"}
	resp = step(f, feedUpdate{version: 3, types: []*rivorav1.EventType{invoice, order}})
	if resp == nil || !resp.GetEventTypesChanged() || len(resp.GetEventTypes()) != 2 || len(resp.GetSubscriptions()) != 0 || !resp.GetStrictEventTypes() {
		t.Fatalf("a type added: %v, want the whole catalogue with event_types_changed and strict", resp)
	}
	resp = step(f, feedUpdate{version: 4, whole: true, types: []*rivorav1.EventType{invoice, order}})
	if !slices.Equal(resp.GetRemovedSubscriptionIds(), []string{"sub_1"}) {
		t.Fatalf("a whole update without sub_1: %v, want it removed", resp)
	}
}
