package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// eventsList runs `rivoractl events list -o json` with args.
func eventsList(t testing.TB, d *devProc, args ...string) *rivorav1.ListEventsResponse {
	t.Helper()
	out := rivoractl(t, d, append([]string{"events", "list", "-o", "json"}, args...)...)
	resp := &rivorav1.ListEventsResponse{}
	if err := protojson.Unmarshal([]byte(out), resp); err != nil {
		t.Fatalf("events list -o json is not a ListEventsResponse: %v\n%s", err, out)
	}
	return resp
}

// waitListed polls events list until it lists want events.
func waitListed(t testing.TB, d *devProc, want int, args ...string) *rivorav1.ListEventsResponse {
	t.Helper()
	var last *rivorav1.ListEventsResponse
	err := poll.Check(20*time.Second, 100*time.Millisecond, func() error {
		if last = eventsList(t, d, args...); len(last.GetEvents()) < want {
			return errNotYet
		}
		return nil
	})
	if err != nil || len(last.GetEvents()) != want {
		t.Fatalf("events list %v: %d events, want %d:\n%v", args, len(last.GetEvents()), want, last)
	}
	return last
}

// resends are the partner's requests carrying rivora-resend: 1.
func resends(p *partner.Partner, id string) []partner.Request {
	var out []partner.Request
	for _, r := range p.Requests() {
		if r.ID == id && r.Resend {
			out = append(out, r)
		}
	}
	return out
}

