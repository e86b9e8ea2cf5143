package agent_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// `destinations resume` ends a partner's Retry-After hold of a destination
// that is not paused, as events get says ("a resume ends it"): an operator
// was refused `destination "shared" is not paused`, and only a pause then
// a resume worked. The resume is audited; one of a destination neither
// paused nor held is still refused.
func TestResumeEndsARetryAfterHoldOfADestinationNotPaused(t *testing.T) {
	t.Parallel()
	var throttled atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if throttled.CompareAndSwap(false, true) {
			w.Header().Set("Retry-After", "600")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	ag := startAgent(t, t.TempDir())
	ag.create(destination("shared", srv.URL+"/hook", 8))
	id := ag.publish("shared", "acme", "u1")
	held := ag.waitEvent(id, "held by the partner's Retry-After", func(e *rivorav1.GetEventResponse) bool {
		return strings.Contains(e.GetWaiting(), "(Retry-After; a resume ends it)")
	})
	holdUntil := ag.health("shared").GetHoldUntil().AsTime()
	if until := time.Until(holdUntil); until < 9*time.Minute {
		t.Fatalf("held %v more (%s), want about the partner's 10 minutes", until, held.GetWaiting())
	}
	resp, err := ag.Admin.ResumeDestination(context.Background(), connect.NewRequest(&rivorav1.ResumeDestinationRequest{DestinationId: "shared"}))
	if err != nil {
		t.Fatalf("resume of a destination held by a Retry-After: %v", err)
	}
	if got := resp.Msg.GetEndedHoldUntil(); got == nil || !got.AsTime().Equal(holdUntil) || resp.Msg.GetDestination().GetPaused() {
		t.Fatalf("resume answered ended_hold_until %v, paused %v; want %v, not paused", got, resp.Msg.GetDestination().GetPaused(), holdUntil)
	}
	ag.waitEvent(id, "delivered once the resume ended the hold", func(e *rivorav1.GetEventResponse) bool {
		return e.GetState() == rivorav1.EventState_EVENT_STATE_DELIVERED
	})
	if h := ag.health("shared"); h.GetHoldUntil() != nil {
		t.Fatalf("after the resume: held until %v, want no hold", h.GetHoldUntil().AsTime())
	}
	audit, err := ag.Admin.ListAudit(context.Background(), connect.NewRequest(&rivorav1.ListAuditRequest{Limit: 100}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range audit.Msg.GetEntries() {
		found = found || e.GetAction() == "destination.resume" && strings.Contains(e.GetDetail(), "ended its partner's Retry-After hold")
	}
	if !found {
		t.Errorf("no destination.resume audit entry says it ended the hold: %v", audit.Msg.GetEntries())
	}
	// Neither paused nor held: nothing to resume.
	_, err = ag.Admin.ResumeDestination(context.Background(), connect.NewRequest(&rivorav1.ResumeDestinationRequest{DestinationId: "shared"}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "not paused, nor held by its partner's Retry-After") {
		t.Fatalf("resume of a destination neither paused nor held: %v, want failed_precondition saying so", err)
	}
}
