package agent_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// After a restart, a pending event no attempt was made on still shows its
// type: neither the event cache nor the history knows it then, and events
// get reads it from the lane store.
func TestPendingEventKeepsItsTypeAfterARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ag := startAgent(t, dir)
	ag.create(destination("orders", "http://127.0.0.1:9/hook", 8))
	pause, err := ag.Admin.PauseDestination(context.Background(), connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: "orders", Reason: "held for the test"}))
	if err != nil {
		t.Fatal(err)
	}
	ag.WaitApplied(pause.Msg.GetVersion())
	id := ag.publish("orders", "acme", "u1")
	if ev := ag.waitEvent(id, "pending", func(ev *rivorav1.GetEventResponse) bool {
		return ev.GetState() == rivorav1.EventState_EVENT_STATE_PENDING
	}); ev.GetType() != "test.event" {
		t.Fatalf("before the restart: type %q, want test.event", ev.GetType())
	}
	ag.stop()

	ag = startAgent(t, dir)
	ev := ag.waitEvent(id, "pending again after the restart", func(ev *rivorav1.GetEventResponse) bool {
		return ev.GetState() == rivorav1.EventState_EVENT_STATE_PENDING
	})
	if ev.GetType() != "test.event" || len(ev.GetAttempts()) != 0 {
		t.Fatalf("after the restart: type %q, %d attempts; want test.event and none", ev.GetType(), len(ev.GetAttempts()))
	}
}
