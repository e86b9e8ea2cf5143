package api

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// A customer token resends only its customers' events: another
// customer's answers not_found, as an absent event does, and says nothing
// of where the event is; its own goes on (here: refused as still
// pending, naming its lane). Other roles are not narrowed.
func TestResendEventScopedToACustomersOwnEvents(t *testing.T) {
	sched := scheduler.New(clock.NewManual(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)))
	entry := func(id string) scheduler.Entry { return scheduler.Entry{Seq: 1, EventID: id, AcceptedAt: time.Now()} }
	sched.Restore(0, lanes.ID{Destination: "orders", Customer: "c2", Key: "u1", Subscription: "sub_c2"}, []scheduler.Entry{entry("evt_of_c2")}, scheduler.Head{}, false)
	sched.Restore(0, lanes.ID{Destination: "orders", Customer: "c1", Key: "u1"}, []scheduler.Entry{entry("evt_of_c1")}, scheduler.Head{}, false)
	svc := &eventService{&server{sched: sched}}
	resend := func(p *auth.Principal, id string) error {
		ctx := auth.WithPrincipal(context.Background(), p)
		_, err := svc.ResendEvent(ctx, connect.NewRequest(&rivorav1.ResendEventRequest{EventId: id, Reason: "partner lost it"}))
		return err
	}
	c1 := &auth.Principal{TokenID: "tok_c1", Role: rivorav1.Role_ROLE_CUSTOMER, Customers: []string{"c1"}}
	operator := &auth.Principal{TokenID: "tok_op", Role: rivorav1.Role_ROLE_OPERATOR}

	err := resend(c1, "evt_of_c2")
	if connect.CodeOf(err) != connect.CodeNotFound || err.Error() != auth.EventNotFound("evt_of_c2").Error() {
		t.Fatalf("c1 resending c2's event: %v, want the answer for an absent event", err)
	}
	for _, who := range []*auth.Principal{c1, operator} {
		id := "evt_of_c1"
		if who == operator {
			id = "evt_of_c2"
		}
		if err := resend(who, id); !errors.Is(err, errkind.Precondition) {
			t.Fatalf("%s resending %s: %v, want refused as still pending", who.TokenID, id, err)
		}
	}
}
