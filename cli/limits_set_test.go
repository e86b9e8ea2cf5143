package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/rig"
)

// --ttl alone sets when the override in force ends (its fields and values
// kept); with no override in force it is refused, saying what to add.
// (It was refused as "nothing to override" either way.)
func TestLimitsSetTTLAlone(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{NoAgent: true})
	ctx := context.Background()
	admin := func(args ...string) result {
		return run(t, d.URL, "", append([]string{"--token", d.AdminToken}, args...)...)
	}
	mustSucceed(t, admin("destinations", "create", "orders", "--url", "https://example.com/hooks"))

	assertFailure(t, admin("limits", "set", "orders", "--ttl", "30m", "--reason", "r"), exitError, "no limits override in force")

	mustSucceed(t, admin("limits", "set", "orders", "--rate", "15", "--reason", "WAF"))
	before := time.Now()
	mustSucceed(t, admin("limits", "set", "orders", "--ttl", "30m", "--reason", "until the fix"))
	r, err := d.Admin.GetLimits(ctx, connect.NewRequest(&rivorav1.GetLimitsRequest{DestinationId: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	src := r.Msg.GetSources()["rate_per_second"]
	if got := r.Msg.GetEffective().GetRatePerSecond(); got != 15 || src.GetSource() != "override" {
		t.Fatalf("after --ttl alone: rate %v from %q, want the override's 15 kept", got, src.GetSource())
	}
	if at := src.GetExpiresAt(); at == nil || at.AsTime().Before(before.Add(30*time.Minute-time.Second)) || at.AsTime().After(time.Now().Add(30*time.Minute)) {
		t.Fatalf("after --ttl 30m alone, the override expires at %v, want in 30m", src.GetExpiresAt())
	}
	audit, err := d.Admin.ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	entries := audit.Msg.GetEntries()
	if last := entries[len(entries)-1].GetDetail(); !strings.Contains(last, "expiry set") || !strings.Contains(last, "rate_per_second") {
		t.Fatalf("audit of --ttl alone: %q, want it to say the expiry was set for rate_per_second", last)
	}
}

// A viewer token previews a limits override (--dry-run changes nothing)
// and is refused a real one, told what it may do.
func TestAViewerPreviewsALimitsOverride(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{})
	mustSucceed(t, run(t, d.URL, "", "--token", d.AdminToken, "destinations", "create", "orders", "--url", "https://example.com/hooks", "--wait"))
	viewer := d.Token(rivorav1.Role_ROLE_VIEWER)
	dry := mustSucceed(t, run(t, d.URL, "", "--token", viewer, "limits", "set", "orders", "--rate", "5", "--dry-run"))
	if !strings.Contains(dry.stdout, "dry run: nothing changed") {
		t.Errorf("a viewer's dry run printed:\n%s", dry.stdout)
	}
	assertFailure(t, run(t, d.URL, "", "--token", viewer, "limits", "set", "orders", "--rate", "5", "--reason", "r"), exitError, "--dry-run")
	r, err := d.Admin.GetLimits(context.Background(), connect.NewRequest(&rivorav1.GetLimitsRequest{DestinationId: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	if src := r.Msg.GetSources()["rate_per_second"].GetSource(); src == "override" {
		t.Fatalf("after a viewer's dry run and refused set, the rate comes from %q", src)
	}
}