// Delivered events are listed newest first; one is resent with its own
// webhook-id and rivora-resend: 1, audited; after a restart events get
// and events list still answer from the history.
func TestEventsListAndResendDelivered(t *testing.T) {
	if rivoractlBuild != nil {
		t.Fatalf("rivoractl did not build: %v", rivoractlBuild)
	}
	d := startDev(t, devOptions{})
	p := newPartner(t)
	createDestination(t, d, "evl", p, "", nil)
	ctx := ctxTimeout(t, 2*time.Minute)
	var ids []string
	for i := range 3 {
		id, err := d.SDK().Publish(ctx, sdk.Event{Destination: "evl", Customer: "acme", Lane: "user-1", Type: "order.created", Payload: fmt.Appendf(nil, `{"n":%d}`, i)})
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		ids = append(ids, id)
	}
	p.WaitDelivered(t, ids, 30*time.Second)

	l := waitListed(t, d, 3, "--destination", "evl", "--state", "delivered")
	for i, ev := range l.GetEvents() {
		want := ids[len(ids)-1-i]
		if ev.GetEventId() != want || ev.GetState() != rivorav1.EventState_EVENT_STATE_DELIVERED || ev.GetLastStatus() != 200 ||
			ev.GetAttempts() != 1 || ev.GetType() != "order.created" || ev.GetFinishedAt() == nil {
			t.Fatalf("events list [%d] = %v; want %s delivered (newest first), 1 attempt, status 200", i, ev, want)
		}
	}
	if l := eventsList(t, d, "--destination", "evl", "--state", "dead"); len(l.GetEvents()) != 0 {
		t.Fatalf("events list --state dead = %v, want none", l.GetEvents())
	}

	out := rivoractl(t, d, "events", "resend", ids[0], "--reason", "partner lost it")
	if !strings.Contains(out, "Resent event "+ids[0]) || !strings.Contains(out, "delivered") {
		t.Fatalf("events resend printed %q", out)
	}
	poll.True(t, "the resent event at the partner", 30*time.Second, func() bool { return len(resends(p, ids[0])) == 1 })
	r := resends(p, ids[0])[0]
	if string(r.Payload) != `{"n":0}` || r.Customer != "acme" || r.LaneKey != "user-1" {
		t.Fatalf("resent delivery = %+v; want the original's payload and lane", r)
	}
	if n := p.OK(ids[0]); n != 2 {
		t.Fatalf("partner answered webhook-id %s 2xx %d times, want 2 (original and resend)", ids[0], n)
	}
	var audited *rivorav1.AuditEntry
	for _, e := range devRig(d).auditJSON(t) {
		if e.GetAction() == "event.resend" {
			audited = e
		}
	}
	if audited == nil || audited.GetReason() != "partner lost it" || audited.GetDestinationId() != "evl" || !strings.Contains(audited.GetDetail(), ids[0]) || audited.GetAuthor() == "" {
		t.Fatalf("audit entry for the resend = %v; want event.resend on evl with the reason, the event id and an author", audited)
	}
	// The resend is delivered: listed again, newest, once.
	poll.True(t, "the resend listed newest, truncated at --limit 1", 20*time.Second, func() bool {
		l := eventsList(t, d, "--destination", "evl", "--state", "delivered", "--limit", "1")
		return len(l.GetEvents()) == 1 && l.GetEvents()[0].GetEventId() == ids[0] && l.GetTruncated()
	})
	waitListed(t, d, 3, "--destination", "evl", "--state", "delivered")

	// Resent while the partner fails, an event is pending again: not
	// listed as delivered, which was how it ended before.
	p.SetStatus(http.StatusServiceUnavailable)
	rivoractl(t, d, "events", "resend", ids[2], "--reason", "again")
	poll.True(t, "the resent event failing at the partner", 30*time.Second, func() bool { return len(resends(p, ids[2])) >= 1 })
	for _, ev := range eventsList(t, d, "--destination", "evl", "--state", "delivered").GetEvents() {
		if ev.GetEventId() == ids[2] {
			t.Fatalf("events list --state delivered lists %s, pending again since its resend", ids[2])
		}
	}
	p.SetHealthy()
	waitListed(t, d, 3, "--destination", "evl", "--state", "delivered")

	if _, errOut, err := runRivoractl(d, "events", "resend", "never-accepted", "--reason", "x"); err == nil || !strings.Contains(errOut, "not found") {
		t.Fatalf("events resend of an unknown event: err %v, stderr %q; want a not-found failure", err, errOut)
	}

	// A pending event is listed pending, with its type and its head's last
	// failure, and is not resent: it will be delivered.
	stuck := newPartner(t)
	stuck.SetStatus(http.StatusBadRequest)
	createDestination(t, d, "evp", stuck, "", &rivorav1.Limits{MaxAttempts: 1000})
	pending, err := d.SDK().Publish(ctx, sdk.Event{Destination: "evp", Customer: "acme", Lane: "user-9", Type: "order.stuck", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	poll.True(t, "a failed attempt of the pending event", 30*time.Second, func() bool { return stuck.Sent(pending) >= 1 })
	var pl *rivorav1.EventSummary
	poll.True(t, "the pending event listed with its last failure", 20*time.Second, func() bool {
		l := eventsList(t, d, "--destination", "evp", "--state", "pending")
		if len(l.GetEvents()) != 1 {
			return false
		}
		pl = l.GetEvents()[0]
		return pl.GetLastStatus() == 400
	})
	if pl.GetEventId() != pending || pl.GetType() != "order.stuck" || pl.GetCustomerId() != "acme" || pl.GetLaneKey() != "user-9" || pl.GetAttempts() < 1 {
		t.Fatalf("events list --state pending = %v; want %s, type order.stuck, acme/user-9, its attempts", pl, pending)
	}
	if _, errOut, err := runRivoractl(d, "events", "resend", pending, "--reason", "x"); err == nil || !strings.Contains(errOut, "still pending") {
		t.Fatalf("events resend of a pending event: err %v, stderr %q; want it refused as still pending", err, errOut)
	}

	if err := d.Stop(30 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	d.Restart()
	got := waitEventState(t, d, ids[1], rivorav1.EventState_EVENT_STATE_DELIVERED, 20*time.Second)
	if len(got.GetAttempts()) != 1 || got.GetAttempts()[0].GetStatusCode() != 200 || got.GetLaneKey() != "user-1" {
		t.Fatalf("events get after restart = %v; want delivered, one 200 attempt, lane user-1", got)
	}
	resent := waitEventState(t, d, ids[0], rivorav1.EventState_EVENT_STATE_DELIVERED, 20*time.Second)
	if len(resent.GetAttempts()) != 2 {
		t.Fatalf("events get of the resent event after restart lists %d attempts, want 2 (original and resend)", len(resent.GetAttempts()))
	}
	waitListed(t, d, 3, "--destination", "evl", "--state", "delivered")

	// Two operators resend the same event at once: it is sent again once;
	// the other is refused (already resent, or pending again by then). The
	// destination is paused so the first resend stays pending (delivered
	// at once, it would have ended anew, and a second resend of that new
	// ending is a resend in its own right).
	rivoractl(t, d, "destinations", "pause", "evl", "--reason", "concurrent resends", "--wait")
	errOuts := make(chan string, 2)
	for range 2 {
		go func() {
			_, errOut, err := runRivoractl(d, "events", "resend", ids[1], "--reason", "both of us")
			if err == nil {
				errOut = ""
			}
			errOuts <- errOut
		}()
	}
	refused := 0
	for range 2 {
		if e := <-errOuts; e != "" {
			if !strings.Contains(e, "already resent") && !strings.Contains(e, "still pending") {
				t.Fatalf("the second of two concurrent resends failed with %q; want already resent or still pending", e)
			}
			refused++
		}
	}
	if refused != 1 {
		t.Fatalf("%d of two concurrent resends were refused, want exactly 1", refused)
	}
	rivoractl(t, d, "destinations", "resume", "evl", "--wait")
	poll.True(t, "the concurrently resent event at the partner", 30*time.Second, func() bool { return len(resends(p, ids[1])) >= 1 })
	waitEventState(t, d, ids[1], rivorav1.EventState_EVENT_STATE_DELIVERED, 20*time.Second)
	if n := len(resends(p, ids[1])); n != 1 {
		t.Fatalf("partner got %d resends of %s after two concurrent resend calls, want 1", n, ids[1])
	}
}

// A dead-lettered event is listed dead with its last failure, and a
// resend delivers it from the archive once the partner is back.
func TestEventsResendDeadLetter(t *testing.T) {
	if rivoractlBuild != nil {
		t.Fatalf("rivoractl did not build: %v", rivoractlBuild)
	}
	d := startDev(t, devOptions{})
	p := newPartner(t)
	p.SetStatus(http.StatusBadRequest)
	createDestination(t, d, "evd", p, "", &rivorav1.Limits{MaxAttempts: 2})
	id, err := d.SDK().Publish(ctxTimeout(t, 30*time.Second), sdk.Event{Destination: "evd", Customer: "acme", Lane: "user-2", Type: "order.paid", Payload: []byte(`{"dead":true}`)})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	waitDeadLetter(t, d.DataDir(), "evd", id, 60*time.Second)
	waitEventState(t, d, id, rivorav1.EventState_EVENT_STATE_DEAD, 20*time.Second)

	l := waitListed(t, d, 1, "--destination", "evd", "--state", "dead")
	ev := l.GetEvents()[0]
	if ev.GetEventId() != id || ev.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS || ev.GetAttempts() != 2 || ev.GetLastStatus() != 400 || ev.GetLastError() == "" {
		t.Fatalf("events list --state dead = %v; want %s, max attempts, 2 attempts, last status 400 with its error", ev, id)
	}

	p.SetHealthy()
	out := rivoractl(t, d, "events", "resend", id, "--reason", "partner fixed their bug")
	if !strings.Contains(out, "dead") {
		t.Fatalf("events resend printed %q; want it to say the event was dead", out)
	}
	p.WaitDelivered(t, []string{id}, 30*time.Second)
	if got := resends(p, id); len(got) != 1 || string(got[0].Payload) != `{"dead":true}` {
		t.Fatalf("partner's resent deliveries of %s = %+v; want one with the original payload", id, got)
	}
	got := waitEventState(t, d, id, rivorav1.EventState_EVENT_STATE_DELIVERED, 20*time.Second)
	// Two acceptances: the publish (two tries, dead) and the resend (one
	// try, delivered).
	eps := got.GetEpisodes()
	if len(eps) != 2 || eps[0].GetState() != rivorav1.EventState_EVENT_STATE_DEAD || eps[0].GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS ||
		eps[0].GetFirstTry() != 1 || eps[0].GetLastTry() != 2 || eps[1].GetState() != rivorav1.EventState_EVENT_STATE_DELIVERED || eps[1].GetFirstTry() != 3 ||
		!eps[1].GetAcceptedAt().AsTime().Equal(got.GetAcceptedAt().AsTime()) {
		t.Fatalf("events get of the resent event: episodes %v, accepted %v; want the publish (tries 1–2, dead, max attempts) then the resend (try 3, delivered, the latest acceptance)", eps, got.GetAcceptedAt())
	}
	if out := rivoractl(t, d, "events", "get", id); !strings.Contains(out, "EPISODE") || !strings.Contains(out, "the latest of 2 acceptances") {
		t.Fatalf("events get printed:\n%s\nwant its two acceptances", out)
	}
	// The resend marked its dead letter handled, as a replay does: no
	// replay sends it again, whenever it runs.
	dls, err := dlqList(d, "evd")
	if err != nil || len(dls) != 1 || !dls[0].keys["replayedAt"] {
		t.Fatalf("dlq list after the resend: %+v, %v; want its one dead letter marked replayed", dls, err)
	}
}
