package cli

import (
	"strings"
	"testing"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// A forced delete deletes the destination's subscriptions too, and the
// dead letters they routed cannot be replayed nor resent then: delete
// --force names them before it deletes, and says so after (it said only
// "archived 3 pending events as dead letters", and --help that they "can
// be replayed").
func TestForcedDeleteNamesTheSubscriptionsItDeletes(t *testing.T) {
	f, url := startFake(t)
	mustSucceed(t, run(t, url, "", "destinations", "create", "orders", "--url", "https://example.com/hooks"))
	mustSucceed(t, run(t, url, "", "destinations", "create", "billing", "--url", "https://example.com/hooks"))
	f.subs.mu.Lock()
	for _, s := range []*rivorav1.Subscription{
		{Id: "sub_a", CustomerId: "acme", DestinationId: "orders"},
		{Id: "sub_b", CustomerId: "globex", DestinationId: "orders"},
		{Id: "sub_c", CustomerId: "acme", DestinationId: "billing"},
	} {
		f.subs.subs[s.GetId()] = s
		f.subs.order = append(f.subs.order, s.GetId())
	}
	f.subs.mu.Unlock()
	f.mu.Lock()
	f.pending["orders"] = 3
	f.mu.Unlock()

	r := mustSucceed(t, run(t, url, "", "destinations", "delete", "orders", "--force"))
	for _, want := range []string{"deletes the subscriptions of orders with it: sub_a, sub_b.", "`rivoractl replay` and `events resend` refuse", "--skip-deleted-subscriptions"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("delete --force stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "sub_c") {
		t.Errorf("delete --force names another destination's subscription:\n%s", r.stderr)
	}
	for _, want := range []string{"Deleted destination orders and its subscriptions sub_a, sub_b;", "archived 3 pending events", "cannot be replayed nor resent"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("delete --force stdout lacks %q:\n%s", want, r.stdout)
		}
	}

	// Without subscriptions, nothing about them.
	f.subs.mu.Lock()
	delete(f.subs.subs, "sub_c")
	f.subs.mu.Unlock()
	r = mustSucceed(t, run(t, url, "", "destinations", "delete", "billing", "--force"))
	if r.stderr != "" || strings.Contains(r.stdout, "subscription") {
		t.Errorf("delete --force of a destination with no subscription printed:\n%s\n%s", r.stdout, r.stderr)
	}

	help := mustSucceed(t, run(t, "", "", "destinations", "delete", "--help")).stdout
	if strings.Contains(help, "from\nwhere they can be replayed") || !strings.Contains(help, "cannot") || !strings.Contains(help, "--skip-deleted-subscriptions") {
		t.Errorf("delete --help does not say a deleted subscription's dead letters cannot be replayed:\n%s", help)
	}
}
