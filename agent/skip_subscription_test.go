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

// lanes skip of a lane that exists only as a subscription's, named
// without --subscription: the refusal names the subscription and says to
// add it (it said "lane has no pending events here" while lanes list
// showed the lane with its SUBSCRIPTION).
func TestSkipNamesTheSubscriptionOfARoutedLane(t *testing.T) {
	t.Parallel()
	r := startAgent(t, t.TempDir())
	p := newPartner(t, func(partner.Request) int { return http.StatusBadRequest })
	r.create(destination("p500", p.URL(), 1000))
	ctx := context.Background()
	created, err := rivorav1connect.NewSubscriptionServiceClient(r.HTTPClient(), r.URL, r.As(r.AdminToken)).CreateSubscription(ctx,
		connect.NewRequest(&rivorav1.CreateSubscriptionRequest{CustomerId: "beta", DestinationId: "p500", Types: []string{"*"}}))
	if err != nil {
		t.Fatal(err)
	}
	r.WaitApplied(created.Msg.GetVersion())
	sub := created.Msg.GetSubscription().GetId()
	if _, err := r.Ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{CustomerId: "beta", LaneKey: "sb", Type: "order.created", Payload: []byte(`{}`)})); err != nil {
		t.Fatal(err)
	}
	poll.True(t, "the routed event pending", 10*time.Second, func() bool {
		n, err := r.Agent.Pending(ctx, "p500")
		return err == nil && n == 1
	})
	lanesAPI := rivorav1connect.NewLaneServiceClient(r.HTTPClient(), r.URL, r.As(r.AdminToken))
	skip := &rivorav1.SkipLaneHeadRequest{DestinationId: "p500", CustomerId: "beta", LaneKey: "sb", Reason: "x"}
	_, err = lanesAPI.SkipLaneHead(ctx, connect.NewRequest(skip))
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "routed by subscription "+sub+": add --subscription "+sub) {
		t.Fatalf("skip without --subscription: %v; want not_found naming subscription %s", err, sub)
	}
	skip.SubscriptionId = sub
	poll.True(t, "the skip with --subscription goes through (once no attempt is out)", 15*time.Second, func() bool {
		_, err := lanesAPI.SkipLaneHead(ctx, connect.NewRequest(skip))
		if err != nil && connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Fatalf("skip with --subscription %s: %v", sub, err)
		}
		return err == nil
	})
}
