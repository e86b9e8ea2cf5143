package cli

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/rig"
)

// fakeConfigStatus answers GetConfigStatus with status.
type fakeConfigStatus struct {
	rivorav1connect.UnimplementedAdminServiceHandler
	status *rivorav1.GetConfigStatusResponse
}

func (f *fakeConfigStatus) GetConfigStatus(context.Context, *connect.Request[rivorav1.GetConfigStatusRequest]) (*connect.Response[rivorav1.GetConfigStatusResponse], error) {
	return connect.NewResponse(f.status), nil
}

func startFakeConfigStatus(t *testing.T, status *rivorav1.GetConfigStatusResponse) string {
	t.Helper()
	_, h := rivorav1connect.NewAdminServiceHandler(&fakeConfigStatus{status: status})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// A customer's token is answered whether each agent is connected and
// which of its own changes it applied, without names: agents list says that much in words,
// not as a table of nameless rows.
func TestAgentsListWithACustomersToken(t *testing.T) {
	url := startFakeConfigStatus(t, &rivorav1.GetConfigStatusResponse{Version: 12, Agents: []*rivorav1.AgentStatus{
		{Connected: true, AppliedVersion: 12}, {Connected: true, AppliedVersion: 11}, {AppliedVersion: 12},
	}})
	out := mustSucceed(t, run(t, url, "", "agents", "list")).stdout
	if !strings.Contains(out, "Agents connected: 2 of 3; applied this token's latest change (config version 12): 1.") || !strings.Contains(out, "shown to operators") || strings.Contains(out, "NAME") {
		t.Fatalf("agents list with a customer's token printed:\n%s", out)
	}
	// A token that made no change is told no version (the control plane
	// answers 0: the cell's version is not the customer's to see).
	none := startFakeConfigStatus(t, &rivorav1.GetConfigStatusResponse{Agents: []*rivorav1.AgentStatus{{Connected: true}, {}}})
	if out := mustSucceed(t, run(t, none, "", "agents", "list")).stdout; !strings.Contains(out, "Agents connected: 1 of 2 (this token made no config change here for them to apply).") || strings.Contains(out, "version 0") {
		t.Fatalf("agents list with a customer's token that changed nothing printed:\n%s", out)
	}

	js := mustSucceed(t, run(t, url, "", "agents", "list", "-o", "json")).stdout
	if strings.Contains(js, "healthy") || strings.Contains(js, "name") || strings.Count(js, `"appliedVersion"`) != 3 {
		t.Fatalf("agents list -o json with a customer's token printed:\n%s\nwant connected and appliedVersion only", js)
	}

	url = startFakeConfigStatus(t, &rivorav1.GetConfigStatusResponse{Version: 12, Agents: []*rivorav1.AgentStatus{
		{Name: "a1", Address: "http://127.0.0.1:8081", Connected: true, Healthy: true, AppliedVersion: 12, Partitions: []uint32{0, 1}},
	}})
	out = mustSucceed(t, run(t, url, "", "agents", "list")).stdout
	if !strings.Contains(out, "NAME") || !strings.Contains(out, "a1") || !strings.Contains(out, "12/12") || !strings.Contains(out, "0,1") {
		t.Fatalf("agents list with an operator's token printed:\n%s", out)
	}
}

// With no agent at all, agents list says so rather than printing an empty
// table (which a customer's token would read as "hidden from me").
func TestAgentsListWithNoAgent(t *testing.T) {
	url := startFakeConfigStatus(t, &rivorav1.GetConfigStatusResponse{Version: 3})
	out := mustSucceed(t, run(t, url, "", "agents", "list")).stdout
	if !strings.Contains(out, "No agent follows the control plane yet (config version 3)") || strings.Contains(out, "NAME") {
		t.Fatalf("agents list with no agent printed:\n%s", out)
	}
	js := mustSucceed(t, run(t, url, "", "agents", "list", "-o", "json")).stdout
	if strings.TrimSpace(js) != "[]" {
		t.Fatalf("agents list -o json with no agent printed %q, want []", js)
	}
}

// --limit out of its range is a usage error naming the range, on every
// list: not a silent default (0), nor a value cut to 32 bits.
func TestLimitOutOfRangeIsAUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"events", "list", "--destination", "d", "--limit", "0"},
		{"events", "list", "--destination", "d", "--limit", "4294967397"},
		{"audit", "--limit", "-1"},
		{"lanes", "list", "--destination", "d", "--limit", "0"},
	} {
		res := run(t, "http://127.0.0.1:1", "", args...)
		if res.code != 2 || !strings.Contains(res.stderr, "--limit") || !strings.Contains(res.stderr, "use 1 to") {
			t.Errorf("rivoractl %s: exit %d, stderr %q; want a usage error (2) naming the range", strings.Join(args, " "), res.code, res.stderr)
		}
	}
}

