package agent_test

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/partner"
)

// max_attempts lowered to what a pending head already used: a dry run
// says how many such heads there are, and the head dies at its next turn
// (reason max_attempts) without another request. An operator lowered it to
// 2 under a head that had used 5: events get read "ATTEMPTS USED 5 of 2",
// and one more request went out at the old retry time before it died.
func TestLoweredMaxAttemptsEndsAHeadWithoutAnotherRequest(t *testing.T) {
	t.Parallel()
	p := newPartner(t, func(partner.Request) int { return http.StatusBadRequest })
	ag := startAgent(t, t.TempDir())
	ag.create(destination("own", p.URL(), 8))
	id := ag.publish("own", "acme", "u1")
	ag.waitEvent(id, "two attempts used, waiting for the third", func(e *rivorav1.GetEventResponse) bool {
		return e.GetAttemptsUsed() == 2 && e.GetState() == rivorav1.EventState_EVENT_STATE_PENDING
	})
	override := func(maxAttempts int32, dryRun bool) *rivorav1.SetLimitsOverrideResponse {
		t.Helper()
		resp, err := ag.Admin.SetLimitsOverride(context.Background(), connect.NewRequest(&rivorav1.SetLimitsOverrideRequest{
			DestinationId: "own", MaxAttempts: proto.Int32(maxAttempts), Reason: "poison payloads", DryRun: dryRun,
		}))
		if err != nil {
			t.Fatalf("limits set --max-attempts %d (dry run %v): %v", maxAttempts, dryRun, err)
		}
		return resp.Msg
	}
	if got := override(3, true).GetHeadsAtMaxAttempts(); got != 0 {
		t.Errorf("dry run of max attempts 3: %d heads at or past it, want 0 (the head used 2)", got)
	}
	if got := override(2, true).GetHeadsAtMaxAttempts(); got != 1 {
		t.Errorf("dry run of max attempts 2: %d heads at or past it, want 1", got)
	}
	set := override(2, false)
	if set.GetHeadsAtMaxAttempts() != 1 {
		t.Errorf("limits set --max-attempts 2: %d heads at or past it, want 1", set.GetHeadsAtMaxAttempts())
	}
	ag.WaitApplied(set.GetVersion())
	dead := ag.waitEvent(id, "dead (max attempts)", func(e *rivorav1.GetEventResponse) bool {
		return e.GetState() == rivorav1.EventState_EVENT_STATE_DEAD
	})
	if dead.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS {
		t.Errorf("dead with reason %v, want max_attempts", dead.GetDeadReason())
	}
	if n := p.Sent(id); n != 2 {
		t.Fatalf("the partner got %d requests for the event, want the 2 made before the limit was lowered", n)
	}
}
