package agent_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/poll"
)

// A forced delete of a subscription while its lane's head is in flight (a
// partner slow to answer), three events on one lane: the answer and the
// audit say that the head was left to its attempt and that the two
// behind it are archived once it ends (they said "0 pending events
// archived", and the two became dead letters uncounted). Then the head
// is delivered, as before, and the two behind become dead letters
// (deleted), each once.
func TestForcedSubscriptionDeleteCountsWhatIsBehindAnAttemptInFlight(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := startAgent(t, dir)
	p := newPartner(t, nil)
	p.SetDelay(3 * time.Second)
	slow := destination("slow", p.URL(), 5)
	slow.Limits.Timeout = durationpb.New(20 * time.Second)
	r.create(slow)
	ctx := context.Background()
	subs := rivorav1connect.NewSubscriptionServiceClient(r.HTTPClient(), r.URL, r.As(r.AdminToken))
	created, err := subs.CreateSubscription(ctx, connect.NewRequest(&rivorav1.CreateSubscriptionRequest{CustomerId: "acme", DestinationId: "slow", Types: []string{"*"}}))
	if err != nil {
		t.Fatal(err)
	}
	r.WaitApplied(created.Msg.GetVersion())
	sub := created.Msg.GetSubscription().GetId()
	var ids []string
	for range 3 {
		resp, err := r.Ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{CustomerId: "acme", LaneKey: "one", Type: "order.created", Payload: []byte(`{}`)}))
		if err != nil || len(resp.Msg.GetRoutes()) != 1 {
			t.Fatalf("publish: %v, %v; want one route", resp, err)
		}
		ids = append(ids, resp.Msg.GetRoutes()[0].GetEventId())
	}
	poll.True(t, "the head sent, its answer held", 10*time.Second, func() bool { return len(p.Requests()) == 1 })

	del, err := subs.DeleteSubscription(ctx, connect.NewRequest(&rivorav1.DeleteSubscriptionRequest{Id: sub, Force: true}))
	if err != nil || del.Msg.GetArchived() != 0 || del.Msg.GetInFlight() != 1 || del.Msg.GetArchivedLater() != 2 {
		t.Fatalf("forced delete with the head in flight: %v, %v; want 0 archived, 1 in flight, 2 archived later", del.Msg, err)
	}
	wantLeftToTheAttempt(t, r, dir, "slow", ids)
	if p.Sent(ids[1])+p.Sent(ids[2]) != 0 {
		t.Fatalf("the events behind the head were sent")
	}
}

// The same for a forced delete of a destination.
func TestForcedDestinationDeleteCountsWhatIsBehindAnAttemptInFlight(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := startAgent(t, dir)
	p := newPartner(t, nil)
	p.SetDelay(3 * time.Second)
	slow := destination("slow", p.URL(), 5)
	slow.Limits.Timeout = durationpb.New(20 * time.Second)
	r.create(slow)
	var ids []string
	for range 3 {
		ids = append(ids, r.publish("slow", "acme", "one"))
	}
	poll.True(t, "the head sent, its answer held", 10*time.Second, func() bool { return len(p.Requests()) == 1 })

	del, err := r.Admin.DeleteDestination(context.Background(), connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: "slow", Force: true}))
	if err != nil || del.Msg.GetArchived() != 0 || del.Msg.GetInFlight() != 1 || del.Msg.GetArchivedLater() != 2 {
		t.Fatalf("forced delete with the head in flight: %v, %v; want 0 archived, 1 in flight, 2 archived later", del.Msg, err)
	}
	wantLeftToTheAttempt(t, r, dir, "slow", ids)
}

// wantLeftToTheAttempt checks what becomes of three events of one lane
// whose head was in flight at a forced delete: the head delivered, the
// two behind it dead letters (deleted), each once, and the audit saying
// so.
func wantLeftToTheAttempt(t *testing.T, r *running, dir, dest string, ids []string) {
	t.Helper()
	r.waitEvent(ids[0], "the head delivered", func(e *rivorav1.GetEventResponse) bool {
		return e.GetState() == rivorav1.EventState_EVENT_STATE_DELIVERED
	})
	for _, id := range ids[1:] {
		e := r.waitEvent(id, "dead", func(e *rivorav1.GetEventResponse) bool { return e.GetState() == rivorav1.EventState_EVENT_STATE_DEAD })
		if e.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_DELETED {
			t.Fatalf("event %s behind the head: %v, want dead (deleted)", id, e)
		}
	}
	var letters []*rivorav1.DeadLetter
	poll.True(t, "2 dead letters archived", 15*time.Second, func() bool {
		_, letters = deadLetters(t, dir, dest)
		return len(letters) >= 2
	})
	var got []string
	for _, dl := range letters {
		got = append(got, dl.GetEvent().GetEventId())
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(ids[1:]))
	if !slices.Equal(got, want) {
		t.Fatalf("dead letters %v, want the two behind the head %v, once each", got, want)
	}
	audit, err := r.Admin.ListAudit(context.Background(), connect.NewRequest(&rivorav1.ListAuditRequest{DestinationId: dest}))
	if err != nil || len(audit.Msg.GetEntries()) == 0 {
		t.Fatalf("audit: %v, %v", audit, err)
	}
	const detail = "0 pending events archived; 1 event in flight left to its attempt (a dead letter too if it fails), 2 pending events queued behind it archived once it ends"
	if last := audit.Msg.GetEntries()[len(audit.Msg.GetEntries())-1]; !strings.HasSuffix(last.GetDetail(), detail) {
		t.Fatalf("audit of the delete: %q, want it to end %q", last.GetDetail(), detail)
	}
}
