package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func (f *fakeRivora) ListEvents(_ context.Context, req *connect.Request[rivorav1.ListEventsRequest]) (*connect.Response[rivorav1.ListEventsResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listed = append(f.listed, proto.Clone(req.Msg).(*rivorav1.ListEventsRequest))
	if req.Msg.GetDestinationId() == "quiet" {
		return connect.NewResponse(&rivorav1.ListEventsResponse{}), nil
	}
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
		"--state", "delivered", "--since", "1h", "--until", "2099-12-01T10:00:00Z", "--limit", "5"))
	req := f.listed[0]
	wantUntil := timestamppb.New(time.Date(2099, 12, 1, 10, 0, 0, 0, time.UTC))
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
	// Days, as --history-retention takes them.
	before = time.Now()
	mustSucceed(t, run(t, url, "", "events", "list", "--destination", "orders", "--since", "2d"))
	if since := f.listed[2].GetSince().AsTime(); since.Before(before.Add(-48*time.Hour-time.Second)) || since.After(time.Now().Add(-48*time.Hour)) {
		t.Fatalf("--since 2d sent %v, want two days ago", since)
	}
	// A dead-letter list asks for 1 to 1000: more is shown as 1000, and
	// says so.
	for _, n := range []string{"0", "-1"} {
		assertFailure(t, run(t, url, "", "dlq", "list", "--limit", n), exitUsage, "--limit "+n+": use 1 to 1000")
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

// events get numbers every try and says which of the event's attempts
// each used, or why none: ten tries of a held event do not all read "1".
func TestEventsGetNumbersTriesAndSaysWhichWereCharged(t *testing.T) {
	f, url := startFake(t)
	f.events["evt-held"] = &rivorav1.GetEventResponse{
		EventId: "evt-held", DestinationId: "orders", CustomerId: "acme", LaneKey: "user-42", Type: "order.created",
		State: rivorav1.EventState_EVENT_STATE_PENDING, AcceptedAt: fixedTime, AttemptsUsed: 1, MaxAttempts: 8,
		Attempts: []*rivorav1.Attempt{
			{Try: 1, Number: 1, At: fixedTime, StatusCode: 400, Error: "HTTP 400", Charged: proto.Bool(true)},
			{Try: 2, Number: 2, At: fixedTime, StatusCode: 503, Error: "HTTP 503", Charged: proto.Bool(false), NotChargedReason: "destination down"},
			{Try: 3, Number: 2, At: fixedTime, StatusCode: 429, Error: "HTTP 429", Charged: proto.Bool(false), NotChargedReason: "destination throttling (429)"},
		},
	}
	r := mustSucceed(t, run(t, url, "", "events", "get", "evt-held"))
	lines := strings.Split(r.stdout, "\n")
	find := func(prefix string) string {
		for _, l := range lines {
			if strings.HasPrefix(l, prefix) {
				return l
			}
		}
		t.Fatalf("no line starting %q in:\n%s", prefix, r.stdout)
		return ""
	}
	for prefix, want := range map[string]string{
		"TRY ": "ATTEMPT", "1 ": "HTTP 400", "2 ": "not charged: destination down", "3 ": "not charged: destination throttling (429)",
		"TRIES ": "3", "ATTEMPTS USED ": "1 of 8",
	} {
		if l := find(prefix); !strings.Contains(l, want) {
			t.Errorf("line %q lacks %q:\n%s", l, want, r.stdout)
		}
	}
	if l := find("1 "); strings.Contains(l, "not charged") || !strings.Contains(l, " 1 ") {
		t.Errorf("the charged try reads %q, want its attempt number 1", l)
	}
	r = mustSucceed(t, run(t, url, "", "events", "get", "evt-held", "-o", "json"))
	for _, want := range []string{`"try": 2`, `"charged": false`, `"notChargedReason": "destination down"`, `"try": 1`, `"charged": true`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("events get -o json lacks %s:\n%s", want, r.stdout)
		}
	}

	// A record from before Rivora recorded it: the number it was sent
	// as, marked unknown; tries numbered by position when the server
	// does not number them.
	f.events["evt-old"] = &rivorav1.GetEventResponse{EventId: "evt-old", State: rivorav1.EventState_EVENT_STATE_DELIVERED,
		Attempts: []*rivorav1.Attempt{{Number: 1, At: fixedTime, StatusCode: 503}, {Number: 1, At: fixedTime, StatusCode: 200}}}
	r = mustSucceed(t, run(t, url, "", "events", "get", "evt-old"))
	lines = strings.Split(r.stdout, "\n")
	if l := find("2 "); !strings.Contains(l, "1?") {
		t.Errorf("an old record's try 2 reads %q, want its number with a ?:\n%s", l, r.stdout)
	}
}

