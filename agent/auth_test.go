package agent_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// A token the control plane revokes is refused by the agent once the
// feed brings the change: the agent checks its own keys.
func TestRevokedTokenRefusedOnTheAgent(t *testing.T) {
	r := startAgent(t, t.TempDir())
	p := newPartner(t, func(partner.Request) int { return 200 })
	r.create(destination("orders", p.URL(), 3))
	resp, err := r.Tokens.CreateToken(context.Background(), connect.NewRequest(&rivorav1.CreateTokenRequest{Name: "app", Role: rivorav1.Role_ROLE_PUBLISHER, Customers: []string{"acme"}}))
	if err != nil {
		t.Fatal(err)
	}
	r.WaitApplied(resp.Msg.GetVersion())
	ingest := rivorav1connect.NewIngestServiceClient(r.HTTPClient(), r.URL, r.As(resp.Msg.GetToken()))
	publish := func() error {
		_, err := ingest.Publish(context.Background(), connect.NewRequest(&rivorav1.PublishRequest{DestinationId: "orders", CustomerId: "acme", LaneKey: "u1", Type: "t", Payload: []byte(`{}`)}))
		return err
	}
	if err := publish(); err != nil {
		t.Fatalf("publish with the new token: %v", err)
	}
	if _, err := r.Tokens.RevokeToken(context.Background(), connect.NewRequest(&rivorav1.RevokeTokenRequest{Id: resp.Msg.GetTokenInfo().GetId()})); err != nil {
		t.Fatal(err)
	}
	poll.True(t, "the agent refuses the revoked token", 5*time.Second, func() bool {
		return connect.CodeOf(publish()) == connect.CodeUnauthenticated
	})
}

// A publisher scoped to one customer publishes for it, is refused for
// another, and reads only its own customer's events.
func TestPublisherScope(t *testing.T) {
	r := startAgent(t, t.TempDir())
	p := newPartner(t, func(partner.Request) int { return 200 })
	r.create(destination("orders", p.URL(), 3))
	theirs := r.publish("orders", "globex", "u1")
	token := r.Token(rivorav1.Role_ROLE_PUBLISHER, "acme")
	ctx := context.Background()
	ingest := rivorav1connect.NewIngestServiceClient(r.HTTPClient(), r.URL, r.As(token))
	events := rivorav1connect.NewEventServiceClient(r.HTTPClient(), r.URL, r.As(token))
	archive := rivorav1connect.NewArchiveServiceClient(r.HTTPClient(), r.URL, r.As(token))

	mine, err := ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{DestinationId: "orders", CustomerId: "acme", LaneKey: "u1", Type: "t", Payload: []byte(`{}`)}))
	if err != nil {
		t.Fatalf("publish as acme: %v", err)
	}
	_, err = ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{DestinationId: "orders", CustomerId: "globex", LaneKey: "u1", Type: "t", Payload: []byte(`{}`)}))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("publish as globex: %v, want PermissionDenied", err)
	}
	_, err = ingest.PublishBatch(ctx, connect.NewRequest(&rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{
		{DestinationId: "orders", CustomerId: "acme", LaneKey: "u1", Type: "t", Payload: []byte(`{}`)},
		{DestinationId: "orders", CustomerId: "globex", LaneKey: "u1", Type: "t", Payload: []byte(`{}`)},
	}}))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("a batch with a globex event: %v, want PermissionDenied", err)
	}

	// Pending or delivered, the answer names the customer the check reads.
	r.waitEvent(mine.Msg.GetEventId(), "delivered", func(e *rivorav1.GetEventResponse) bool {
		return e.GetState() == rivorav1.EventState_EVENT_STATE_DELIVERED
	})
	r.waitEvent(theirs, "delivered", func(e *rivorav1.GetEventResponse) bool {
		return e.GetState() == rivorav1.EventState_EVENT_STATE_DELIVERED
	})
	if got, err := events.GetEvent(ctx, connect.NewRequest(&rivorav1.GetEventRequest{EventId: mine.Msg.GetEventId()})); err != nil || got.Msg.GetCustomerId() != "acme" {
		t.Fatalf("get my event: %v, %v", got, err)
	}
	// Another customer's event is answered as an absent one: a refusal
	// would tell that the id exists.
	_, err = events.GetEvent(ctx, connect.NewRequest(&rivorav1.GetEventRequest{EventId: theirs}))
	if want := auth.EventNotFound(theirs); connect.CodeOf(err) != connect.CodeNotFound || err.Error() != want.Error() {
		t.Fatalf("get globex's event: %v, want %v (the answer for an absent id)", err, want)
	}

	if _, err := events.ListEvents(ctx, connect.NewRequest(&rivorav1.ListEventsRequest{DestinationId: "orders"})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("list without a customer: %v, want PermissionDenied", err)
	}
	// The history lists an event once its records are flushed.
	var listed []*rivorav1.EventSummary
	poll.True(t, "acme's event listed", 10*time.Second, func() bool {
		list, err := events.ListEvents(ctx, connect.NewRequest(&rivorav1.ListEventsRequest{DestinationId: "orders", CustomerId: "acme"}))
		if err != nil {
			t.Fatal(err)
		}
		listed = list.Msg.GetEvents()
		return len(listed) > 0
	})
	for _, e := range listed {
		if e.GetCustomerId() != "acme" {
			t.Fatalf("acme's list shows %v", e)
		}
	}
	if _, err := archive.ListDeadLetters(ctx, connect.NewRequest(&rivorav1.ListDeadLettersRequest{Filter: &rivorav1.DeadLetterFilter{CustomerId: "globex"}})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("globex's dead letters: %v, want PermissionDenied", err)
	}
	if _, err := archive.ListDeadLetters(ctx, connect.NewRequest(&rivorav1.ListDeadLettersRequest{Filter: &rivorav1.DeadLetterFilter{CustomerId: "acme"}})); err != nil {
		t.Fatalf("acme's dead letters: %v", err)
	}
}

