package lanes_test

import (
	"strings"
	"testing"

	"github.com/rivora/rivora/lanes"
)

// FuzzLaneSubject checks subject safety for every lane ingest accepts:
// its lane and head subjects are exactly the expected tokens, none of
// them empty or holding a NATS wildcard, whitespace or a control byte,
// and both parse back to the same partition and lane.
func FuzzLaneSubject(f *testing.F) {
	for _, s := range [][3]string{
		{"orders", "acme", "user-42"}, {"a", "b", ""}, {"orders", "acme", "a.b.*.>"}, {"x-y", "c_1", "~41"},
		{"orders", "acme", "日本 \t\r\n\x00"}, {"orders", "acme", strings.Repeat("~", 256)}, {"o", "c", "\u2028"},
	} {
		f.Add(s[0], s[1], s[2], uint16(3))
	}
	f.Fuzz(func(t *testing.T, dest, cust, key string, p uint16) {
		if lanes.ValidateID("destination_id", dest) != nil || lanes.ValidateID("customer_id", cust) != nil || lanes.ValidateLaneKey(key) != nil {
			return // refused at ingest: never becomes a subject
		}
		id := lanes.ID{Destination: dest, Customer: cust, Key: key}
		part := int(p)
		for _, subject := range []string{id.Subject(part), id.HeadSubject(part), lanes.IngestSubject(part, dest)} {
			for _, tok := range strings.Split(subject, ".") {
				if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, "*> \t\r\n\x00\x7f") {
					t.Fatalf("lane %+v: subject %q has an unsafe token %q", id, subject, tok)
				}
			}
		}
		if n := strings.Count(id.Subject(part), "."); n != 4 {
			t.Fatalf("lane %+v: subject %q has %d dots, want 4", id, id.Subject(part), n)
		}
		gotP, back, err := lanes.ParseSubject(id.Subject(part))
		if err != nil || gotP != part || back != id {
			t.Fatalf("lane %+v, partition %d: subject %q parses to %d %+v, %v", id, part, id.Subject(part), gotP, back, err)
		}
		gotP, back, dead, _, err := lanes.ParseLedgerSubject(id.HeadSubject(part))
		if err != nil || dead || gotP != part || back != id {
			t.Fatalf("lane %+v: head subject %q parses to %d %+v dead=%v, %v", id, id.HeadSubject(part), gotP, back, dead, err)
		}
	})
}

// FuzzParseSubject feeds arbitrary subjects to the parsers: they never
// panic, and what they accept is stable (the subject built from the
// result parses to the same result).
func FuzzParseSubject(f *testing.F) {
	for _, s := range []string{"lane.0.orders.acme.user-42", "lane.3.o.c.~", "lane.x.o.c.k", "lane.1.o.c.~4", "lane.1.o.c.~zz",
		"ledger.2.head.o.c.k", "ledger.2.dead.17", "ledger.2.dead.-1", "ledger..head", "lane.", "", "lane.-1.o.c.k", "lane.1.o.c.a.b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		if p, id, err := lanes.ParseSubject(subject); err == nil {
			p2, id2, err := lanes.ParseSubject(id.Subject(p))
			if err != nil || p2 != p || id2 != id {
				t.Fatalf("ParseSubject(%q) = %d %+v, but its subject %q parses to %d %+v, %v", subject, p, id, id.Subject(p), p2, id2, err)
			}
		}
		if p, id, dead, seq, err := lanes.ParseLedgerSubject(subject); err == nil && !dead {
			p2, id2, _, _, err := lanes.ParseLedgerSubject(id.HeadSubject(p))
			if err != nil || p2 != p || id2 != id {
				t.Fatalf("ParseLedgerSubject(%q) = %d %+v, but %q parses to %d %+v, %v", subject, p, id, id.HeadSubject(p), p2, id2, err)
			}
		} else if err == nil && lanes.DeadSubject(p, seq) == "" {
			t.Fatal("empty dead subject")
		}
	})
}
