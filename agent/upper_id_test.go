package agent_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// An event id (a UUID Rivora writes in lower case) typed in upper case is
// found by events get, dlq show and events resend (a probe found
// neither); one that matches nothing is not_found naming the id as typed.
func TestAnEventIDTypedInUpperCaseIsFound(t *testing.T) {
	p := newPartner(t, func(partner.Request) int { return http.StatusBadRequest })
	ag := startAgent(t, t.TempDir())
	ag.create(destination("orders", p.URL(), 1))
	id := ag.publish("orders", "acme", "u1")
	upper := strings.ToUpper(id)
	if upper == id {
		t.Fatalf("event id %q has no letter to type in upper case", id)
	}
	dead := ag.waitEvent(upper, "dead (one attempt, refused)", func(e *rivorav1.GetEventResponse) bool {
		return e.GetState() == rivorav1.EventState_EVENT_STATE_DEAD
	})
	if dead.GetEventId() != id {
		t.Fatalf("events get %s answered event %s, want %s", upper, dead.GetEventId(), id)
	}

	dlq := rivorav1connect.NewArchiveServiceClient(ag.HTTPClient(), ag.URL, ag.As(ag.AdminToken))
	var shown *rivorav1.GetDeadLetterResponse
	if err := poll.Within(15*time.Second, func() bool {
		resp, err := dlq.GetDeadLetter(context.Background(), connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: upper}))
		if err == nil {
			shown = resp.Msg
		}
		return err == nil && !shown.GetDeadLetter().GetUnarchived()
	}); err != nil {
		t.Fatalf("dlq show %s: %v; last %v", upper, err, shown)
	}
	if got := shown.GetDeadLetter().GetEvent().GetEventId(); got != id {
		t.Fatalf("dlq show %s answered %s, want %s", upper, got, id)
	}

	resent, err := ag.Events.ResendEvent(context.Background(), connect.NewRequest(&rivorav1.ResendEventRequest{EventId: upper, Reason: "partner fixed"}))
	if err != nil || resent.Msg.GetEventId() != id {
		t.Fatalf("events resend %s: %v, %v; want event %s resent", upper, resent, err, id)
	}

	missing := strings.ToUpper("0190a5b4-7c1e-7def-8a00-00000000beef")
	_, err = ag.getEvent(missing)
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), missing) {
		t.Fatalf("events get %s: %v, want not_found naming the id as typed", missing, err)
	}
}
