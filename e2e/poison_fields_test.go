package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
)

// Issue 22: one publisher's event can never hurt a shared destination. A
// control character in any per-event field either is refused at Publish
// (invalid_argument) or, once accepted, is delivered (escaped where a
// header carries it) or dead-letters as the event's fault; meanwhile
// another customer's 20 events on the same destination arrive within 1 s,
// and the destination's health and current rate never change.
func TestControlCharactersInEventsNeverHurtTheDestination(t *testing.T) {
	d := startDev(t, devOptions{})
	p := newPartner(t)
	createDestination(t, d, "shared", p, "", &rivorav1.Limits{MaxAttempts: 3})
	ingest := d.Ingest()
	ctx := ctxTimeout(t, 3*time.Minute)
	before := destinationHealth(t, d, "shared")

	fields := map[string]func(r *rivorav1.PublishRequest, c string){
		"destination_id":  func(r *rivorav1.PublishRequest, c string) { r.DestinationId = "shared" + c },
		"customer_id":     func(r *rivorav1.PublishRequest, c string) { r.CustomerId = "mallory" + c },
		"lane_key":        func(r *rivorav1.PublishRequest, c string) { r.LaneKey = "m" + c + "x" },
		"type":            func(r *rivorav1.PublishRequest, c string) { r.Type = "order." + c + "created" },
		"content_type":    func(r *rivorav1.PublishRequest, c string) { r.ContentType = `application/json; x="` + c + `"` },
		"content_type/2":  func(r *rivorav1.PublishRequest, c string) { r.ContentType = "text/plain" + c },
		"idempotency_key": func(r *rivorav1.PublishRequest, c string) { r.IdempotencyKey = "k" + c + "1" },
		"data": func(r *rivorav1.PublishRequest, c string) {
			r.Payload, r.Data = nil, structpb.NewStringValue("a"+c+"b")
		},
	}
	controls := []string{"\x00", "\x01", "\x08", "\x0b", "\x1b", "\x1f", "\x7f", "\r", "\n", "\r\n"}
	accepted := map[string]string{} // event id → what it carried
	refused := 0
	for name, set := range fields {
		for i, c := range controls {
			req := &rivorav1.PublishRequest{DestinationId: "shared", CustomerId: "mallory", LaneKey: fmt.Sprintf("m%d", i), Type: "t", Payload: []byte(`{}`)}
			set(req, c)
			what := fmt.Sprintf("%s with %q", name, c)
			resp, err := ingest.Publish(ctx, connect.NewRequest(req))
			switch {
			case err == nil:
				accepted[resp.Msg.GetEventId()] = what
			case connect.CodeOf(err) == connect.CodeInvalidArgument:
				refused++
			default:
				t.Fatalf("%s: %v, want accepted or invalid_argument", what, err)
			}
		}
	}
	t.Logf("%d events refused at Publish, %d accepted", refused, len(accepted))

	// The neighbour.
	start := time.Now()
	var mine []string
	for i := range 20 {
		resp, err := ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{DestinationId: "shared", CustomerId: "acme", LaneKey: fmt.Sprintf("u%d", i%4), Type: "t", Payload: []byte(`{}`)}))
		if err != nil {
			t.Fatalf("the neighbour's publish: %v", err)
		}
		mine = append(mine, resp.Msg.GetEventId())
	}
	p.WaitDelivered(t, mine, 10*time.Second)
	if took := time.Since(start); took > time.Second {
		t.Errorf("the neighbour's 20 events took %v to arrive, want ≤ 1 s", took)
	} else {
		t.Logf("the neighbour's 20 events arrived in %v", took.Round(time.Millisecond))
	}

	// Every accepted event ends delivered or dead by its own fault, while
	// the destination stays healthy at its configured rate.
	settled := map[string]string{}
	poll.True(t, "every accepted event delivered or dead-lettered", time.Minute, func() bool {
		if h := destinationHealth(t, d, "shared"); h.GetState() != "healthy" || h.GetCurrentRate() != before.GetCurrentRate() {
			t.Fatalf("the destination is %s at %g/s (it was %s at %g/s): a publisher's event moved it", h.GetState(), h.GetCurrentRate(), before.GetState(), before.GetCurrentRate())
		}
		for id, what := range accepted {
			if _, ok := settled[id]; ok {
				continue
			}
			resp, err := d.Events().GetEvent(ctx, connect.NewRequest(&rivorav1.GetEventRequest{EventId: id}))
			if err != nil {
				t.Fatalf("GetEvent %s (%s): %v", id, what, err)
			}
			switch ev := resp.Msg; ev.GetState() {
			case rivorav1.EventState_EVENT_STATE_DELIVERED:
				settled[id] = "delivered"
			case rivorav1.EventState_EVENT_STATE_DEAD:
				tries := ev.GetAttempts()
				if ev.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS || len(tries) != 3 {
					t.Fatalf("%s (%s) dead: reason %v after %d attempts; want max attempts after 3, the event's fault", id, what, ev.GetDeadReason(), len(tries))
				}
				settled[id] = "dead: " + tries[len(tries)-1].GetError()
			}
		}
		return len(settled) == len(accepted)
	})
	var kinds []string
	for id, how := range settled {
		kinds = append(kinds, accepted[id]+" → "+how)
	}
	t.Logf("accepted events:\n%s", strings.Join(kinds, "\n"))
	if h := destinationHealth(t, d, "shared"); h.GetState() != "healthy" || h.GetCurrentRate() != before.GetCurrentRate() {
		t.Fatalf("the destination ended %s at %g/s, want healthy at %g/s", h.GetState(), h.GetCurrentRate(), before.GetCurrentRate())
	}
}
