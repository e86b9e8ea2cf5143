package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/poll"
)

// What a customer wrote reaches an operator's rivoractl written out, never
// obeyed: a lane key, a subscription's filter and a pause reason carrying
// ESC sequences (one retitles the terminal), BEL, CR/LF (a forged table
// row or line), a tab (a shifted column) and U+202E (which reverses what
// follows it) show as \x1b, \x07, \r, \n, \t and \u202e in events list and
// get, dlq list, subscriptions get and audit; -o json has them exactly.
func TestRivoractlEscapesWhatCustomersWrote(t *testing.T) {
	if rivoractlBuild != nil {
		t.Fatalf("rivoractl did not build: %v", rivoractlBuild)
	}
	const (
		lane        = "\x1b]0;PWN\x07lane l\r\nX-Injected: 1\tcol \u202eevil"
		laneShown   = `\x1b]0;PWN\x07lane l\r\nX-Injected: 1\tcol \u202eevil`
		filterText  = "\x1b]0;PWN\x07\r\nFORGED FILTER\t\u202eevil"
		filter      = "data.note != '''" + filterText + "'''"
		filterShown = `data.note != '''\x1b]0;PWN\x07\r\nFORGED FILTER\t\u202eevil'''`
		reason      = "r \x1b]0;X\x07\nFORGED LINE \u202eevil"
		reasonShown = `r \x1b]0;X\x07\nFORGED LINE \u202eevil`
		// A subscription's STATE has the reason on one line (a line break
		// is a space there), escaped still.
		reasonOneLine = `r \x1b]0;X\x07 FORGED LINE \u202eevil`
		customer      = "cust-esc"
		destinationID = "esc"
	)
	d := startDev(t, devOptions{})
	p := newPartner(t)
	p.SetStatus(http.StatusBadRequest) // the event's fault: it dies at its one attempt
	createDestination(t, d, destinationID, p, "", &rivorav1.Limits{MaxAttempts: 1})
	id, err := d.SDK().Publish(ctxTimeout(t, 10*time.Second), sdk.Event{Destination: destinationID, Customer: customer, Lane: lane, Type: "t.esc", Payload: []byte(`{"note":"x"}`), ContentType: "application/json"})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	waitDeadLetter(t, d.DataDir(), destinationID, id, 60*time.Second)

	sub := &rivorav1.Subscription{}
	out := rivoractl(t, d, "subscriptions", "create", "--customer", customer, "--destination", destinationID, "--types", "t.*", "--filter", filter, "-o", "json")
	if err := protojson.Unmarshal([]byte(out), sub); err != nil || sub.GetFilter() != filter {
		t.Fatalf("subscriptions create -o json: %v, filter %q, want %q:\n%s", err, sub.GetFilter(), filter, out)
	}
	rivoractl(t, d, "subscriptions", "pause", sub.GetId(), "--reason", reason)

	// The history has the dead event once its archive does (both are
	// written as it dies); events list may answer a moment before.
	var listed string
	poll.True(t, "events list shows the dead event", 30*time.Second, func() bool {
		listed = rivoractl(t, d, "events", "list", "--destination", destinationID)
		return strings.Contains(listed, id)
	})
	for _, c := range []struct {
		what, out string
		want      []string
	}{
		{"events list", listed, []string{laneShown}},
		{"events get", rivoractl(t, d, "events", "get", id), []string{laneShown}},
		{"dlq list", rivoractl(t, d, "dlq", "list", "--destination", destinationID), []string{laneShown}},
		{"subscriptions get", rivoractl(t, d, "subscriptions", "get", sub.GetId()), []string{"FILTER", filterShown, "paused: " + reasonOneLine}},
		{"audit", rivoractl(t, d, "audit", "--destination", destinationID), []string{"filter " + filterShown, reasonShown}},
	} {
		assertShownEscaped(t, c.what, c.out, c.want)
	}

	// -o json stays exact.
	list := &rivorav1.ListEventsResponse{}
	if err := protojson.Unmarshal([]byte(rivoractl(t, d, "events", "list", "--destination", destinationID, "-o", "json")), list); err != nil {
		t.Fatal(err)
	}
	if evs := list.GetEvents(); len(evs) != 1 || evs[0].GetLaneKey() != lane {
		t.Errorf("events list -o json: %v, want one event with lane key %q exactly", evs, lane)
	}
	resp := &rivorav1.GetSubscriptionResponse{}
	if err := protojson.Unmarshal([]byte(rivoractl(t, d, "subscriptions", "get", sub.GetId(), "-o", "json")), resp); err != nil {
		t.Fatal(err)
	}
	if got, ps := resp.GetSubscription(), resp.GetSubscription().GetPauses(); got.GetFilter() != filter || len(ps) != 1 || ps[0].GetReason() != reason {
		t.Errorf("subscriptions get -o json: filter %q, pauses %v; want %q and one pause with reason %q exactly", got.GetFilter(), ps, filter, reason)
	}
}

// assertShownEscaped fails unless out (what a rivoractl command printed)
// holds each of want and no character a terminal would obey: none of the
// values' ESC, BEL, CR or U+202E, and no line a value forged.
func assertShownEscaped(t *testing.T, what, out string, want []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, out)
		}
	}
	if i := strings.IndexAny(out, "\x1b\x07\r\u202e"); i >= 0 {
		r, _ := utf8.DecodeRuneInString(out[i:])
		t.Errorf("%s printed %q raw, at byte %d:\n%q", what, r, i, out)
	}
	for _, line := range strings.Split(out, "\n") {
		for _, forged := range []string{"X-Injected", "FORGED"} {
			if strings.HasPrefix(strings.TrimSpace(line), forged) {
				t.Errorf("%s has a line a value forged: %q", what, line)
			}
		}
		if strings.Contains(line, "\t") {
			t.Errorf("%s has a tab in line %q (a value's, shifting its columns)", what, line)
		}
	}
}
