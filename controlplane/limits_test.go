package controlplane_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/controlplane"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
)

// The limits file is checked against the same bounds as the API, and
// every refusal names the file, the line and the bound.
func TestParseLimitsRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, yaml string
		mentions   []string
	}{
		{"empty", "", []string{"limits.yaml:1:", "empty"}},
		{"only comments", "# nothing yet\n\n", []string{"limits.yaml:", "empty"}},
		{"null document", "~\n", []string{"limits.yaml:1:", "empty"}},
		{"two documents", "defaults: {}\n---\ndefaults: {}\n", []string{"limits.yaml:2:", "second YAML document"}},
		{"duplicate top-level key", "defaults:\n  burst: 2\ndefaults:\n  burst: 3\n", []string{"limits.yaml:3:", `"defaults" is given twice`, "line 1"}},
		{"duplicate limit", "defaults:\n  burst: 2\n  rate_per_second: 3\n  burst: 4\n", []string{"limits.yaml:4:", `"burst" is given twice`}},
		{"duplicate destination", "destinations:\n  a:\n    burst: 2\n  a:\n    burst: 3\n", []string{"limits.yaml:4:", `"a" is given twice`}},
		{"duplicate limit in a destination", "destinations:\n  a:\n    burst: 2\n    burst: 3\n", []string{"limits.yaml:4:", `"burst" is given twice`}},
		{"rate zero", "defaults:\n  rate_per_second: 0\n", []string{"limits.yaml:2:", "rate_per_second must be", "at least 0.001"}},
		{"rate under the floor", "defaults:\n  rate_per_second: 0.000999\n", []string{"limits.yaml:2:", "rate_per_second must be", "at least 0.001", "got 0.000999"}},
		{"rate 1e-300", "defaults:\n  rate_per_second: 1e-300\n", []string{"limits.yaml:2:", "at least 0.001"}},
		{"rate 5e-324", "destinations:\n  a:\n    rate_per_second: 5e-324\n", []string{"limits.yaml:3:", "at least 0.001"}},
		{"rate negative", "defaults:\n  rate_per_second: -1\n", []string{"limits.yaml:2:", "rate_per_second"}},
		{"rate NaN", "defaults:\n  rate_per_second: NaN\n", []string{"limits.yaml:2:", "rate_per_second"}},
		{"rate .nan", "defaults:\n  rate_per_second: .nan\n", []string{"limits.yaml:2:", "rate_per_second"}},
		{"rate Inf", "defaults:\n  rate_per_second: +Inf\n", []string{"limits.yaml:2:", "rate_per_second"}},
		{"rate over 1e6", "defaults:\n  rate_per_second: 1000001\n", []string{"limits.yaml:2:", "at most 1e+06"}},
		{"burst zero", "defaults:\n  burst: 0\n", []string{"limits.yaml:2:", "burst must be a whole number from 1 to 1000000"}},
		{"burst over max", "defaults:\n  burst: 1000001\n", []string{"limits.yaml:2:", "burst"}},
		{"burst overflow", "defaults:\n  burst: 99999999999\n", []string{"limits.yaml:2:", "burst"}},
		{"burst not a number", "defaults:\n  burst: lots\n", []string{"limits.yaml:2:", "burst", `"lots"`}},
		{"max attempts over max", "defaults:\n  max_attempts: 10001\n", []string{"limits.yaml:2:", "max_attempts"}},
		{"max in flight over max", "defaults:\n  max_in_flight: 10001\n", []string{"limits.yaml:2:", "max_in_flight"}},
		{"window zero", "defaults:\n  window: 0s\n", []string{"limits.yaml:2:", "window must be"}},
		{"window over 90 days", "defaults:\n  window: 2161h\n", []string{"limits.yaml:2:", "window", "90 days"}},
		{"timeout under 100ms", "defaults:\n  timeout: 99ms\n", []string{"limits.yaml:2:", "timeout must be", "from 100ms to 5m0s"}},
		{"timeout over 5m", "defaults:\n  timeout: 301s\n", []string{"limits.yaml:2:", "timeout"}},
		{"list value", "defaults:\n  burst: [1, 2]\n", []string{"limits.yaml:2:", "burst", "single value"}},
		{"unknown limit", "defaults:\n  rate: 5\n", []string{"limits.yaml:2:", `unknown limit "rate"`}},
		{"unknown key", "default:\n  burst: 5\n", []string{"limits.yaml:1:", `unknown key "default"`}},
		{"bad destination id", "destinations:\n  ../x:\n    burst: 2\n", []string{"limits.yaml:2:", "'.'"}},
		{"not a mapping", "- a\n- b\n", []string{"limits.yaml:1:", "want a mapping"}},
		{"syntax", "defaults: [\n", []string{"limits.yaml"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := controlplane.ParseLimits("limits.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("ParseLimits(%q) accepted it", tc.yaml)
			}
			for _, m := range tc.mentions {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
		})
	}
}

