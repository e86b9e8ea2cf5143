package agent_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/testkit/poll"
)

// A partner's Retry-After outlives the agent's restart: the destination's
// budget is saved in its partition's ledger, so after the restart the hold
// still holds (an event on a lane the restart made new waits for it too,
// until an operator's resume ends it), and the rate cut of the 429 is
// still in force. Before, a restart forgot both: the new lane's event
// went at once, at the full rate.
func TestARetryAfterHoldOutlivesARestart(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	firstAt := make(map[string]time.Time) // webhook-id → its first request
	refused := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		id := r.Header.Get(webhook.HeaderID)
		if _, ok := firstAt[id]; !ok {
			firstAt[id] = time.Now()
		}
		if !refused {
			refused = true
			w.Header().Set("Retry-After", "600")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	sentFirst := func(id string) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		at, ok := firstAt[id]
		return at, ok
	}

	dir := t.TempDir()
	ag := startAgent(t, dir)
	ag.create(destination("orders", srv.URL+"/hook", 8))
	first := ag.publish("orders", "acme", "u1")
	var holdUntil time.Time
	poll.True(t, "the partner's Retry-After holds the destination", 10*time.Second, func() bool {
		holdUntil = ag.health("orders").GetHoldUntil().AsTime()
		return holdUntil.After(time.Now())
	})
	before := ag.health("orders")
	ag.stop()

	ag = startAgent(t, dir)
	after := ag.health("orders")
	if !after.GetHoldUntil().AsTime().Equal(holdUntil) {
		t.Fatalf("after the restart the hold ends at %v, want %v (before the restart)", after.GetHoldUntil().AsTime(), holdUntil)
	}
	if after.GetState() != "degraded" || after.GetCurrentRate() != before.GetCurrentRate() {
		t.Fatalf("after the restart: %s at %.1f/s, want degraded at %.1f/s (as before it)", after.GetState(), after.GetCurrentRate(), before.GetCurrentRate())
	}
	second := ag.publish("orders", "acme", "u2") // a lane the restart made new
	ag.waitEvent(second, "pending", func(ev *rivorav1.GetEventResponse) bool {
		return ev.GetState() == rivorav1.EventState_EVENT_STATE_PENDING
	})
	resumedAt := time.Now()
	for _, call := range []func() error{
		func() error {
			_, err := ag.Admin.PauseDestination(context.Background(), connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: "orders", Reason: "end the hold"}))
			return err
		},
		func() error {
			_, err := ag.Admin.ResumeDestination(context.Background(), connect.NewRequest(&rivorav1.ResumeDestinationRequest{DestinationId: "orders"}))
			return err
		},
	} {
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	poll.True(t, "both events delivered once the operator's resume ended the hold", 15*time.Second, func() bool {
		_, ok := sentFirst(second)
		return ok && ag.health("orders").GetPendingEvents() == 0
	})
	if at, _ := sentFirst(second); at.Before(resumedAt) {
		t.Fatalf("the new lane's event went %v before the operator's resume ended the hold", resumedAt.Sub(at).Round(time.Millisecond))
	}
	if _, ok := sentFirst(first); !ok {
		t.Fatal("the first event was never sent")
	}
}
