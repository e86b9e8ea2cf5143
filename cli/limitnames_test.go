package cli

import (
	"strings"
	"testing"

	"github.com/rivora/rivora/testkit/rig"
)

// A limit the control plane refuses is named by the flag the operator
// typed: create, update and limits set said "max_attempts must be …" (the
// API's and the limits file's name) for --max-attempts.
func TestARefusedLimitIsNamedByItsFlag(t *testing.T) {
	t.Parallel()
	d := rig.StartDev(t, t.TempDir(), rig.Options{NoAgent: true})
	ctl := func(args ...string) result {
		return run(t, d.URL, "", append([]string{"--token", d.AdminToken}, args...)...)
	}
	mustSucceed(t, ctl("destinations", "create", "orders", "--url", "http://127.0.0.1:9/hook"))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"destinations", "create", "other", "--url", "http://127.0.0.1:9/hook", "--max-attempts", "20000"}, "--max-attempts must be a whole number from 1 to 10000, got 20000"},
		{[]string{"destinations", "update", "orders", "--max-attempts", "20000"}, "--max-attempts must be a whole number from 1 to 10000, got 20000"},
		{[]string{"limits", "set", "orders", "--max-attempts", "20000", "--reason", "test"}, "--max-attempts must be a whole number from 1 to 10000, got 20000"},
		{[]string{"limits", "set", "orders", "--max-in-flight", "20000", "--reason", "test"}, "--max-in-flight must be a whole number from 1 to 10000"},
		{[]string{"destinations", "update", "orders", "--burst", "2000000"}, "--burst must be a whole number from 1 to 1000000"},
		{[]string{"destinations", "update", "orders", "--window", "2400h"}, "--window must be a duration more than 0 and at most"},
	} {
		r := ctl(tc.args...)
		assertFailure(t, r, exitError, tc.want)
		if strings.Contains(r.stderr, "max_") || strings.Contains(r.stderr, " burst must") || strings.Contains(r.stderr, " window must") {
			t.Errorf("%v: stderr %q names the limit as the API spells it, not by its flag", tc.args, r.stderr)
		}
	}
}
