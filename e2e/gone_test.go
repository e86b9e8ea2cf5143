package e2e

// Issue 11: a partner answering 410 Gone (Standard Webhooks: the receiver
// wants no more webhooks) disables its destination — paused with reason
// "partner answered 410 Gone", audited with author rivora — within one
// attempt, and nothing is dead-lettered; resume delivers everything in
// lane order.

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/poll"
)

const goneReason = "partner answered 410 Gone"

func TestGoneDisablesDestination(t *testing.T) {
	d := startDev(t, devOptions{})
	goneScenario(t, devRig(d), "gone")
}

// The same with the control plane and the agent as two processes: the
// agent stops on its own and tells the control plane over the network.
func TestCellGoneDisablesDestination(t *testing.T) {
	c := startCell(t, cellOptions{Partitions: 4, AgentName: "edge-1"})
	goneScenario(t, c.rig(), "cellgone")
}

// goneScenario: 30 events over 10 lanes to a partner answering 410. The
// destination is disabled before any event's second attempt; not one
// attempt reaches the partner in the next 5 s; get, list and health say
// "disabled: partner answered 410 Gone"; the audit names rivora; no dead
// letter. The partner answers 2xx again, resume: every event arrives, in
// lane order.
func goneScenario(t *testing.T, r *rig, dest string) {
	p := newPartner(t)
	p.SetStatus(http.StatusGone)
	r.createDestination(t, dest, p, &rivorav1.Limits{MaxAttempts: 2})
	ctx := ctxTimeout(t, 2*time.Minute)
	pub := newPublished()
	lanes := lanesNamed("acct", 10)
	if err := publishRounds(ctx, r.SDK(), dest, "cust", lanes, 3, pub); err != nil {
		t.Fatal(err)
	}
	published := time.Now()
	var got *rivorav1.GetDestinationResponse
	poll.True(t, "destinations get -o json shows the destination disabled", 10*time.Second, func() bool {
		got = getDestinationJSON(t, r, dest)
		return got.GetDestination().GetDisabled()
	})
	disabledAt := time.Now()
	held := p.Count()
	t.Logf("disabled %s after publishing, after %d requests", disabledAt.Sub(published).Round(time.Millisecond), held)
	if dst := got.GetDestination(); !dst.GetPaused() || dst.GetPauseReason() != goneReason {
		t.Fatalf("disabled destination: paused %v, pauseReason %q; want paused, %q", dst.GetPaused(), dst.GetPauseReason(), goneReason)
	}
	// Within one attempt: the lanes' heads already in flight when the
	// first 410 came back, and no event twice.
	if held < 1 || held > len(lanes) {
		t.Fatalf("partner got %d requests before the destination was disabled, want 1 to %d (one per lane at most)", held, len(lanes))
	}
	for _, id := range pub.all() {
		if n := p.Sent(id); n > 1 {
			t.Fatalf("event %s attempted %d times before the destination was disabled", id, n)
		}
	}

	// Deliberate hold: zero attempts for 5 s while disabled.
	for time.Since(disabledAt) < 5*time.Second {
		if n := p.Count(); n != held {
			t.Fatalf("%d attempts reached the disabled destination %s after it showed disabled", n-held, time.Since(disabledAt).Round(time.Millisecond))
		}
		if err := r.died(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := getDestinationJSON(t, r, dest); got.GetPending() != 30 {
		t.Errorf("pending %d while disabled, want all 30", got.GetPending())
	}
	if out := r.ctl(t, "destinations", "list"); !strings.Contains(out, "disabled: "+goneReason) {
		t.Errorf("destinations list does not show %s disabled:\n%s", dest, out)
	}
	h, err := healthJSON(r.adminURL, dest)
	if err != nil {
		t.Fatal(err)
	}
	if !h.GetDisabled() || h.GetPauseReason() != goneReason {
		t.Errorf("destinations health -o json: disabled %v, pauseReason %q", h.GetDisabled(), h.GetPauseReason())
	}
	if out := r.ctl(t, "destinations", "health", dest); !strings.Contains(out, "disabled: "+goneReason) {
		t.Errorf("destinations health does not show it disabled:\n%s", out)
	}
	e := findAudit(r.auditJSON(t, "--destination", dest), "destination.disable", dest)
	if e == nil || e.GetAuthor() != "rivora" || e.GetReason() != goneReason {
		t.Fatalf("audit destination.disable of %s: %v; want author rivora, reason %q", dest, e, goneReason)
	}
	head := pub.ByLane["cust/"+lanes[0]][0]
	ev, err := rivorav1connect.NewEventServiceClient(authedHTTP, r.ingestURL).GetEvent(ctx, connect.NewRequest(&rivorav1.GetEventRequest{EventId: head}))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Msg.GetState() != rivorav1.EventState_EVENT_STATE_PENDING {
		t.Fatalf("head %s of a disabled destination: state %v, want pending", head, ev.Msg.GetState())
	}
	if n := dlqListCount(t, r, dest); n != 0 {
		t.Fatalf("%d dead letters for the disabled destination, want 0", n)
	}

	p.SetHealthy()
	resumed := time.Now()
	r.ctl(t, "destinations", "resume", dest, "--wait")
	ids := pub.all()
	p.WaitDelivered(t, ids, 30*time.Second)
	t.Logf("after resume: %d events delivered in %s", len(ids), time.Since(resumed).Round(time.Millisecond))
	rep := checkLaneOrder(t, p, pub.ByLane, pub.Payloads, nil)
	if rep.Events != 30 || rep.Lanes != 10 {
		t.Errorf("checked %d events over %d lanes, want 30 over 10", rep.Events, rep.Lanes)
	}
	if got := getDestinationJSON(t, r, dest).GetDestination(); got.GetDisabled() || got.GetPaused() {
		t.Errorf("after resume: disabled %v, paused %v", got.GetDisabled(), got.GetPaused())
	}
	if n := dlqListCount(t, r, dest); n != 0 {
		t.Fatalf("%d dead letters after resume, want 0", n)
	}
	if e := findAudit(r.auditJSON(t, "--destination", dest), "destination.resume", dest); e == nil || e.GetAuthor() != "bootstrap" || e.GetTokenId() == "" {
		t.Errorf("audit destination.resume of %s: %v", dest, e)
	}
}

// getDestinationJSON runs `rivoractl destinations get ID -o json`.
func getDestinationJSON(t *testing.T, r *rig, id string) *rivorav1.GetDestinationResponse {
	t.Helper()
	out := r.ctl(t, "destinations", "get", id, "-o", "json")
	resp := &rivorav1.GetDestinationResponse{}
	if err := protojson.Unmarshal([]byte(out), resp); err != nil {
		t.Fatalf("destinations get -o json is not a GetDestinationResponse: %v\n%s", err, out)
	}
	return resp
}

// deadLetterCount is how many dead letters `rivoractl dlq list` finds in
// the archive for dest.
func dlqListCount(t *testing.T, r *rig, dest string) int {
	t.Helper()
	out := ctlAt(t, r.ingestURL, "dlq", "list", "--destination", dest, "--limit", "100000", "-o", "json")
	var arr []json.RawMessage
	if err := json.Unmarshal([]byte(out), &arr); err != nil {
		t.Fatalf("dlq list -o json is not a JSON array: %v\n%s", err, out)
	}
	return len(arr)
}

// A 410 while the control plane is down: the agent stops sending at once
// on its own, keeps the report, and the control plane, back on the same
// address and state, disables the destination from it.
func TestCellGoneReportedAfterControlPlaneRestart(t *testing.T) {
	c := startCell(t, cellOptions{Partitions: 4, AgentName: "edge-1"})
	r := c.rig()
	p := newPartner(t)
	p.SetStatus(http.StatusGone)
	r.createDestination(t, "cpdown", p, &rivorav1.Limits{MaxAttempts: 2})
	c.cp.kill9(10 * time.Second)
	pub := newPublished()
	lanes := lanesNamed("acct", 5)
	if err := publishRounds(ctxTimeout(t, time.Minute), r.SDK(), "cpdown", "cust", lanes, 2, pub); err != nil {
		t.Fatal(err)
	}
	poll.True(t, "the partner answered 410 once", 10*time.Second, func() bool { return p.Count() > 0 })
	// Deliberate hold: 2 s without a control plane, and no attempt after
	// the heads already in flight.
	time.Sleep(2 * time.Second)
	if n := p.Count(); n > len(lanes) {
		t.Fatalf("partner got %d requests with the control plane down, want at most %d (one per lane)", n, len(lanes))
	}
	held := p.Count()

	c.cp.start()
	c.cp.waitHealthy(60 * time.Second)
	// List, not get: get also counts pending on the agents, which are
	// reconnecting.
	poll.True(t, "destination disabled from the report sent after the restart", 20*time.Second, func() bool {
		out, _, err := runCtl(r.adminURL, "destinations", "list", "-o", "json")
		var list []struct {
			ID       string `json:"id"`
			Disabled bool   `json:"disabled"`
		}
		return err == nil && json.Unmarshal([]byte(out), &list) == nil && len(list) == 1 && list[0].Disabled
	})
	if e := findAudit(r.auditJSON(t, "--destination", "cpdown"), "destination.disable", "cpdown"); e == nil || e.GetAuthor() != "rivora" {
		t.Fatalf("audit destination.disable: %v", e)
	}
	if n := p.Count(); n != held {
		t.Fatalf("%d more attempts reached the partner while the report was pending", n-held)
	}
	if n := dlqListCount(t, r, "cpdown"); n != 0 {
		t.Fatalf("%d dead letters, want 0", n)
	}
	p.SetHealthy()
	r.ctl(t, "destinations", "resume", "cpdown", "--wait")
	p.WaitDelivered(t, pub.all(), 30*time.Second)
	checkLaneOrder(t, p, pub.ByLane, pub.Payloads, nil)
}
