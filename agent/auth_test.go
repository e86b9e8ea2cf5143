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

	// A token of one customer lists that customer's without naming it.
	if list, err := events.ListEvents(ctx, connect.NewRequest(&rivorav1.ListEventsRequest{DestinationId: "orders"})); err != nil {
		t.Fatalf("list without a customer: %v, want acme's", err)
	} else {
		for _, e := range list.Msg.GetEvents() {
			if e.GetCustomerId() != "acme" {
				t.Fatalf("acme's token, listing without a customer, is shown %v", e)
			}
		}
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

// replayRefused is what a replay of filter answers the caller of
// archive: a dry run's Refused, and the replay's error (nil when it ran).
func replayRefused(t *testing.T, archive rivorav1connect.ArchiveServiceClient, filter *rivorav1.DeadLetterFilter) (refused string, err error) {
	t.Helper()
	for _, dry := range []bool{false, true} {
		stream, e := archive.Replay(context.Background(), connect.NewRequest(&rivorav1.ReplayRequest{Filter: filter, DryRun: dry}))
		if e == nil {
			for stream.Receive() {
				if dry && refused == "" {
					refused = stream.Msg().GetRefused()
				}
			}
			e = stream.Err()
			stream.Close()
		}
		if !dry {
			err = e
		} else if e != nil {
			t.Fatalf("dry run of %v: %v", filter, e)
		}
	}
	return refused, err
}

// A replay by a customer token naming another customer's own destination
// answers word for word as one naming a destination that does not exist,
// dry run included; an operator is told whose destination it is, in a
// well-formed sentence, and a replay of it for no customer is just empty.
func TestReplayAnswersAnotherCustomersDestinationAsAbsent(t *testing.T) {
	r := startAgent(t, t.TempDir())
	p := newPartner(t, func(partner.Request) int { return 200 })
	own := destination("acme-down", p.URL(), 3)
	own.OwnerCustomer = "acme"
	r.create(own)
	beta := rivorav1connect.NewArchiveServiceClient(r.HTTPClient(), r.URL, r.As(r.Token(rivorav1.Role_ROLE_CUSTOMER, "beta")))
	admin := rivorav1connect.NewArchiveServiceClient(r.HTTPClient(), r.URL, r.As(r.AdminToken))

	absentRefused, absent := replayRefused(t, beta, &rivorav1.DeadLetterFilter{DestinationId: "nonexist", CustomerId: "beta"})
	refused, err := replayRefused(t, beta, &rivorav1.DeadLetterFilter{DestinationId: "acme-down", CustomerId: "beta"})
	if absent == nil || !strings.Contains(absent.Error(), `destination "nonexist" is not registered`) {
		t.Fatalf("beta replaying an absent destination: %v; want refused as not registered", absent)
	}
	want := strings.ReplaceAll(absent.Error(), "nonexist", "acme-down")
	if err == nil || connect.CodeOf(err) != connect.CodeOf(absent) || err.Error() != want {
		t.Errorf("beta replaying acme's own destination: %v; want the absent destination's answer %q", err, want)
	}
	if want := strings.ReplaceAll(absentRefused, "nonexist", "acme-down"); absentRefused == "" || refused != want {
		t.Errorf("beta's dry run on acme's own destination refused %q; want the absent destination's %q", refused, want)
	}

	_, err = replayRefused(t, admin, &rivorav1.DeadLetterFilter{DestinationId: "acme-down", CustomerId: "beta"})
	if err == nil || !strings.Contains(err.Error(), `destination "acme-down" is customer "acme"'s own`) || !strings.Contains(err.Error(), `customer "beta"`) ||
		strings.Contains(err.Error(), `customer ""`) || strings.Contains(err.Error(), "event  ") {
		t.Errorf("the admin replaying beta's dead letters of acme's own destination: %v; want refused, naming whose it is, well formed", err)
	}
	if refused, err := replayRefused(t, admin, &rivorav1.DeadLetterFilter{DestinationId: "acme-down"}); err != nil || refused != "" {
		t.Errorf("the admin replaying acme's own destination, nothing archived: %v, refused %q; want an empty replay", err, refused)
	}
}

// events resend by a customer token: another customer's event answers
// word for word as an absent event, and its own event whose destination
// id another customer now owns answers word for word as one whose
// destination is gone. An operator is told whose destination it is.
func TestResendAnswersOthersEventsAndDestinationsAsAbsent(t *testing.T) {
	r := startAgent(t, t.TempDir())
	p := newPartner(t, func(partner.Request) int { return 200 })
	ctx := context.Background()
	for _, id := range []string{"acme-tmp", "acme-gone"} {
		d := destination(id, p.URL(), 3)
		d.OwnerCustomer = "acme"
		r.create(d)
	}
	tmpEvent, goneEvent := r.publish("acme-tmp", "acme", "u1"), r.publish("acme-gone", "acme", "u1")
	for _, id := range []string{tmpEvent, goneEvent} {
		r.waitEvent(id, "delivered", func(e *rivorav1.GetEventResponse) bool {
			return e.GetState() == rivorav1.EventState_EVENT_STATE_DELIVERED
		})
	}
	events := func(token string) rivorav1connect.EventServiceClient {
		return rivorav1connect.NewEventServiceClient(r.HTTPClient(), r.URL, r.As(token))
	}
	resend := func(c rivorav1connect.EventServiceClient, id string) error {
		_, err := c.ResendEvent(ctx, connect.NewRequest(&rivorav1.ResendEventRequest{EventId: id, Reason: "test"}))
		return err
	}
	acme, beta := events(r.Token(rivorav1.Role_ROLE_CUSTOMER, "acme")), events(r.Token(rivorav1.Role_ROLE_CUSTOMER, "beta"))

	const absentID = "01900000-0000-7000-8000-0000000000ff"
	absent := resend(beta, absentID)
	err := resend(beta, tmpEvent)
	if want := strings.ReplaceAll(absent.Error(), absentID, tmpEvent); connect.CodeOf(absent) != connect.CodeNotFound || connect.CodeOf(err) != connect.CodeNotFound || err.Error() != want {
		t.Errorf("beta resending acme's event: %v; want the absent event's answer %q (absent: %v)", err, want, absent)
	}

	// acme-gone is deleted; acme-tmp is deleted and created again as beta's.
	for _, id := range []string{"acme-tmp", "acme-gone"} {
		if _, err := r.Admin.DeleteDestination(ctx, connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: id})); err != nil {
			t.Fatal(err)
		}
	}
	again := destination("acme-tmp", p.URL(), 3)
	again.OwnerCustomer = "beta"
	r.create(again)
	gone := resend(acme, goneEvent)
	err = resend(acme, tmpEvent)
	want := strings.NewReplacer(goneEvent, tmpEvent, "acme-gone", "acme-tmp").Replace(gone.Error())
	if gone == nil || err == nil || connect.CodeOf(err) != connect.CodeOf(gone) || err.Error() != want {
		t.Errorf("acme resending its event to acme-tmp, now beta's: %v; want the answer for a deleted destination %q", err, want)
	}
	if err := resend(r.Events, tmpEvent); err == nil || !strings.Contains(err.Error(), `destination "acme-tmp" is customer "beta"'s own`) {
		t.Errorf("the admin resending acme's event to acme-tmp, now beta's: %v; want refused, naming whose it is", err)
	}
}

