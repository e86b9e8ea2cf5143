package cli

import (
	"bytes"
	"strings"
	"testing"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// events list shows each event's subscription (fan-out debugging: which
// subscription's copy is which), "-" for one routed by destination; a list
// with no subscription's event keeps its old columns.
func TestEventsListShowsSubscription(t *testing.T) {
	var out bytes.Buffer
	e := &env{out: &out}
	err := e.printEvents(&rivorav1.ListEventsResponse{Events: []*rivorav1.EventSummary{
		{EventId: "evt-a", SubscriptionId: "sub_1", CustomerId: "acme", LaneKey: "l", State: rivorav1.EventState_EVENT_STATE_PENDING},
		{EventId: "evt-b", CustomerId: "acme", LaneKey: "l", State: rivorav1.EventState_EVENT_STATE_PENDING},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := cellOf(t, out.String(), "SUBSCRIPTION", "evt-a"); got != "sub_1" {
		t.Errorf("evt-a's SUBSCRIPTION is %q, want sub_1:\n%s", got, out.String())
	}
	if got := cellOf(t, out.String(), "SUBSCRIPTION", "evt-b"); got != "-" {
		t.Errorf("evt-b's SUBSCRIPTION is %q, want -:\n%s", got, out.String())
	}
	if got := cellOf(t, out.String(), "CUSTOMER", "evt-a"); got != "acme" {
		t.Errorf("evt-a's CUSTOMER is %q, want acme:\n%s", got, out.String())
	}
	out.Reset()
	if err := e.printEvents(&rivorav1.ListEventsResponse{Events: []*rivorav1.EventSummary{{EventId: "evt-b", CustomerId: "acme"}}}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "SUBSCRIPTION") {
		t.Errorf("no event has a subscription, yet the column shows:\n%s", out.String())
	}
}

// dlq list shows each dead letter's subscription (a deleted subscription's
// are what replay refuses), "-" for one routed by destination; from the
// ledgers, ARCHIVED is a column of its own (not "not yet\t" in LAST ERROR).
func TestDLQListShowsSubscription(t *testing.T) {
	dls := []*rivorav1.DeadLetter{
		{Event: &rivorav1.Event{EventId: "evt-a", SubscriptionId: "sub_1", CustomerId: "acme"}, LastError: "HTTP 500", Unarchived: true},
		{Event: &rivorav1.Event{EventId: "evt-b", CustomerId: "acme"}, LastError: "HTTP 502", Unarchived: true},
	}
	for _, fromLedgers := range []bool{false, true} {
		var out bytes.Buffer
		if err := deadLetterTable(&out, dls, fromLedgers); err != nil {
			t.Fatal(err)
		}
		rows := out.String()
		for _, c := range []struct{ row, header, want string }{
			{"evt-a", "SUBSCRIPTION", "sub_1"}, {"evt-b", "SUBSCRIPTION", "-"}, {"evt-a", "CUSTOMER", "acme"},
			{"evt-a", "LAST ERROR", "HTTP 500"}, {"evt-b", "LAST ERROR", "HTTP 502"},
		} {
			if got := cellOf(t, rows, c.header, c.row); got != c.want {
				t.Errorf("from the ledgers %v: %s's %s is %q, want %q:\n%s", fromLedgers, c.row, c.header, got, c.want, rows)
			}
		}
		if fromLedgers {
			if got := cellOf(t, rows, "ARCHIVED", "evt-a"); got != "not yet" {
				t.Errorf("evt-a's ARCHIVED is %q, want not yet:\n%s", got, rows)
			}
		}
	}
	var out bytes.Buffer
	if err := deadLetterTable(&out, dls[1:], false); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "SUBSCRIPTION") {
		t.Errorf("no dead letter has a subscription, yet the column shows:\n%s", out.String())
	}
}

// cellOf is the value under header in the row that contains row, in a
// table aligned by newTable: the text from the header's start up to the
// next run of two spaces.
func cellOf(t *testing.T, table, header, row string) string {
	t.Helper()
	lines := strings.Split(table, "\n")
	col := strings.Index(lines[0], header)
	if col < 0 {
		t.Fatalf("no %s column:\n%s", header, table)
	}
	for _, l := range lines[1:] {
		if strings.Contains(l, row) && len(l) > col {
			v, _, _ := strings.Cut(l[col:], "  ")
			return v
		}
	}
	t.Fatalf("no row with %q reaching the %s column:\n%s", row, header, table)
	return ""
}
