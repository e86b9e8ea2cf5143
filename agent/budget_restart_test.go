package agent_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/testkit/poll"
)

// A partner's Retry-After outlives the agent's restart: the destination's
// budget is saved in its partition's ledger, so after the restart the hold
// still holds (an event on a lane the restart made new waits for it too),
// and the rate cut of the 429 is still in force. Before, a restart
// forgot both: the new lane's event went at once, at the full rate.
func TestARetryAfterHoldOutlivesARestart(t *testing.T) {
	t.Parallel()
	const hold = 15 * time.Second
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
			w.Header().Set("Retry-After", "15")
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
	ag.publish("orders", "acme", "u1")
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
	if time.Until(holdUntil) < hold/3 {
		t.Logf("the restart took long: %v of the hold left", time.Until(holdUntil).Round(time.Millisecond))
	}
	id := ag.publish("orders", "acme", "u2") // a lane the restart made new
	poll.True(t, "the new lane's event is delivered once the hold ends", hold+15*time.Second, func() bool {
		_, ok := sentFirst(id)
		return ok
	})
	if at, _ := sentFirst(id); at.Before(holdUntil) {
		t.Fatalf("the new lane's event went %v before the hold ended", holdUntil.Sub(at).Round(time.Millisecond))
	}
}
