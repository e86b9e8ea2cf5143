package cli

import (
	"encoding/json"
	"strings"
	"testing"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// A forced delete while an event is in flight says what it left to the
// attempt, in text and with -o json: it said "no pending events were
// archived" (and -o json {"version": …} alone) while the events queued
// behind the one in flight became dead letters once its attempt ended.
func TestForcedDeleteSaysWhatItLeftToAttemptsInFlight(t *testing.T) {
	f, url := startFake(t)
	f.subs.mu.Lock()
	for _, id := range []string{"sub_a", "sub_b"} {
		f.subs.subs[id] = &rivorav1.Subscription{Id: id, CustomerId: "acme", DestinationId: "orders"}
		f.subs.order = append(f.subs.order, id)
		f.subs.pending[id] = 3
	}
	f.subs.left = map[string][2]int64{"sub_a": {1, 2}, "sub_b": {1, 2}}
	f.subs.mu.Unlock()

	r := mustSucceed(t, run(t, url, "", "subscriptions", "delete", "sub_a", "--force"))
	if want := "Deleted subscription sub_a; no pending events were archived yet; 1 event was in flight: its attempt goes on (the event becomes a dead letter too if it fails), and the 2 events queued behind it are archived as dead letters once it ends.\n"; r.stdout != want {
		t.Fatalf("subscriptions delete --force printed\n%q\nwant\n%q", r.stdout, want)
	}
	r = mustSucceed(t, run(t, url, "", "subscriptions", "delete", "sub_b", "--force", "-o", "json"))
	wantJSON(t, r.stdout, map[string]string{"archived": "0", "inFlight": "1", "archivedLater": "2", "version": "16"})

	mustSucceed(t, run(t, url, "", "destinations", "create", "orders", "--url", "https://example.com/hooks"))
	mustSucceed(t, run(t, url, "", "destinations", "create", "billing", "--url", "https://example.com/hooks"))
	f.mu.Lock()
	f.pending["orders"] = 5
	f.left = map[string][2]int64{"orders": {2, 1}}
	f.mu.Unlock()
	r = mustSucceed(t, run(t, url, "", "destinations", "delete", "orders", "--force"))
	if want := "Deleted destination orders; archived 2 pending events as dead letters (`rivoractl dlq list` shows them once written to the archive, within seconds); 2 events were in flight: their attempts go on (each event becomes a dead letter too if its attempt fails), and the 1 event queued behind them is archived as a dead letter once they end.\n"; r.stdout != want {
		t.Fatalf("destinations delete --force printed\n%q\nwant\n%q", r.stdout, want)
	}
	// Nothing pending: the counts are there, 0.
	r = mustSucceed(t, run(t, url, "", "destinations", "delete", "billing", "-o", "json"))
	wantJSON(t, r.stdout, map[string]string{"archived": "0", "inFlight": "0", "archivedLater": "0"})
}

// wantJSON checks that out, a JSON object, has these fields.
func wantJSON(t *testing.T, out string, want map[string]string) {
	t.Helper()
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("-o json field %s = %v, want %q:\n%s", k, got[k], v, strings.TrimSpace(out))
		}
	}
}
