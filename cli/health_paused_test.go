package cli

import (
	"encoding/json"
	"strings"
	"testing"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/rig"
)

// destinations health -o json says what the table says of a paused
// destination: state paused (a probe read "healthy" there, the budget's
// state, while the table said paused), the budget's own state beside it.
func TestHealthJSONSaysPaused(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{})
	admin := func(args ...string) result {
		return mustSucceed(t, run(t, d.URL, "", append([]string{"--token", d.AdminToken}, args...)...))
	}
	admin("destinations", "create", "orders", "--url", "https://example.com/hooks", "--wait")
	admin("destinations", "pause", "orders", "--reason", "partner maintenance", "--wait")

	table := admin("destinations", "health", "orders").stdout
	if !strings.Contains(table, "paused: partner maintenance (budget healthy)") {
		t.Fatalf("health table of a paused destination:\n%s", table)
	}
	var got []struct {
		DestinationID string `json:"destinationId"`
		State         string `json:"state"`
		BudgetState   string `json:"budgetState"`
		Paused        bool   `json:"paused"`
	}
	out := admin("destinations", "health", "orders", "-o", "json").stdout
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("health -o json: %v\n%s", err, out)
	}
	if len(got) != 1 || got[0].State != "paused" || got[0].BudgetState != "healthy" || !got[0].Paused {
		t.Fatalf("health -o json of a paused destination: %+v, want state paused, budgetState healthy", got)
	}

	admin("destinations", "resume", "orders", "--wait")
	out = admin("destinations", "health", "orders", "-o", "json").stdout
	got = nil
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("health -o json: %v\n%s", err, out)
	}
	if len(got) != 1 || got[0].State != "healthy" || got[0].BudgetState != "healthy" || got[0].Paused {
		t.Fatalf("health -o json once resumed: %+v, want state healthy", got)
	}
}

// destinations health says a destination unusable on its owner, with
// why, where a pause's reason is said, and beside a pause; its drain
// time says nothing goes out.
func TestHealthSaysUnusable(t *testing.T) {
	f, url := startFake(t)
	const why = `destination "a": signing key: not a PKCS#8 Ed25519 key`
	f.mu.Lock()
	f.health = map[string]*rivorav1.DestinationHealth{
		"a":      {DestinationId: "a", State: "unusable", BudgetState: "healthy", Unusable: why, PendingEvents: 3, CurrentRate: 5},
		"paused": {DestinationId: "paused", State: "paused", BudgetState: "healthy", Paused: true, PauseReason: "key rollout", Unusable: why},
	}
	f.mu.Unlock()
	for _, c := range []struct{ id, row, want string }{
		{"a", "STATE", "unusable: " + why + " (budget healthy); the agent that owns it cannot build its config: no attempt goes out until a config of it builds there"},
		{"a", "DRAIN TIME", "never: no attempt goes out (unusable: " + why + ")"},
		{"paused", "STATE", "paused: key rollout; unusable: " + why + " (budget healthy); resume with `rivoractl destinations resume paused`, and mend its config (a resume alone sends nothing while its owner cannot build it)"},
	} {
		r := mustSucceed(t, run(t, url, "", "destinations", "health", c.id))
		var got string
		for _, line := range strings.Split(r.stdout, "\n") {
			if rest, ok := strings.CutPrefix(line, c.row); ok {
				got = strings.TrimSpace(rest)
			}
		}
		if got != c.want {
			t.Errorf("health of %s: %s %q, want %q:\n%s", c.id, c.row, got, c.want, r.stdout)
		}
	}
}
