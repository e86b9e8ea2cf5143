package agent_test

import (
	"context"
	"fmt"
	"net/http"
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
