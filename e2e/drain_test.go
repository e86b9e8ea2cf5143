package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/poll"
)

// `destinations health` shows how long the pending events take at the
// current rate, and `limits set --dry-run` what a new rate would give,
// changing nothing: the limits, the config version and the audit stay.
func TestDrainTimeAndLimitsDryRun(t *testing.T) {
	d := startDev(t, devOptions{})
	p := newPartner(t)
	// One attempt at a time, each held 30 s by the partner: the backlog
	// stays while the test reads it.
	p.SetDelay(30 * time.Second)
	createDestination(t, d, "slow", p, "", &rivorav1.Limits{RatePerSecond: 2, Burst: 1, MaxInFlight: 1, Timeout: durationpb.New(time.Minute)})
	const events = 20
	for i := range events {
		if _, err := d.SDK().Publish(ctxTimeout(t, 10*time.Second), sdk.Event{Destination: "slow", Customer: "acme", Lane: fmt.Sprint("u", i), Type: "t", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	var health []struct {
		PendingEvents      string  `json:"pendingEvents"`
		ArrivalsLastMinute string  `json:"arrivalsLastMinute"`
		CurrentRate        float64 `json:"currentRate"`
		DrainTime          string  `json:"drainTime"`
	}
	err := poll.Check(20*time.Second, 50*time.Millisecond, func() error {
		health = nil
		if err := json.Unmarshal([]byte(rivoractl(t, d, "destinations", "health", "slow", "-o", "json")), &health); err != nil {
			return err
		}
		if len(health) != 1 || health[0].PendingEvents != fmt.Sprint(events) {
			return fmt.Errorf("health %+v; want %d pending", health, events)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// 20 events at 2/s, less the 20 that arrived in the last minute
	// (1/3 per second): 12 s.
	if h := health[0]; h.CurrentRate != 2 || h.ArrivalsLastMinute != "20" || h.DrainTime != "12s" {
		t.Fatalf("health: current rate %v, %s arrivals in the last minute, drain time %q; want 2, 20 and 12s", h.CurrentRate, h.ArrivalsLastMinute, h.DrainTime)
	}
	if table := rivoractl(t, d, "destinations", "health", "slow"); !strings.Contains(table, "DRAIN TIME") || !strings.Contains(table, "12s at the current rate, less the 0.333/s arriving") || !strings.Contains(table, "OLDEST PENDING") {
		t.Fatalf("health table has no drain time of 12s net of the arrivals:\n%s", table)
	}

	// The rate history, when asked for: 10-second buckets since the agent
	// took the destination up (up to 15 minutes), the last one now's.
	hr, err := d.Admin().GetDestinationHealth(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.GetDestinationHealthRequest{DestinationId: "slow", RateHistory: true}))
	if err != nil {
		t.Fatal(err)
	}
	rates := hr.Msg.GetDestinations()[0].GetRateHistory()
	if age := hr.Msg.GetDestinations()[0].GetOldestPendingAge(); age == nil || age.AsDuration() <= 0 || age.AsDuration() > time.Minute {
		t.Fatalf("oldest pending age %v; want the first event's age, under a minute", age)
	}
	if n := len(rates); n == 0 || n >= 90 || rates[n-1].GetConfiguredRate() != 2 || rates[n-1].GetStart().AsTime().After(time.Now()) {
		t.Fatalf("rate history: %d buckets %v; want those since the destination was made (under 15 minutes) ending now at 2/s configured", n, rates)
	}

	auditBefore := rivoractl(t, d, "audit", "-o", "json")
	status, err := d.Admin().GetConfigStatus(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	// A change needs a reason, from the CLI and from the API.
	if _, errOut, err := runRivoractl(d, "limits", "set", "slow", "--rate", "8"); err == nil || !strings.Contains(errOut, "--reason is required") {
		t.Fatalf("limits set without --reason: %v\n%s\nwant refused, asking for a reason", err, errOut)
	}
	if _, err := d.Admin().SetLimitsOverride(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.SetLimitsOverrideRequest{DestinationId: "slow", RatePerSecond: proto.Float64(8)})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("SetLimitsOverride without a reason: %v; want InvalidArgument", err)
	}
	// The command: a dry run needs no reason (nothing is audited).
	out := rivoractl(t, d, "limits", "set", "slow", "--rate", "8", "--dry-run")
	if !strings.Contains(out, "dry run: nothing changed") || !strings.Contains(out, "20 pending events drain in 3s at 8/s, less the 0.333/s arriving") {
		t.Fatalf("limits set --dry-run printed:\n%s\nwant the projected drain time (20 events at 8/s less 1/3 s arriving: 2.6 s, shown 3s)", out)
	}
	var dry struct {
		DryRun             bool   `json:"dryRun"`
		ProjectedDrainTime string `json:"projectedDrainTime"`
		Version            string `json:"version"`
		Limits             struct {
			Effective struct {
				RatePerSecond float64 `json:"ratePerSecond"`
			} `json:"effective"`
		} `json:"limits"`
	}
	if err := json.Unmarshal([]byte(rivoractl(t, d, "limits", "set", "slow", "--rate", "8", "--reason", "what if", "--dry-run", "-o", "json")), &dry); err != nil {
		t.Fatal(err)
	}
	// As the health's: 20 events at 8/s less the 1/3 s arriving.
	if !dry.DryRun || dry.ProjectedDrainTime != "2.609s" || dry.Version != "" || dry.Limits.Effective.RatePerSecond != 8 {
		t.Fatalf("dry run answered %+v; want dryRun, 2.609s, no version, the effective rate 8", dry)
	}
	if after := rivoractl(t, d, "audit", "-o", "json"); after != auditBefore {
		t.Fatalf("a dry run changed the audit:\nbefore:\n%s\nafter:\n%s", auditBefore, after)
	}
	after, err := d.Admin().GetConfigStatus(ctxTimeout(t, 10*time.Second), connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if after.Msg.GetVersion() != status.Msg.GetVersion() {
		t.Fatalf("a dry run moved the config version from %d to %d", status.Msg.GetVersion(), after.Msg.GetVersion())
	}
	if limits := rivoractl(t, d, "limits", "get", "slow"); !strings.Contains(limits, "2/s") {
		t.Fatalf("after a dry run the limits are not the destination's own 2/s:\n%s", limits)
	}
	// Paused, the events do not drain at all.
	rivoractl(t, d, "destinations", "pause", "slow", "--reason", "test", "--wait")
	if table := rivoractl(t, d, "destinations", "health", "slow"); !strings.Contains(table, "DRAIN TIME") || !strings.Contains(table, "never: no attempt goes out (paused") {
		t.Fatalf("health of a paused destination does not say it never drains:\n%s", table)
	}
	// Nor does a limit change promise a drain time then.
	if out := rivoractl(t, d, "limits", "set", "slow", "--rate", "8", "--dry-run"); !strings.Contains(out, "20 pending events do not drain now: the destination is paused") || strings.Contains(out, "drain in") {
		t.Fatalf("limits set --dry-run on a paused destination printed:\n%s\nwant that its events do not drain now", out)
	}
}