// A replayed event lists each acceptance with its tries and how it ended.
func TestEventsGetListsEachAcceptance(t *testing.T) {
	f, url := startFake(t)
	later := timestamppb.New(fixedTime.AsTime().Add(time.Hour))
	f.events["evt-replayed"] = &rivorav1.GetEventResponse{
		EventId: "evt-replayed", DestinationId: "orders", CustomerId: "acme", LaneKey: "user-42", Type: "order.created",
		State: rivorav1.EventState_EVENT_STATE_DELIVERED, AcceptedAt: later,
		Attempts: []*rivorav1.Attempt{
			{Try: 1, Number: 1, At: fixedTime, StatusCode: 500, Error: "HTTP 500"},
			{Try: 2, Number: 2, At: fixedTime, StatusCode: 500, Error: "HTTP 500"},
			{Try: 3, Number: 1, At: later, StatusCode: 200},
		},
		Episodes: []*rivorav1.Episode{
			{AcceptedAt: fixedTime, State: rivorav1.EventState_EVENT_STATE_DEAD, DeadReason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS, FirstTry: 1, LastTry: 2},
			{AcceptedAt: later, State: rivorav1.EventState_EVENT_STATE_DELIVERED, FirstTry: 3, LastTry: 3},
		},
	}
	out := mustSucceed(t, run(t, url, "", "events", "get", "evt-replayed")).stdout
	for _, want := range []string{"the latest of 2 acceptances", "EPISODE", "1–2", "dead (max attempts)", "delivered"} {
		if !strings.Contains(out, want) {
			t.Errorf("events get lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "ACCEPTED") != 2 { // the field and the column
		t.Errorf("ACCEPTED shown %d times:\n%s", strings.Count(out, "ACCEPTED"), out)
	}
}

// A dead event whose dead letter is still in the ledger (the archive
// down) says so: it read only "dead", while dlq list and replay failed on
// the archive.
func TestEventsGetSaysADeadLetterIsNotArchivedYet(t *testing.T) {
	f, url := startFake(t)
	f.events["evt-dead"] = &rivorav1.GetEventResponse{EventId: "evt-dead", DestinationId: "orders", State: rivorav1.EventState_EVENT_STATE_DEAD,
		DeadReason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS, DeadLetterUnarchived: true}
	f.events["evt-archived"] = &rivorav1.GetEventResponse{EventId: "evt-archived", DestinationId: "orders", State: rivorav1.EventState_EVENT_STATE_DEAD,
		DeadReason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS}
	want := "not yet: dead letter kept in the ledger until the archive is reachable"
	if out := mustSucceed(t, run(t, url, "", "events", "get", "evt-dead")).stdout; !strings.Contains(out, "ARCHIVED") || !strings.Contains(out, want) {
		t.Errorf("events get of a dead letter not archived yet lacks %q:\n%s", want, out)
	}
	if out := mustSucceed(t, run(t, url, "", "events", "get", "evt-dead", "-o", "json")).stdout; !strings.Contains(out, `"deadLetterUnarchived": true`) {
		t.Errorf("events get -o json lacks deadLetterUnarchived:\n%s", out)
	}
	if out := mustSucceed(t, run(t, url, "", "events", "get", "evt-archived")).stdout; strings.Contains(out, "ARCHIVED") {
		t.Errorf("events get of an archived dead letter says it is not:\n%s", out)
	}
}

// An empty list keeps its JSON shape: {"events": []}, not {}.
func TestEventsListEmptyJSON(t *testing.T) {
	_, url := startFake(t)
	r := mustSucceed(t, run(t, url, "", "events", "list", "--destination", "quiet", "-o", "json"))
	var got map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("events list -o json: %v\n%s", err, r.stdout)
	}
	if events, ok := got["events"].([]any); !ok || len(events) != 0 {
		t.Fatalf("events list -o json of nothing = %s, want {\"events\": []}", r.stdout)
	}
}

func TestAttemptDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		20011870 * time.Nanosecond:   "20ms",
		1000557063 * time.Nanosecond: "1.001s",
		412345 * time.Nanosecond:     "412µs",
		2500 * time.Millisecond:      "2.5s",
	} {
		if got := attemptDuration(durationpb.New(d)); got != want {
			t.Errorf("attemptDuration(%v) = %q, want %q", d, got, want)
		}
	}
	if attemptDuration(nil) != "-" {
		t.Error("attemptDuration(nil) is not -")
	}
}
