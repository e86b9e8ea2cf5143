package agent_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// A window shortened below the age of pending events (limits set
// --window) ends them: a dry run and the change itself say how many, as
// the window counts their age (from acceptance, paused time left out).
// An operator set --window 1m on a parked destination with a backlog ~6
// minutes old: every event became a dead letter within seconds, and the
// dry run had warned of nothing.
func TestShortenedWindowCountsTheEventsPastIt(t *testing.T) {
	t.Parallel()
	p := newPartner(t, func(partner.Request) int { return http.StatusBadRequest })
	ag := startAgent(t, t.TempDir())
	ag.create(destination("own", p.URL(), 1000))
	ctx := context.Background()
	pause, err := ag.Admin.PauseDestination(ctx, connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: "own", Reason: "partner maintenance"}))
	if err != nil {
		t.Fatal(err)
	}
	ag.WaitApplied(pause.Msg.GetVersion())
	ids := []string{ag.publish("own", "acme", "u1"), ag.publish("own", "acme", "u1"), ag.publish("own", "acme", "u2")}
	poll.True(t, "3 events pending", 10*time.Second, func() bool {
		n, err := ag.Agent.Pending(ctx, "own")
		return err == nil && n == 3
	})
	override := func(window time.Duration, dryRun bool) *rivorav1.SetLimitsOverrideResponse {
		t.Helper()
		resp, err := ag.Admin.SetLimitsOverride(ctx, connect.NewRequest(&rivorav1.SetLimitsOverrideRequest{
			DestinationId: "own", Window: durationpb.New(window), Reason: "shed the backlog", DryRun: dryRun,
		}))
		if err != nil {
			t.Fatalf("limits set --window %s (dry run %v): %v", window, dryRun, err)
		}
		return resp.Msg
	}
	time.Sleep(1500 * time.Millisecond) // the events' age, all of it paused
	if got := override(time.Second, true).GetEventsPastWindow(); got != 0 {
		t.Errorf("dry run of window 1s over events accepted while paused: %d past it, want 0 (paused time does not count)", got)
	}
	resume, err := ag.Admin.ResumeDestination(ctx, connect.NewRequest(&rivorav1.ResumeDestinationRequest{DestinationId: "own"}))
	if err != nil {
		t.Fatal(err)
	}
	ag.WaitApplied(resume.Msg.GetVersion())
	// Once a second has passed since the resume, all three are past a
	// 1 s window, none past an hour's.
	poll.True(t, "a dry run of window 1s counts the 3 events past it", 10*time.Second, func() bool {
		return override(time.Second, true).GetEventsPastWindow() == 3
	})
	if got := override(time.Hour, true).GetEventsPastWindow(); got != 0 {
		t.Errorf("dry run of window 1h: %d past it, want 0", got)
	}
	set := override(time.Second, false)
	if set.GetEventsPastWindow() != 3 {
		t.Errorf("limits set --window 1s: %d events past it, want 3", set.GetEventsPastWindow())
	}
	ag.WaitApplied(set.GetVersion())
	for _, id := range ids {
		dead := ag.waitEvent(id, "dead (window)", func(e *rivorav1.GetEventResponse) bool {
			return e.GetState() == rivorav1.EventState_EVENT_STATE_DEAD
		})
		if dead.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_WINDOW {
			t.Errorf("event %s dead with reason %v, want window", id, dead.GetDeadReason())
		}
	}
}
