package cli

import (
	"strings"
	"testing"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/rig"
)

// Through a real control plane and agent: a customer token of one
// customer lists its events and dead letters and counts them without
// --customer (they are its customer's); a token of two must still name
// one.
func TestOneCustomerTokenNeedsNoCustomerFlag(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{})
	mustSucceed(t, run(t, d.URL, "", "--token", d.AdminToken, "destinations", "create", "erp", "--url", "http://127.0.0.1:9/hook", "--wait"))
	mustSucceed(t, run(t, d.URL, "", "--token", d.AdminToken, "publish", "--destination", "erp", "--customer", "acme", "--lane", "l", "--type", "order.created", "--data", `{"a":1}`))
	acme := d.Token(rivorav1.Role_ROLE_CUSTOMER, "acme")
	if out := mustSucceed(t, run(t, d.URL, "", "--token", acme, "events", "list", "--destination", "erp")).stdout; !strings.Contains(out, "acme") {
		t.Errorf("events list by acme's token without --customer:\n%s\nwant acme's event", out)
	}
	mustSucceed(t, run(t, d.URL, "", "--token", acme, "dlq", "list", "--destination", "erp"))
	mustSucceed(t, run(t, d.URL, "", "--token", acme, "dlq", "stats"))
	both := d.Token(rivorav1.Role_ROLE_CUSTOMER, "acme", "globex")
	for _, args := range [][]string{{"events", "list", "--destination", "erp"}, {"dlq", "list"}, {"dlq", "stats"}} {
		assertFailure(t, run(t, d.URL, "", append([]string{"--token", both}, args...)...), exitError, "name one with --customer")
	}
}
