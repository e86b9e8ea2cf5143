package agent_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// A poison head shows as a stuck lane; skipping it makes it a dead letter
// (reason manual), audited, and the lane's next event is delivered.
func TestLanesListAndSkip(t *testing.T) {
	r := startAgent(t, t.TempDir())
	var first string // the partner's lock guards it
	p := newPartner(t, func(req partner.Request) int {
		if req.LaneKey == "u1" && first == "" {
			first = req.ID
		}
		if req.ID == first {
			return 400 // the lane's first event is poison
		}
		return 200
	})
	r.create(destination("orders", p.URL(), 100))
	poison := r.publish("orders", "acme", "u1")
	next := r.publish("orders", "acme", "u1")
	other := r.publish("orders", "zeta", "u2")
	lanesAPI := rivorav1connect.NewLaneServiceClient(r.HTTPClient(), r.URL, r.As(r.AdminToken))
	ctx := context.Background()

	var stuck *rivorav1.ListLanesResponse
	poll.True(t, "the poison lane is stuck", 15*time.Second, func() bool {
		resp, err := lanesAPI.ListLanes(ctx, connect.NewRequest(&rivorav1.ListLanesRequest{DestinationId: "orders", Stuck: true}))
		if err != nil {
			t.Fatalf("ListLanes: %v", err)
		}
		stuck = resp.Msg
		// Depth 2 once next is in the lane too: events accepted just
		// after the partition opened reach their lanes through INGEST,
		// and poison can fail before next is moved in.
		return len(stuck.GetLanes()) == 1 && stuck.GetLanes()[0].GetLastStatus() == 400 && stuck.GetLanes()[0].GetDepth() == 2
	})
	l := stuck.GetLanes()[0]
	if l.GetCustomerId() != "acme" || l.GetLaneKey() != "u1" || l.GetDepth() != 2 || l.GetHeadEventId() != poison || l.GetHeadAttempts() < 1 || l.GetHeadSince() == nil || stuck.GetMatched() != 1 {
		t.Fatalf("stuck lane = %v (matched %d)", l, stuck.GetMatched())
	}
	poll.True(t, "the other lane delivered", 10*time.Second, func() bool { return slices.Contains(p.DeliveredByLane()["u2"], other) })

	skip := &rivorav1.SkipLaneHeadRequest{DestinationId: "orders", CustomerId: "acme", LaneKey: "u1", Reason: "poison payload", Author: "alice", HeadEventId: "not-the-head"}
	if _, err := lanesAPI.SkipLaneHead(ctx, connect.NewRequest(skip)); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("skip of a head that moved: %v, want FailedPrecondition", err)
	}
	skip.HeadEventId = poison
	var resp *connect.Response[rivorav1.SkipLaneHeadResponse]
	poll.True(t, "the head is skipped between its attempts", 10*time.Second, func() bool {
		var err error
		resp, err = lanesAPI.SkipLaneHead(ctx, connect.NewRequest(skip))
		if err != nil && connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Fatalf("SkipLaneHead: %v", err)
		}
		return err == nil
	})
	if resp.Msg.GetEventId() != poison || resp.Msg.GetRemaining() != 1 {
		t.Fatalf("skip = %v, want %s with 1 remaining", resp.Msg, poison)
	}
	poll.True(t, "the next event delivered", 10*time.Second, func() bool { return slices.Contains(p.DeliveredByLane()["u1"], next) })
	r.waitEvent(poison, "dead (manual)", func(e *rivorav1.GetEventResponse) bool {
		return e.GetState() == rivorav1.EventState_EVENT_STATE_DEAD && e.GetDeadReason() == rivorav1.DeadReason_DEAD_REASON_MANUAL
	})
	audit, err := r.Admin.ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{DestinationId: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(audit.Msg.GetEntries(), func(e *rivorav1.AuditEntry) bool { return e.GetAction() == "lane.skip" })
	if i < 0 {
		t.Fatalf("no lane.skip in the audit log: %v", audit.Msg.GetEntries())
	}
	// The token's name, whatever the request's author says.
	if e := audit.Msg.GetEntries()[i]; e.GetAuthor() != "bootstrap" || !strings.HasPrefix(e.GetTokenId(), "tok_") || e.GetReason() != "poison payload" {
		t.Fatalf("audit entry = %v, want author bootstrap (the token), its token id", e)
	}
	if _, err := lanesAPI.SkipLaneHead(ctx, connect.NewRequest(skip)); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("skip of a drained lane: %v, want NotFound", err)
	}
}

func TestLaneServiceRefusesBadRequests(t *testing.T) {
	r := startAgent(t, t.TempDir())
	r.create(destination("orders", "http://127.0.0.1:1", 3))
	lanesAPI := rivorav1connect.NewLaneServiceClient(r.HTTPClient(), r.URL, r.As(r.AdminToken))
	ctx := context.Background()
	lists := []struct {
		req  *rivorav1.ListLanesRequest
		code connect.Code
	}{
		{&rivorav1.ListLanesRequest{}, connect.CodeInvalidArgument},
		{&rivorav1.ListLanesRequest{DestinationId: "orders", Limit: 10001}, connect.CodeInvalidArgument},
		{&rivorav1.ListLanesRequest{DestinationId: "orders", Limit: -1}, connect.CodeInvalidArgument},
		{&rivorav1.ListLanesRequest{DestinationId: "orders", CustomerId: "a.b"}, connect.CodeInvalidArgument},
		{&rivorav1.ListLanesRequest{DestinationId: "nope"}, connect.CodeNotFound},
	}
	for _, c := range lists {
		if _, err := lanesAPI.ListLanes(ctx, connect.NewRequest(c.req)); connect.CodeOf(err) != c.code {
			t.Errorf("ListLanes(%v): %v, want %v", c.req, err, c.code)
		}
	}
	ok := &rivorav1.SkipLaneHeadRequest{DestinationId: "orders", CustomerId: "acme", LaneKey: "u1", Reason: "r", Author: "a"}
	skips := []struct {
		edit func(*rivorav1.SkipLaneHeadRequest)
		code connect.Code
	}{
		{func(m *rivorav1.SkipLaneHeadRequest) { m.Reason = "" }, connect.CodeInvalidArgument},
		{func(m *rivorav1.SkipLaneHeadRequest) { m.CustomerId = "" }, connect.CodeInvalidArgument},
		{func(m *rivorav1.SkipLaneHeadRequest) { m.LaneKey = "" }, connect.CodeInvalidArgument},
		{func(m *rivorav1.SkipLaneHeadRequest) { m.HeadEventId = "a b" }, connect.CodeInvalidArgument},
		{func(m *rivorav1.SkipLaneHeadRequest) { m.DestinationId = "nope" }, connect.CodeNotFound},
		{func(*rivorav1.SkipLaneHeadRequest) {}, connect.CodeNotFound}, // nothing pending in that lane
	}
	for _, c := range skips {
		m := &rivorav1.SkipLaneHeadRequest{DestinationId: ok.DestinationId, CustomerId: ok.CustomerId, LaneKey: ok.LaneKey, Reason: ok.Reason, Author: ok.Author}
		c.edit(m)
		if _, err := lanesAPI.SkipLaneHead(ctx, connect.NewRequest(m)); connect.CodeOf(err) != c.code {
			t.Errorf("SkipLaneHead(%v): %v, want %v", m, err, c.code)
		}
	}
}