// A customer's own destination takes that customer's events only. To a
// caller limited to other customers, publishing to it answers word for
// word as for an absent destination; an operator is told whose it is.
func TestOwnDestinationTakesOnlyItsCustomersEvents(t *testing.T) {
	r := startAgent(t, t.TempDir())
	p := newPartner(t, func(partner.Request) int { return 200 })
	own := destination("acme-hooks", p.URL(), 3)
	own.OwnerCustomer = "acme"
	r.create(own)
	ctx := context.Background()
	event := func(dest, customer string) *rivorav1.PublishRequest {
		return &rivorav1.PublishRequest{DestinationId: dest, CustomerId: customer, LaneKey: "u1", Type: "t", Payload: []byte(`{}`)}
	}
	as := func(role rivorav1.Role, customer string) rivorav1connect.IngestServiceClient {
		return rivorav1connect.NewIngestServiceClient(r.HTTPClient(), r.URL, r.As(r.Token(role, customer)))
	}
	if _, err := as(rivorav1.Role_ROLE_CUSTOMER, "acme").Publish(ctx, connect.NewRequest(event("acme-hooks", "acme"))); err != nil {
		t.Fatalf("acme publishing to its own destination: %v", err)
	}
	for _, role := range []rivorav1.Role{rivorav1.Role_ROLE_CUSTOMER, rivorav1.Role_ROLE_PUBLISHER} {
		globex := as(role, "globex")
		_, absent := globex.Publish(ctx, connect.NewRequest(event("acme-hooks-absent", "globex")))
		_, err := globex.Publish(ctx, connect.NewRequest(event("acme-hooks", "globex")))
		want := strings.ReplaceAll(absent.Error(), "acme-hooks-absent", "acme-hooks")
		if err == nil || connect.CodeOf(err) != connect.CodeOf(absent) || err.Error() != want {
			t.Errorf("%v for globex publishing to acme's own destination: %v; want the absent destination's answer %q", role, err, want)
		}
		_, err = globex.PublishBatch(ctx, connect.NewRequest(&rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{event("acme-hooks", "globex")}}))
		if err == nil || connect.CodeOf(err) != connect.CodeOf(absent) {
			t.Errorf("%v for globex publishing a batch to acme's own destination: %v; want %v", role, err, connect.CodeOf(absent))
		}
	}
	_, err := r.Ingest.Publish(ctx, connect.NewRequest(event("acme-hooks", "globex")))
	if err == nil || !strings.Contains(err.Error(), `destination "acme-hooks" is customer "acme"'s own`) {
		t.Errorf("the admin publishing globex's event to acme's own destination: %v; want it refused, naming whose it is", err)
	}
}

// The agent's PartitionService takes only the cell token.
func TestPartitionServiceTakesOnlyTheCellToken(t *testing.T) {
	r := startAgent(t, t.TempDir())
	ctx := context.Background()
	req := &rivorav1.ArchivePendingRequest{DestinationId: "orders"}
	admin := rivorav1connect.NewPartitionServiceClient(r.HTTPClient(), r.URL, r.As(r.AdminToken))
	if _, err := admin.ArchivePending(ctx, connect.NewRequest(req)); connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "cell token") {
		t.Fatalf("ArchivePending with the admin token: %v, want PermissionDenied", err)
	}
	anon := rivorav1connect.NewPartitionServiceClient(r.HTTPClient(), r.URL)
	if _, err := anon.CountPending(ctx, connect.NewRequest(&rivorav1.CountPendingRequest{DestinationId: "orders"})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("CountPending without a token: %v, want Unauthenticated", err)
	}
	cell := rivorav1connect.NewPartitionServiceClient(r.HTTPClient(), r.URL, r.As(r.Cell.String()))
	if _, err := cell.CountPending(ctx, connect.NewRequest(&rivorav1.CountPendingRequest{DestinationId: "orders"})); err != nil {
		t.Fatalf("CountPending with the cell token: %v", err)
	}
}

// An agent without keys does not start: it could check no call.
func TestNewNeedsKeys(t *testing.T) {
	_, err := agent.New(context.Background(), agent.Config{Name: "a1", DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "Config.Keys") {
		t.Fatalf("agent.New without keys: %v, want an error naming Config.Keys", err)
	}
}
