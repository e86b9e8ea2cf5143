package cli

import (
	"context"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/rig"
)

// TestPositionalsAreNeverCommands runs every verb that takes an ID with
// IDs a parser could take for something else, against a real `rivora
// dev`: "h" and "help" (urfave/cli's help command and its alias), "-",
// and IDs that look like flags. Each run either uses the ID (the server
// answers for it: exit 0 with an answer, or exit 1 with the server's
// refusal) or fails as a usage error naming what to do (exit 2); it never
// prints help and exits 0 having done nothing. An ID starting with '-'
// goes after "--".
func TestPositionalsAreNeverCommands(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{})
	ctl := func(args ...string) result {
		t.Helper()
		return run(t, d.URL, "", append([]string{"--token", d.AdminToken, "-o", "json"}, args...)...)
	}
	// Verbs taking an ID, in an order that makes each meaningful for a
	// destination ID: created first, deleted last. destination: the ID
	// names a destination, so after create the verb must succeed.
	type verb struct {
		args        []string // "ID" is replaced
		destination bool
	}
	verbs := []verb{
		{[]string{"destinations", "create", "ID", "--url", "https://example.com/hook"}, true},
		{[]string{"destinations", "get", "ID"}, true},
		{[]string{"destinations", "update", "ID", "--rate", "5"}, true},
		{[]string{"destinations", "pause", "ID", "--reason", "test"}, true},
		{[]string{"destinations", "resume", "ID"}, true},
		{[]string{"destinations", "health", "ID"}, true},
		{[]string{"limits", "get", "ID"}, true},
		{[]string{"limits", "set", "ID", "--rate", "3", "--reason", "test"}, true},
		{[]string{"limits", "clear", "ID", "--reason", "test"}, true},
		{[]string{"priority", "set", "ID", "--class", "high"}, true},
		{[]string{"lanes", "skip", "ID", "--customer", "acme", "--lane", "l1", "--reason", "test"}, false},
		{[]string{"events", "get", "ID"}, false},
		{[]string{"events", "resend", "ID", "--reason", "test"}, false},
		{[]string{"dlq", "show", "ID"}, false},
		{[]string{"tokens", "revoke", "ID"}, false},
		{[]string{"subscriptions", "get", "ID"}, false},
		{[]string{"subscriptions", "update", "ID", "--types", "*"}, false},
		{[]string{"subscriptions", "pause", "ID", "--reason", "test"}, false},
		{[]string{"subscriptions", "resume", "ID"}, false},
		{[]string{"subscriptions", "rotate-secret", "ID"}, false},
		{[]string{"subscriptions", "delete", "ID"}, false},
		{[]string{"event-types", "create", "ID"}, false},
		{[]string{"event-types", "get", "ID"}, false},
		{[]string{"event-types", "update", "ID", "--description", "test"}, false},
		{[]string{"event-types", "deprecate", "ID"}, false},
		{[]string{"destinations", "delete", "ID"}, true},
	}
	with := func(args []string, id string, dashdash bool) []string {
		var out []string
		for _, a := range args {
			if a != "ID" {
				out = append(out, a)
			}
		}
		if dashdash {
			out = append(out, "--")
		}
		return append(out, id)
	}
	check := func(t *testing.T, r result, args []string) {
		t.Helper()
		if r.code == 0 && (strings.Contains(r.stdout, "USAGE:") || strings.Contains(r.stdout, "COMMANDS:")) {
			t.Fatalf("%q printed help and exited 0:\n%s", args, r.stdout)
		}
		if r.code != 0 && (!strings.HasPrefix(r.stderr, "rivoractl: ") || strings.Count(r.stderr, "\n") != 1) {
			t.Fatalf("%q: exit %d with stderr %q, want one line \"rivoractl: …\"", args, r.code, r.stderr)
		}
	}
	exists := func(id string) bool {
		_, err := d.Admin.GetDestination(context.Background(), connect.NewRequest(&rivorav1.GetDestinationRequest{Id: id}))
		return err == nil
	}

	// IDs that are plain positionals: each is used.
	for _, id := range []string{"h", "help", "-"} {
		for _, v := range verbs {
			args := with(v.args, id, false)
			r := ctl(args...)
			check(t, r, args)
			switch {
			case v.destination && r.code != 0:
				t.Errorf("%q: exit %d (%s), want the destination %q used", args, r.code, strings.TrimSpace(r.stderr), id)
			case !v.destination && r.code != 0 && r.code != exitError:
				t.Errorf("%q: exit %d (%s), want the server's answer for %q (exit 0 or 1), not a usage error", args, r.code, strings.TrimSpace(r.stderr), id)
			}
			if slices.Equal(v.args[:2], []string{"destinations", "create"}) && !exists(id) {
				t.Errorf("%q exited %d but destination %q does not exist", args, r.code, id)
			}
		}
		if exists(id) {
			t.Errorf("destination %q still exists after `destinations delete %s`", id, id)
		}
	}

	// IDs that look like flags: a usage error saying to put them after
	// "--", and nothing created; after "--" they are used.
	for _, id := range []string{"--x", "-x", "--url", "-o"} {
		for _, v := range verbs {
			args := with(v.args, id, false)
			r := ctl(args...)
			check(t, r, args)
			if r.code != exitUsage {
				t.Errorf("%q: exit %d (%s), want a usage error (2)", args, r.code, strings.TrimSpace(r.stderr))
			}
		}
		if exists(id) {
			t.Errorf("a destination %q was created from a flag-like argument", id)
		}
	}
	for _, id := range []string{"--x", "-x"} {
		for _, v := range verbs {
			args := with(v.args, id, true)
			r := ctl(args...)
			check(t, r, args)
			if v.destination && r.code != 0 {
				t.Errorf("%q: exit %d (%s), want the destination %q used", args, r.code, strings.TrimSpace(r.stderr), id)
			}
		}
	}

	// Verbs that take no positional refuse one ("h" included); so do
	// commands given none of their subcommands.
	for _, args := range [][]string{
		{"destinations", "list", "h"}, {"events", "list", "h"}, {"lanes", "list", "h", "--destination", "x"},
		{"limits", "diff", "h"}, {"audit", "h"}, {"agents", "list", "h"}, {"dlq", "list", "h"}, {"dlq", "stats", "help"},
		{"replay", "h", "--destination", "x"}, {"publish", "h"}, {"tokens", "create", "h", "--name", "x", "--role", "admin"},
		{"tokens", "list", "help"}, {"destinations", "health", "a", "h"},
		{"subscriptions", "list", "h"}, {"subscriptions", "create", "h", "--customer", "c", "--destination", "d", "--types", "*"},
		{"event-types", "list", "help"}, {"subscriptions"}, {"event-types"},
		{"destinations"}, {"limits"}, {},
	} {
		r := ctl(args...)
		check(t, r, args)
		if r.code != exitUsage {
			t.Errorf("%q: exit %d (%s), want a usage error (2)", args, r.code, strings.TrimSpace(r.stderr))
		}
	}
	// Help is still there when asked for, on a leaf and on a parent.
	for _, args := range [][]string{{"destinations", "create", "--help"}, {"destinations", "help"}, {"help"}, {"destinations", "h", "create"}} {
		r := ctl(args...)
		if r.code != 0 || !strings.Contains(r.stdout, "USAGE:") {
			t.Errorf("%q: exit %d, stdout %q: want help", args, r.code, r.stdout)
		}
	}
}