// Listing one subscription's events, lanes or dead letters with a
// customer token: another customer's subscription answers word for word
// as a subscription that does not exist (not_found); its own with nothing
// to list answers an empty list. An admin is answered an empty list for
// either.
func TestListsAnswerAnotherCustomersSubscriptionAsAbsent(t *testing.T) {
	r := startAgent(t, t.TempDir())
	p := newPartner(t, func(partner.Request) int { return 200 })
	r.create(destination("orders", p.URL(), 3))
	ctx := context.Background()
	created, err := rivorav1connect.NewSubscriptionServiceClient(r.HTTPClient(), r.URL, r.As(r.AdminToken)).CreateSubscription(ctx,
		connect.NewRequest(&rivorav1.CreateSubscriptionRequest{CustomerId: "acme", DestinationId: "orders", Types: []string{"*"}}))
	if err != nil {
		t.Fatal(err)
	}
	r.WaitApplied(created.Msg.GetVersion())
	acmeSub := created.Msg.GetSubscription().GetId()
	const absentSub = "sub_00000000000000ff"

	// list calls the three listings as token, for customer and
	// subscription, and returns their errors.
	list := func(token, customer, sub string) []error {
		as := r.As(token)
		_, events := rivorav1connect.NewEventServiceClient(r.HTTPClient(), r.URL, as).ListEvents(ctx, connect.NewRequest(&rivorav1.ListEventsRequest{DestinationId: "orders", CustomerId: customer, SubscriptionId: sub}))
		_, lanes := rivorav1connect.NewLaneServiceClient(r.HTTPClient(), r.URL, as).ListLanes(ctx, connect.NewRequest(&rivorav1.ListLanesRequest{DestinationId: "orders", CustomerId: customer, SubscriptionId: sub}))
		archive := rivorav1connect.NewArchiveServiceClient(r.HTTPClient(), r.URL, as)
		filter := &rivorav1.DeadLetterFilter{CustomerId: customer, SubscriptionId: sub}
		_, stats := archive.DeadLetterStats(ctx, connect.NewRequest(&rivorav1.DeadLetterStatsRequest{Filter: filter}))
		_, dlq := archive.ListDeadLetters(ctx, connect.NewRequest(&rivorav1.ListDeadLettersRequest{Filter: filter}))
		return []error{events, lanes, stats, dlq}
	}
	calls := []string{"ListEvents", "ListLanes", "DeadLetterStats", "ListDeadLetters"}
	beta := r.Token(rivorav1.Role_ROLE_CUSTOMER, "beta")
	absent, others := list(beta, "beta", absentSub), list(beta, "beta", acmeSub)
	for i, call := range calls {
		if connect.CodeOf(absent[i]) != connect.CodeNotFound || !strings.Contains(absent[i].Error(), `subscription "`+absentSub+`" does not exist`) {
			t.Errorf("%s of an absent subscription: %v; want not_found saying it does not exist", call, absent[i])
			continue
		}
		want := strings.ReplaceAll(absent[i].Error(), absentSub, acmeSub)
		if others[i] == nil || others[i].Error() != want {
			t.Errorf("%s by beta of acme's subscription: %v; want the absent subscription's answer %q", call, others[i], want)
		}
	}
	for i, err := range list(r.Token(rivorav1.Role_ROLE_CUSTOMER, "acme"), "acme", acmeSub) {
		if err != nil {
			t.Errorf("%s by acme of its own subscription, nothing to list: %v; want an empty list", calls[i], err)
		}
	}
	for _, sub := range []string{acmeSub, absentSub} {
		for i, err := range list(r.AdminToken, "", sub) {
			if err != nil {
				t.Errorf("%s by the admin of %s: %v; want an empty list", calls[i], sub, err)
			}
		}
	}
}
