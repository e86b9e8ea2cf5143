package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// A partner answering 410 Gone: the agent stops the destination after the
// heads already in flight (one per lane at most), the control plane
// disables it (health and get say so, with the reason), nothing is
// dead-lettered or charged, and resume delivers every event in lane order.
func TestGoneDisablesAndResumeDrains(t *testing.T) {
	t.Parallel()
	p := newPartner(t, func(partner.Request) int { return http.StatusGone })
	dir := t.TempDir()
	ag := startAgent(t, dir)
	ag.create(destination("orders", p.URL(), 2))
	ctx := context.Background()
	want := map[string][]string{}
	for i := range 6 {
		lane := fmt.Sprintf("u%d", i%2)
		want[lane] = append(want[lane], ag.publish("orders", "acme", lane))
	}
	// Events accepted just after the partition opened wait in INGEST
	// until the mover puts them in their lanes (see Partition.Append), and
	// count as pending from then on: the check below awaits all six, or
	// says how many came.
	var got *rivorav1.GetDestinationResponse
	_ = poll.Within(10*time.Second, func() bool {
		resp, err := ag.Admin.GetDestination(ctx, connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "orders"}))
		if err != nil {
			return false
		}
		got = resp.Msg
		return got.GetDestination().GetDisabled() && got.GetPending() == 6
	})
	if d := got.GetDestination(); !d.GetDisabled() || !d.GetPaused() || d.GetPauseReason() != "partner answered 410 Gone" || got.GetPending() != 6 {
		t.Fatalf("disabled destination: disabled %v, paused %v, reason %q, pending %d; want disabled, paused, the 410 reason, 6 pending", d.GetDisabled(), d.GetPaused(), d.GetPauseReason(), got.GetPending())
	}
	health, err := ag.Admin.GetDestinationHealth(ctx, connect.NewRequest(&rivorav1.GetDestinationHealthRequest{DestinationId: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	if hs := health.Msg.GetDestinations(); len(hs) != 1 || !hs[0].GetDisabled() || !hs[0].GetPaused() || hs[0].GetPauseReason() != "partner answered 410 Gone" {
		t.Fatalf("health of the disabled destination: %v", hs)
	}
	// Stopped locally at the first 410, not when the config came back: at
	// most the lanes' heads already in flight were sent.
	if n := len(p.Requests()); n < 1 || n > len(want) {
		t.Fatalf("partner got %d requests, want 1 to %d (one per lane at most)", n, len(want))
	}
	// Pending again once its attempt (if one was in flight) came back.
	ag.waitEvent(want["u0"][0], "the head pending after a 410", func(e *rivorav1.GetEventResponse) bool {
		return e.GetState() == rivorav1.EventState_EVENT_STATE_PENDING
	})

	p.SetAnswer(nil)
	if _, err := ag.Admin.ResumeDestination(ctx, connect.NewRequest(&rivorav1.ResumeDestinationRequest{DestinationId: "orders", Author: "ops"})); err != nil {
		t.Fatal(err)
	}
	poll.True(t, "backlog delivered after resume", 10*time.Second, func() bool { return allDelivered(p, want) })
	checkOrder(t, p, want)
	if paths, _ := deadLetters(t, dir, "orders"); len(paths) != 0 {
		t.Fatalf("a 410 dead-lettered events: %v", paths)
	}
	audit, err := ag.Admin.ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{DestinationId: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	disables := 0
	for _, e := range audit.Msg.GetEntries() {
		if e.GetAction() == "destination.disable" {
			disables++
			if e.GetAuthor() != "rivora" || e.GetReason() != "partner answered 410 Gone" {
				t.Errorf("audit entry %v", e)
			}
		}
	}
	if disables != 1 {
		t.Fatalf("%d destination.disable audit entries, want 1", disables)
	}
}

// A partner that answers 410 to one customer's events only, on a
// destination shared by customers, while it takes another customer's:
// the 410s are that customer's failures (charged, retried, dead-lettered
// after max attempts with the 410 as their last answer), the destination
// is never disabled, and the other customer's events keep flowing. It
// was disabled for every customer at acme's first 410. On acme's own
// destination the same 410 still disables it.
func TestOneCustomersGoneDoesNotDisableASharedDestination(t *testing.T) {
	t.Parallel()
	p := newPartner(t, func(r partner.Request) int {
		if r.Customer == "acme" {
			return http.StatusGone
		}
		return http.StatusOK
	})
	dir := t.TempDir()
	ag := startAgent(t, dir)
	own := destination("acme-own", p.DestURL("acme-own"), 2)
	own.OwnerCustomer = "acme"
	ag.create(destination("shared", p.DestURL("shared"), 2), own)
	ctx := context.Background()

	// beta's steady traffic, which the partner takes throughout.
	betaIDs := make(chan []string, 1)
	stop := make(chan struct{})
	go func() {
		var ids []string
		defer func() { betaIDs <- ids }()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			resp, err := ag.Ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{
				DestinationId: "shared", CustomerId: "beta", LaneKey: "b", Type: "test.event", Payload: []byte(`{}`),
			}))
			if err != nil {
				ids = append(ids, "publish failed: "+err.Error())
				return
			}
			ids = append(ids, resp.Msg.GetEventId())
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	stopBeta := sync.OnceValue(func() []string { close(stop); return <-betaIDs })
	t.Cleanup(func() { stopBeta() })
	poll.True(t, "beta's first delivery", 10*time.Second, func() bool { return len(p.DeliveredByLane()["b"]) > 0 })
	// The partner logs beta's 200 as it answers, before the agent reads
	// it; acme's 410 is judged by the successes the agent has observed
	// (scheduler.goneOnlyItsCustomers). So await the agent's record of
	// beta's delivery too, which it settles only after observing it:
	// under load acme's 410 came back before beta's 200 was observed.
	ag.waitEvent(p.DeliveredByLane()["b"][0], "beta's first event delivered as the agent saw it", func(e *rivorav1.GetEventResponse) bool {
		return e.GetState() == rivorav1.EventState_EVENT_STATE_DELIVERED
	})

	refused := []string{ag.publish("shared", "acme", "a"), ag.publish("shared", "acme", "a")}
	shared := func() *rivorav1.Destination {
		resp, err := ag.Admin.GetDestination(ctx, connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "shared"}))
		if err != nil {
			t.Fatalf("get shared: %v", err)
		}
		return resp.Msg.GetDestination()
	}
	dead := func(id string) bool {
		e, err := ag.getEvent(id)
		return err == nil && e.GetState() == rivorav1.EventState_EVENT_STATE_DEAD
	}
	_ = poll.Within(20*time.Second, func() bool {
		return shared().GetDisabled() || (dead(refused[0]) && dead(refused[1]))
	})
	if d := shared(); d.GetDisabled() || d.GetPaused() {
		t.Fatalf("shared destination after acme's 410s: disabled %v, paused %v (%q); want it serving beta", d.GetDisabled(), d.GetPaused(), d.GetPauseReason())
	}
	for _, id := range refused {
		e := ag.waitEvent(id, "dead after its max attempts", func(e *rivorav1.GetEventResponse) bool {
			return e.GetState() == rivorav1.EventState_EVENT_STATE_DEAD
		})
		if e.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS || p.Sent(id) != 2 {
			t.Errorf("acme's event %s: dead reason %v, sent %d times; want max attempts, sent twice", id, e.GetDeadReason(), p.Sent(id))
		}
	}
	var letters []*rivorav1.DeadLetter
	poll.True(t, "acme's dead letters archived", 15*time.Second, func() bool {
		_, letters = deadLetters(t, dir, "shared")
		return len(letters) == len(refused)
	})
	for _, dl := range letters {
		if dl.GetLastStatus() != http.StatusGone || dl.GetAttempts() != 2 || dl.GetEvent().GetCustomerId() != "acme" {
			t.Errorf("dead letter: customer %s, %d attempts, last status %d; want acme's, 2, 410", dl.GetEvent().GetCustomerId(), dl.GetAttempts(), dl.GetLastStatus())
		}
	}
	beta := stopBeta()
	if len(beta) == 0 || strings.HasPrefix(beta[len(beta)-1], "publish failed") {
		t.Fatalf("beta's publishes: %v", beta)
	}
	poll.True(t, "every beta event delivered", 15*time.Second, func() bool { return allDelivered(p, map[string][]string{"b": beta}) })
	audit, err := ag.Admin.ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{DestinationId: "shared"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range audit.Msg.GetEntries() {
		if e.GetAction() == "destination.disable" {
			t.Fatalf("shared destination disabled: %v", e)
		}
	}

	// acme's own destination: its partner wants no more of its webhooks.
	ag.publish("acme-own", "acme", "a")
	poll.True(t, "acme's own destination disabled after its 410", 15*time.Second, func() bool {
		resp, err := ag.Admin.GetDestination(ctx, connect.NewRequest(&rivorav1.GetDestinationRequest{Id: "acme-own"}))
		return err == nil && resp.Msg.GetDestination().GetDisabled() && resp.Msg.GetPending() == 1
	})
}
