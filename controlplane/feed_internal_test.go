package controlplane

import (
	"slices"
	"testing"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// A Watch stream sends the snapshot once, then only what changed since
// the last response that went out.
func TestConfigFeedDelta(t *testing.T) {
	f := &configFeed{partitionCount: 4}
	a := &rivorav1.Destination{Id: "a", Url: "http://a.example/"}
	b := &rivorav1.Destination{Id: "b", Url: "http://b.example/"}
	ids := func(ds []*rivorav1.Destination) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.GetId())
		}
		return out
	}

	resp, current := f.delta(1, []*rivorav1.Destination{a, b}, nil, []uint32{0, 1})
	if resp == nil || !resp.GetSnapshot() || !slices.Equal(ids(resp.GetDestinations()), []string{"a", "b"}) || resp.GetPartitionCount() != 4 {
		t.Fatalf("first response = %v, want the snapshot of a and b", resp)
	}
	if again, _ := f.delta(1, []*rivorav1.Destination{a, b}, nil, []uint32{0, 1}); again == nil || !again.GetSnapshot() {
		t.Fatalf("before the snapshot went out the next response is still the snapshot, got %v", again)
	}
	f.sent(current, nil, []uint32{0, 1})
	if resp, _ := f.delta(1, []*rivorav1.Destination{a, b}, nil, []uint32{0, 1}); resp != nil {
		t.Fatalf("nothing changed, yet a response: %v", resp)
	}

	b2 := &rivorav1.Destination{Id: "b", Url: "http://b2.example/"}
	resp, current = f.delta(2, []*rivorav1.Destination{b2}, nil, []uint32{0, 1})
	if resp.GetSnapshot() || !slices.Equal(ids(resp.GetDestinations()), []string{"b"}) || !slices.Equal(resp.GetRemovedDestinationIds(), []string{"a"}) {
		t.Fatalf("delta = %v, want b changed and a removed", resp)
	}
	f.sent(current, nil, []uint32{0, 1})

	resp, current = f.delta(2, []*rivorav1.Destination{b2}, nil, []uint32{2})
	if resp == nil || len(resp.GetDestinations()) != 0 || !slices.Equal(resp.GetPartitions(), []uint32{2}) {
		t.Fatalf("partitions moved: %v, want a delta with partitions [2] only", resp)
	}
	f.sent(current, nil, []uint32{2})
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

	resp, current := f.delta(1, nil, []*rivorav1.ApiToken{t1}, nil)
	if !resp.GetSnapshot() || !resp.GetTokensChanged() || len(resp.GetTokens()) != 1 || resp.GetTokens()[0].GetHash() != "h1" {
		t.Fatalf("snapshot = %v, want token tok_1 with its hash", resp)
	}
	f.sent(current, []*rivorav1.ApiToken{t1}, nil)
	if resp, _ := f.delta(1, nil, []*rivorav1.ApiToken{t1}, nil); resp != nil {
		t.Fatalf("tokens unchanged, yet a response: %v", resp)
	}
	resp, current = f.delta(2, nil, []*rivorav1.ApiToken{t1, t2}, nil)
	if resp == nil || !resp.GetTokensChanged() || len(resp.GetTokens()) != 2 {
		t.Fatalf("a token added: %v, want both tokens, tokens_changed", resp)
	}
	f.sent(current, []*rivorav1.ApiToken{t1, t2}, nil)
	resp, _ = f.delta(3, nil, nil, nil)
	if resp == nil || !resp.GetTokensChanged() || len(resp.GetTokens()) != 0 {
		t.Fatalf("every token revoked: %v, want tokens_changed with no token", resp)
	}
}