// A flag value of the wrong form says which form it wants, not the flag
// package's bare "parse error".
func TestBadFlagValuesNameTheirForm(t *testing.T) {
	for args, want := range map[string]string{
		"limits set alpha --window 5 --reason x":  "not a duration: use a number with a unit, such as 30s, 5m, 72h or 7d",
		"limits set alpha --burst x --reason x":   "--burst: not a whole number",
		"limits set alpha --rate fast --reason x": "--rate: not a number",
	} {
		res := run(t, "http://127.0.0.1:1", "", strings.Fields(args)...)
		if res.code != 2 || !strings.Contains(res.stderr, want) || strings.Contains(res.stderr, "parse error") {
			t.Errorf("rivoractl %s: exit %d, stderr %q; want a usage error saying %q", args, res.code, res.stderr, want)
		}
	}
}

// --wait names the registered agents that are not connected: they have
// not applied the change yet.
func TestAwayNote(t *testing.T) {
	if got := awayNote(nil); got != "" {
		t.Errorf("awayNote(none) = %q", got)
	}
	if got := awayNote([]string{"a2"}); !strings.Contains(got, "not connected, so not yet: a2") {
		t.Errorf("awayNote(a2) = %q", got)
	}
	if got := awayNote([]string{"", ""}); !strings.Contains(got, "not yet: 2") {
		t.Errorf("awayNote of two nameless agents (a customer's token) = %q", got)
	}
	if got := awayNote([]string{"", "a2"}); !strings.Contains(got, "not yet: 2 (") {
		t.Errorf("awayNote of a named and a nameless agent = %q, want a count", got)
	}
}

// Every duration flag takes whole days as tokens create --ttl and events
// list --since do: 3d is 72h.
func TestDurationFlagsTakeDays(t *testing.T) {
	f, url := startFake(t)
	mustSucceed(t, run(t, url, "", "destinations", "create", "a", "--url", "https://x.example", "--window", "3d"))
	f.mu.Lock()
	got := f.creates[len(f.creates)-1].GetLimits().GetWindow().AsDuration()
	f.mu.Unlock()
	if got != 72*time.Hour {
		t.Fatalf("--window 3d sent %s, want 72h", got)
	}
}

// Through a real control plane and agent: a customer token's --wait
// follows its own change, and agents list then names that change's
// version, not the cell's, which an operator's later change moved on.
func TestCustomerWaitAndAgentsListFollowItsOwnChanges(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{})
	acme := d.Token(rivorav1.Role_ROLE_CUSTOMER, "acme")
	mustSucceed(t, run(t, d.URL, "", "--token", d.AdminToken, "destinations", "create", "erp", "--url", "http://127.0.0.1:9/hook"))
	r := mustSucceed(t, run(t, d.URL, "", "--token", acme, "subscriptions", "create", "--customer", "acme", "--destination", "erp", "--types", "order.*", "--wait"))
	m := regexp.MustCompile(`config version (\d+) applied by 1 agent`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("a customer's subscriptions create --wait printed:\n%s", r.stdout)
	}
	version := m[1]
	mustSucceed(t, run(t, d.URL, "", "--token", d.AdminToken, "destinations", "create", "crm", "--url", "http://127.0.0.1:9/crm", "--wait"))
	out := mustSucceed(t, run(t, d.URL, "", "--token", acme, "agents", "list")).stdout
	if !strings.Contains(out, "Agents connected: 1 of 1; applied this token's latest change (config version "+version+"): 1.") {
		t.Fatalf("agents list with the customer's token after an operator's change printed:\n%s\nwant its own change's version %s", out, version)
	}
}