// The bounds are inclusive where the issue says so: the largest and the
// smallest allowed value of each field parse.
func TestParseLimitsAcceptsTheBounds(t *testing.T) {
	t.Parallel()
	f, err := controlplane.ParseLimits("limits.yaml", []byte(`
defaults:
  rate_per_second: 1e6
  burst: 1
  max_attempts: 10000
  window: 2160h
  timeout: 100ms
  max_in_flight: 10000
destinations:
  slow:
    rate_per_second: 0.001
    burst: 1000000
    timeout: 5m
  nothing:
`))
	if err != nil {
		t.Fatal(err)
	}
	d := f.Defaults
	if d.GetRatePerSecond() != 1e6 || d.GetBurst() != 1 || d.GetMaxAttempts() != 10000 || d.GetWindow().AsDuration() != 90*24*time.Hour ||
		d.GetTimeout().AsDuration() != 100*time.Millisecond || d.GetMaxInFlight() != 10000 {
		t.Fatalf("defaults = %v", d)
	}
	if s := f.Destinations["slow"]; s.GetRatePerSecond() != 0.001 || s.GetBurst() != 1_000_000 || s.GetTimeout().AsDuration() != 5*time.Minute {
		t.Fatalf("slow = %v", s)
	}
	if _, ok := f.Destinations["nothing"]; !ok {
		t.Fatal("a destination with no limits was dropped")
	}
}

// A limits file that turns bad on reload (a key twice, or emptied) is
// refused with file:line, audited, and the last good one stays in force.
func TestLimitsReloadKeepsTheLastGoodFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "limits.yaml")
	write := func(content string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("destinations:\n  orders:\n    rate_per_second: 7\n")
	d := rig.StartDev(t, t.TempDir(), rig.Options{NoAgent: true, ControlPlane: func(c *controlplane.Config) {
		c.LimitsPath, c.ReloadEvery = path, 10*time.Millisecond
	}})
	ctx := context.Background()
	if _, err := d.Admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "orders", Url: "https://example.com/hook"})); err != nil {
		t.Fatal(err)
	}
	rate := func() float64 {
		resp, err := d.Admin.GetLimits(ctx, connect.NewRequest(&rivorav1.GetLimitsRequest{DestinationId: "orders"}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetEffective().GetRatePerSecond()
	}
	if got := rate(); got != 7 {
		t.Fatalf("rate from the file = %v, want 7", got)
	}
	for i, bad := range []struct{ content, mention string }{
		{"destinations:\n  orders:\n    rate_per_second: 9\n    rate_per_second: 11\n", "limits.yaml:4:"},
		{"", "limits.yaml:1: the limits file is empty"},
	} {
		write(bad.content)
		var rejects []*rivorav1.AuditEntry
		poll.True(t, "the bad file is refused and audited", 5*time.Second, func() bool {
			resp, err := d.Admin.ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{Limit: 1000}))
			if err != nil {
				t.Fatal(err)
			}
			rejects = rejects[:0]
			for _, e := range resp.Msg.GetEntries() {
				if e.GetAction() == "limits.reject" {
					rejects = append(rejects, e)
				}
			}
			return len(rejects) == i+1
		})
		if got := rejects[i].GetDetail(); !strings.Contains(got, bad.mention) {
			t.Errorf("reject %d says %q, want it to mention %q", i, got, bad.mention)
		}
		if got := rate(); got != 7 {
			t.Fatalf("after a refused file: rate %v, want the last good file's 7", got)
		}
	}
	write("destinations:\n  orders:\n    rate_per_second: 12\n")
	poll.True(t, "a good file is taken again", 5*time.Second, func() bool { return rate() == 12 })
}

// Past --max-destinations a create is refused with ResourceExhausted
// naming the flag; a delete makes room again.
func TestMaxDestinations(t *testing.T) {
	t.Parallel()
	d := rig.StartDev(t, t.TempDir(), rig.Options{ControlPlane: func(c *controlplane.Config) { c.MaxDestinations = 2 }})
	ctx := context.Background()
	create := func(id string) error {
		_, err := d.Admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: id, Url: "https://example.com/" + id}))
		return err
	}
	for _, id := range []string{"a", "b"} {
		if err := create(id); err != nil {
			t.Fatal(err)
		}
	}
	err := create("c")
	wantCode(t, "third create", err, connect.CodeResourceExhausted, "--max-destinations", "(2)")
	if _, err := d.Admin.GetDestination(ctx, connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "c"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("the refused destination exists: %v", err)
	}
	if _, err := d.Admin.DeleteDestination(ctx, connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: "a"})); err != nil {
		t.Fatal(err)
	}
	if err := create("c"); err != nil {
		t.Fatalf("create after a delete made room: %v", err)
	}
}

// One customer owns at most MaxOwnDestinationsPerCustomer destinations:
// its self-service cannot take the cell's whole --max-destinations from
// the operators. Another customer, and an operator, still create.
func TestOwnDestinationsPerCustomerCapped(t *testing.T) {
	t.Parallel()
	d := rig.StartDev(t, t.TempDir(), rig.Options{NoAgent: true})
	ctx := context.Background()
	create := func(id, owner string) error {
		_, err := d.Admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: id, Url: "https://example.com/" + id, OwnerCustomer: owner}))
		return err
	}
	for i := range controlplane.MaxOwnDestinationsPerCustomer {
		if err := create(fmt.Sprintf("evil-%03d", i), "evil"); err != nil {
			t.Fatal(err)
		}
	}
	wantCode(t, "one more of evil's own", create("evil-more", "evil"), connect.CodeResourceExhausted, `customer "evil" owns 100 destinations`)
	if err := create("acme-own", "acme"); err != nil {
		t.Fatalf("another customer's own destination: %v", err)
	}
	if err := create("partner", ""); err != nil {
		t.Fatalf("an operator's destination: %v", err)
	}
}
