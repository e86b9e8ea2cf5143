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
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/controlplane"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
)

// A rate under the floor (0.001/s) is refused wherever limits are set:
// create, update, override and the limits file (issue 22: 1e-300 and
// 5e-324 were taken, and events waited out their window).
func TestRateFloorEverywhere(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "limits.yaml")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
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
	for _, r := range []float64{1e-300, 5e-324, 0.000999} {
		_, err := d.Admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "slow", Url: "https://example.com/slow", Limits: &rivorav1.Limits{RatePerSecond: r}}))
		wantCode(t, fmt.Sprintf("create at %g/s", r), err, connect.CodeInvalidArgument, "rate_per_second must be", "at least 0.001")
		_, err = d.Admin.UpdateDestination(ctx, connect.NewRequest(&rivorav1.UpdateDestinationRequest{Id: "orders", RatePerSecond: proto.Float64(r)}))
		wantCode(t, fmt.Sprintf("update at %g/s", r), err, connect.CodeInvalidArgument, "rate_per_second must be", "at least 0.001")
		_, err = d.Admin.SetLimitsOverride(ctx, connect.NewRequest(&rivorav1.SetLimitsOverrideRequest{DestinationId: "orders", RatePerSecond: proto.Float64(r), Reason: "probe"}))
		wantCode(t, fmt.Sprintf("override at %g/s", r), err, connect.CodeInvalidArgument, "rate_per_second must be", "at least 0.001")
	}
	// The floor itself is a rate.
	if _, err := d.Admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "slow", Url: "https://example.com/slow", Limits: &rivorav1.Limits{RatePerSecond: 0.001}})); err != nil {
		t.Fatalf("create at the floor: %v", err)
	}

	// A reload to 1e-300 is refused and audited; the file's 7/s stays.
	write("destinations:\n  orders:\n    rate_per_second: 1e-300\n")
	poll.True(t, "the file under the floor is refused and audited", 5*time.Second, func() bool {
		resp, err := d.Admin.ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{Limit: 1000}))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range resp.Msg.GetEntries() {
			if e.GetAction() == "limits.reject" && strings.Contains(e.GetDetail(), "rate_per_second must be") && strings.Contains(e.GetDetail(), "at least 0.001") {
				return true
			}
		}
		return false
	})
	resp, err := d.Admin.GetLimits(ctx, connect.NewRequest(&rivorav1.GetLimitsRequest{DestinationId: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Msg.GetEffective().GetRatePerSecond(); got != 7 {
		t.Fatalf("after a refused file under the floor: rate %v, want the last good file's 7", got)
	}
}
