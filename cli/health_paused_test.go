package cli

import (
	"encoding/json"
	"strings"
	"testing"

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
