package agent_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// A paused destination's lane says what holds it; after a restart, a
// pending event no attempt was made on still shows its type: neither the
// event cache nor the history knows it then, and events get reads it from
// the lane store.
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
	// Its lane is due as far as the scheduler goes, but the listing says
	// what holds it.
	lanesAPI := rivorav1connect.NewLaneServiceClient(ag.HTTPClient(), ag.URL, ag.As(ag.AdminToken))
	list, err := lanesAPI.ListLanes(context.Background(), connect.NewRequest(&rivorav1.ListLanesRequest{DestinationId: "orders"}))
	if err != nil || len(list.Msg.GetLanes()) != 1 || list.Msg.GetLanes()[0].GetPaused() != "destination paused" {
		t.Fatalf("lanes of the paused destination: %v, %v; want one, paused by the destination", list, err)
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
