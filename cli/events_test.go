package cli

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func (f *fakeRivora) ListEvents(_ context.Context, req *connect.Request[rivorav1.ListEventsRequest]) (*connect.Response[rivorav1.ListEventsResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listed = append(f.listed, proto.Clone(req.Msg).(*rivorav1.ListEventsRequest))
	return connect.NewResponse(&rivorav1.ListEventsResponse{
		Events: []*rivorav1.EventSummary{
			{EventId: "evt-2", DestinationId: "orders", CustomerId: "acme", LaneKey: "user-42", Type: "order.paid", State: rivorav1.EventState_EVENT_STATE_DEAD,
				AcceptedAt: fixedTime, FinishedAt: fixedTime, Attempts: 8, LastStatus: 500, LastError: "HTTP 500", DeadReason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS},
			{EventId: "evt-1", DestinationId: "orders", CustomerId: "acme", LaneKey: "user-42", Type: "order.created", State: rivorav1.EventState_EVENT_STATE_DELIVERED,
				AcceptedAt: fixedTime, FinishedAt: fixedTime, Attempts: 1, LastStatus: 200},
		},
		Truncated:      true,
		SearchedBackTo: fixedTime,
	}), nil
}

func (f *fakeRivora) ResendEvent(_ context.Context, req *connect.Request[rivorav1.ResendEventRequest]) (*connect.Response[rivorav1.ResendEventResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resent = append(f.resent, proto.Clone(req.Msg).(*rivorav1.ResendEventRequest))
	if req.Msg.GetEventId() == "evt-pending" {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("event evt-pending is still pending"))
	}
	return connect.NewResponse(&rivorav1.ResendEventResponse{EventId: req.Msg.GetEventId(), DestinationId: "orders", CustomerId: "acme", LaneKey: "user-42", Was: rivorav1.EventState_EVENT_STATE_DELIVERED}), nil
}

func TestEventsList(t *testing.T) {
	f, url := startFake(t)
	before := time.Now()
	r := mustSucceed(t, run(t, url, "", "events", "list", "--destination", "orders", "--customer", "acme", "--lane", "user-42",
		"--state", "delivered", "--since", "1h", "--until", "2026-12-01T10:00:00Z", "--limit", "5"))
	req := f.listed[0]
	wantUntil := timestamppb.New(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	if req.GetDestinationId() != "orders" || req.GetCustomerId() != "acme" || req.GetLaneKey() != "user-42" || req.GetLimit() != 5 ||
		req.GetState() != rivorav1.EventState_EVENT_STATE_DELIVERED || !proto.Equal(req.GetUntil(), wantUntil) {
		t.Fatalf("ListEvents request = %v", req)
	}
	if since := req.GetSince().AsTime(); since.Before(before.Add(-time.Hour-time.Second)) || since.After(time.Now().Add(-time.Hour)) {
		t.Fatalf("--since 1h sent %v, want an hour ago", since)
	}
	for _, want := range []string{"evt-2", "dead (max attempts)", "HTTP 500", "evt-1", "delivered", "order.created", "more match", "searched back to 2026-03-01T12:00:00.000Z"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("events list output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Index(r.stdout, "evt-2") > strings.Index(r.stdout, "evt-1") {
		t.Fatalf("events list reordered the server's newest-first answer:\n%s", r.stdout)
	}
	r = mustSucceed(t, run(t, url, "", "events", "list", "--destination", "orders", "-o", "json"))
	var got rivorav1.ListEventsResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &got); err != nil || len(got.GetEvents()) != 2 || !got.GetTruncated() {
		t.Fatalf("events list -o json = %v, %v:\n%s", &got, err, r.stdout)
	}
	if !strings.Contains(r.stdout, `"searchedBackTo"`) || !strings.Contains(r.stdout, `"finishedAt"`) {
		t.Fatalf("JSON does not use protojson names:\n%s", r.stdout)
	}
	if f.listed[1].GetState() != rivorav1.EventState_EVENT_STATE_UNSPECIFIED || f.listed[1].GetLimit() != 100 {
		t.Fatalf("default list request = %v, want every state, limit 100", f.listed[1])
	}
	assertFailure(t, run(t, url, "", "events", "list"), exitUsage, "--destination")
	assertFailure(t, run(t, url, "", "events", "list", "--destination", "orders", "--state", "lost"), exitUsage, `--state "lost"`)
	assertFailure(t, run(t, url, "", "events", "list", "--destination", "orders", "--since", "yesterday"), exitUsage, "--since")
	if len(f.listed) != 2 {
		t.Fatalf("%d list requests reached the server; usage errors must not", len(f.listed))
	}
}

func TestEventsResend(t *testing.T) {
	f, url := startFake(t)
	r := mustSucceed(t, run(t, url, "", "events", "resend", "evt-1", "--reason", "partner lost it"))
	if got := f.resent[0]; got.GetEventId() != "evt-1" || got.GetReason() != "partner lost it" || got.GetAuthor() != "" {
		t.Fatalf("ResendEvent request = %v; want evt-1, the reason and no author (the audit names the token)", got)
	}
	for _, want := range []string{"Resent event evt-1", "delivered", "orders", "acme", "user-42", "rivora-resend: 1"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("events resend output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = mustSucceed(t, run(t, url, "", "events", "resend", "evt-1", "--reason", "again", "-o", "json"))
	if !strings.Contains(r.stdout, `"was": "EVENT_STATE_DELIVERED"`) {
		t.Fatalf("events resend -o json:\n%s", r.stdout)
	}
	assertFailure(t, run(t, url, "", "events", "resend", "evt-pending", "--reason", "x"), exitError, "still pending")
	assertFailure(t, run(t, url, "", "events", "resend", "evt-1"), exitUsage, "--reason")
	assertFailure(t, run(t, url, "", "events", "resend", "--reason", "x"), exitUsage, "one event ID")
	if len(f.resent) != 3 {
		t.Fatalf("%d resend requests reached the server; usage errors must not", len(f.resent))
	}
}
