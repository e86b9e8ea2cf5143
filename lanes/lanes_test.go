package lanes_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rivora/rivora/lanes"
)

func TestEscapeKeyRoundTrip(t *testing.T) {
	for _, key := range []string{"", "user_42", "a.b", "*", ">", "~", "~41", "é", "a b\tc", "user@example.com", strings.Repeat("x", 256)} {
		tok := lanes.EscapeKey(key)
		if strings.ContainsAny(tok, ".*> \t\r\n") {
			t.Fatalf("EscapeKey(%q) = %q: not a subject token", key, tok)
		}
		back, err := lanes.UnescapeKey(tok)
		if err != nil || back != key {
			t.Fatalf("UnescapeKey(EscapeKey(%q)) = %q, %v", key, back, err)
		}
	}
	if got := lanes.EscapeKey("user_42"); got != "user_42" {
		t.Fatalf("plain keys stay readable: got %q", got)
	}
}

func TestParseSubject(t *testing.T) {
	id := lanes.ID{Destination: "dst_1", Customer: "acme", Key: "user.7@x"}
	p, got, err := lanes.ParseSubject(id.Subject(7))
	if err != nil || got != id || p != 7 {
		t.Fatalf("ParseSubject(%q) = %d, %+v, %v", id.Subject(7), p, got, err)
	}
	p, back, dead, _, err := lanes.ParseLedgerSubject(id.HeadSubject(3))
	if err != nil || back != id || dead || p != 3 {
		t.Fatalf("ParseLedgerSubject(head) = %d %+v %v %v", p, back, dead, err)
	}
	p, _, dead, seq, err := lanes.ParseLedgerSubject(lanes.DeadSubject(3, 42))
	if err != nil || !dead || seq != 42 || p != 3 {
		t.Fatalf("ParseLedgerSubject(dead) = %d %v %d %v", p, dead, seq, err)
	}
	for _, bad := range []string{"lane.1.a.b", "nope.1.a.b.c", "lane.x.a.b.c", "lane.1.a.b.~4", "lane.1.a.b.~ZZ"} {
		if _, _, err := lanes.ParseSubject(bad); err == nil {
			t.Fatalf("ParseSubject(%q) accepted a malformed subject", bad)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := lanes.ValidateID("destination_id", "dst_9f31c"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "a.b", "a b", strings.Repeat("a", 65)} {
		if err := lanes.ValidateID("destination_id", bad); err == nil {
			t.Fatalf("ValidateID accepted %q", bad)
		}
	}
	if err := lanes.ValidateLaneKey(""); err == nil {
		t.Fatal("empty lane key accepted")
	}
	if err := lanes.ValidateLaneKey("\xff"); err == nil {
		t.Fatal("invalid UTF-8 accepted")
	}
	if err := lanes.ValidateEventID("idempotency_key", "order:42-a"); err != nil {
		t.Fatal(err)
	}
	if err := lanes.ValidateEventID("idempotency_key", "a.b"); err == nil {
		t.Fatal("dot accepted in event id")
	}
}

func TestPartitionStable(t *testing.T) {
	for _, d := range []string{"a", "dst_9f31c", "x-y"} {
		p := lanes.Partition(d, 16)
		if p < 0 || p >= 16 || p != lanes.Partition(d, 16) {
			t.Fatalf("Partition(%q) = %d", d, p)
		}
	}
}

func FuzzEscapeKey(f *testing.F) {
	for _, s := range []string{"", "a", "a.b", "~", "~7E", "日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		tok := lanes.EscapeKey(key)
		if tok == "" || strings.ContainsAny(tok, ".*> \t\r\n\x00") {
			t.Fatalf("EscapeKey(%q) = %q: not a subject token", key, tok)
		}
		back, err := lanes.UnescapeKey(tok)
		if err != nil || back != key {
			t.Fatalf("round trip %q -> %q -> %q, %v", key, tok, back, err)
		}
		// Unescaping arbitrary input never panics.
		_, _ = lanes.UnescapeKey(key)
	})
}

// A lane's subject is the name its events are stored under: built faster,
// it must stay byte for byte what it was ("lane.<p>.<token>", the token
// as HeadSubject has it), or a rebuild would not find stored lanes.
func TestSubjectIsTheStoredName(t *testing.T) {
	for _, id := range []lanes.ID{
		{Destination: "orders", Customer: "acme", Key: "main"},
		{Destination: "orders", Customer: "acme", Key: ""},
		{Destination: "orders", Customer: "acme", Key: "a.b c*>é"},
		{Destination: "orders", Customer: "acme", Key: "k", Subscription: "sub_0123456789abcdef"},
	} {
		for _, p := range []int{0, 7, 1234} {
			head := id.HeadSubject(p)
			token := head[len(fmt.Sprintf("ledger.%d.head.", p)):]
			if got, want := id.Subject(p), fmt.Sprintf("lane.%d.%s", p, token); got != want {
				t.Errorf("%+v.Subject(%d) = %q, want %q", id, p, got, want)
			}
		}
	}
}

func TestPartitionsText(t *testing.T) {
	for _, c := range []struct {
		ps   []uint32
		want string
	}{
		{[]uint32{4}, "partition 4"},
		{[]uint32{0, 1, 2, 3, 5}, "partitions 0-3, 5"},
		{[]uint32{1, 3, 4, 7, 8, 9}, "partitions 1, 3-4, 7-9"},
	} {
		if got := lanes.PartitionsText(c.ps); got != c.want {
			t.Errorf("PartitionsText(%v) = %q, want %q", c.ps, got, c.want)
		}
	}
}

// LowerEventID lowers only a UUID's text with upper-case hex digits: an
// id in lower case already, or in any other form, is looked for as typed
// alone.
func TestLowerEventID(t *testing.T) {
	for _, c := range []struct {
		id, lower string
		ok        bool
	}{
		{"0190A5B4-7C1E-7DEF-8A00-00000000BEEF", "0190a5b4-7c1e-7def-8a00-00000000beef", true},
		{"0190a5b4-7c1e-7def-8a00-00000000bEEf", "0190a5b4-7c1e-7def-8a00-00000000beef", true},
		{"0190a5b4-7c1e-7def-8a00-00000000beef", "", false}, // lower case already
		{"0190A5B47C1E7DEF8A0000000000BEEF", "", false},     // not the dashed form
		{"0190A5B4-7C1E-7DEF-8A00-00000000BEEG", "", false}, // not hex
		{"0190A5B4_7C1E-7DEF-8A00-00000000BEEF", "", false}, // a dash missing
		{"ORDER-42", "", false},
		{"", "", false},
	} {
		if lower, ok := lanes.LowerEventID(c.id); lower != c.lower || ok != c.ok {
			t.Errorf("LowerEventID(%q) = %q, %v; want %q, %v", c.id, lower, ok, c.lower, c.ok)
		}
	}
}
