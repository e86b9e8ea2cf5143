package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"
	"google.golang.org/protobuf/types/known/durationpb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func (e *env) eventsCommand() *ucli.Command {
	return &ucli.Command{
		Name:    "events",
		Aliases: []string{"event"},
		Usage:   "follow events: where is my event, what was delivered; send one again",
		Description: `Answers where an accepted event is: pending in its lane, in flight,
delivered, or dead (archived after its attempts or window ran out), with every
delivery attempt.

   rivoractl events get 0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b
   rivoractl events list --destination orders --state delivered --since 1h
   rivoractl events resend 0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b --reason "partner lost it"`,
		Action: parentAction,
		Subcommands: []*ucli.Command{
			{
				Name:      "get",
				Usage:     "show an event's state and delivery attempts",
				ArgsUsage: "EVENT_ID",
				UsageText: "rivoractl events get EVENT_ID [-o json]",
				Description: `Shows the event's state, its destination, customer and lane, when it was
accepted, every try (its number, the attempt it used or why it used none,
time, HTTP status, duration, error), the next attempt and how many events
are ahead of it in its lane while pending, and why it died when dead.
EVENT_ID is what publish printed.

An event replayed or resent was accepted more than once: EPISODE lists
each acceptance, oldest first, with its tries and how it ended (ACCEPTED
and STATE are the latest one's). Each has its own max attempts, so
ATTEMPT starts at 1 again in each. -o json has them as episodes
(acceptedAt, state, deadReason, firstTry, lastTry), absent for an event
accepted once.

Each try sent has its own number (TRY). ATTEMPT is the one of the event's
max attempts it used, or "not charged: destination down" (or throttling
(429), gone (410)) for one that used none; -o json has them as try, number,
charged and notChargedReason on each of attempts. Records written before
Rivora recorded whether a try was charged show its number with a "?".

A dead event whose dead letter is not in the archive yet (it cannot be
reached) reads ARCHIVED not yet (deadLetterUnarchived in -o json): it is
kept in the ledger, where dlq list and dlq show find it meanwhile (marked
so); replay finds it once the archive is back.

While pending, WAITING says why it is not being delivered now, e.g.
   held: destination parked since 2026-12-01T09:12:03Z; 2 of 8 attempts used
   due since 2026-12-01T09:12:05Z (retry after HTTP 429): waiting for its destination's budget and its customer's turn; 1 of 8 attempts used
"Held" is a pause, a partner's Retry-After, or a parked destination (it
goes once a probe gets through); NEXT ATTEMPT is shown only while a time
is ahead (its retry time, or the Retry-After's end).
Failures that may be the destination's (connection errors, timeouts, 429,
any 5xx, 408/409/425) while it is down or throttling use no attempt: the
event waits for its destination until WINDOW ENDS, then it is a dead letter
(reason window); on a destination that answers 2xx to other lanes they use
one attempt each, as other 4xx always do.

Example:
   rivoractl events get 0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b -o json`,
				Action: e.getEvent,
			},
			{
				Name:      "list",
				Usage:     "list a destination's events, newest first: pending, delivered, dead",
				UsageText: "rivoractl events list --destination D [--customer C] [--lane L] [--subscription ID] [--state pending|in-flight|delivered|dead] [--since T] [--until T] [--limit N] [-o json]",
				Description: `Pending events (in flight included) come from their lanes, ordered by when
they were accepted; delivered and dead events come from the history, ordered
by when they were delivered or dead-lettered, and are kept for
--history-retention (7 days by default). --since and --until bound those
times; the history search reads at most 1M records (newest first): when it
stops before --since the listing says how far back it searched, and a
narrower --since/--until or filter searches further.

Examples:
   rivoractl events list --destination orders --state delivered --since 1h
   rivoractl events list --destination orders --customer acme --lane user_1 -o json

-o json prints the ListEventsResponse: events (eventId, destinationId,
customerId, laneKey, type, state, acceptedAt, attempts, lastStatus,
lastError, deadReason, finishedAt, subscriptionId), truncated, searchedBackTo.`,
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "destination", Usage: "destination `ID` (required)"},
					&ucli.StringFlag{Name: "customer", Usage: "only events of customer `ID`"},
					&ucli.StringFlag{Name: "lane", Usage: "only events of lane `KEY` (needs --customer)"},
					&ucli.StringFlag{Name: "subscription", Usage: "only events routed by subscription `ID`"},
					&ucli.StringFlag{Name: "state", Usage: "only `STATE` events: pending (in flight included), in-flight, delivered or dead"},
					&ucli.StringFlag{Name: "since", Usage: "only events accepted (pending) or finished (delivered, dead) at or after `TIME` (RFC 3339, or a duration ago such as 2h)"},
					&ucli.StringFlag{Name: "until", Usage: "only those at or before `TIME` (RFC 3339, or a duration ago)"},
					&ucli.IntFlag{Name: "limit", Value: 100, Usage: "show at most `N` (1–1000)"},
				},
				Action: e.listEvents,
			},
			{
				Name:      "resend",
				Usage:     "deliver a delivered or dead-lettered event again",
				ArgsUsage: "EVENT_ID",
				UsageText: "rivoractl events resend EVENT_ID --reason TEXT [-o json]",
				Description: `Accepts the event again at the tail of its lane, with the same event id (the
webhook-id receivers dedupe on) and the header rivora-resend: 1, so a
receiver that already processed it can tell a deliberate resend. A delivered
event is resent as it was delivered (the history keeps it for
--history-retention); a dead one from the dead-letter archive. A pending
event is refused: it will be delivered; so is an event whose subscription
was deleted (it could not be delivered as that subscription would have). Audited as event.resend with the
reason; the audit names your token.

Example:
   rivoractl events resend 0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b --reason "partner lost it in their outage"`,
				Flags:  []ucli.Flag{&ucli.StringFlag{Name: "reason", Usage: "why, for the audit log (required)"}},
				Action: e.resendEvent,
			},
		},
	}
}

func (e *env) listEvents(c *ucli.Context) error {
	if err := exactArgs(c, 0, "no arguments (filters are flags)"); err != nil {
		return err
	}
	limit, err := limitFlag(c, 1000)
	if err != nil {
		return err
	}
	req := &rivorav1.ListEventsRequest{DestinationId: c.String("destination"), CustomerId: c.String("customer"), LaneKey: c.String("lane"),
		SubscriptionId: c.String("subscription"), Limit: limit}
	if req.DestinationId == "" {
		return usagef("events list needs --destination ID: events are listed per destination")
	}
	if req.State, err = parseState(c.String("state")); err != nil {
		return err
	}
	if req.Since, req.Until, err = sinceUntil(c, false); err != nil {
		return err
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.events().ListEvents(ctx, connect.NewRequest(req))
	if err != nil {
		return callFailed("list events", err, nil)
	}
	if e.output == "json" {
		return writeJSONWith(e.out, resp.Msg, map[string]any{"events": []any{}})
	}
	return e.printEvents(resp.Msg)
}

func (e *env) printEvents(l *rivorav1.ListEventsResponse) error {
	if len(l.GetEvents()) == 0 {
		fmt.Fprintln(e.out, "No events match.")
	} else {
		// An event routed by a subscription is also the subscription's
		// (fan-out: one per subscription): its column appears when some
		// event has one, as in lanes list.
		bySubscription := slices.ContainsFunc(l.GetEvents(), func(ev *rivorav1.EventSummary) bool { return ev.GetSubscriptionId() != "" })
		t := newTable(e.out)
		t.row("EVENT\tSTATE\t")
		if bySubscription {
			t.row("SUBSCRIPTION\t")
		}
		t.row("CUSTOMER\tLANE\tTYPE\tACCEPTED\tFINISHED\tATTEMPTS\tLAST STATUS\tLAST ERROR\n")
		for _, ev := range l.GetEvents() {
			state := stateName(ev.GetState())
			if ev.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_UNSPECIFIED {
				state += " (" + deadReasonName(ev.GetDeadReason()) + ")"
			}
			t.row("%s\t%s\t", ev.GetEventId(), state)
			if bySubscription {
				t.row("%s\t", dash(ev.GetSubscriptionId()))
			}
			t.row("%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", ev.GetCustomerId(), ev.GetLaneKey(), dash(ev.GetType()),
				fmtTime(ev.GetAcceptedAt()), fmtTime(ev.GetFinishedAt()), ev.GetAttempts(), statusText(ev.GetLastStatus()), dash(oneLine(ev.GetLastError())))
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}
	if l.GetTruncated() {
		fmt.Fprintln(e.out, "(more match: raise --limit or narrow the filter)")
	}
	if l.GetSearchedBackTo() != nil {
		fmt.Fprintf(e.out, "(history searched back to %s only: narrow --since/--until or the filter to search further)\n", fmtTime(l.GetSearchedBackTo()))
	}
	return nil
}

// parseState reads --state.
func parseState(v string) (rivorav1.EventState, error) {
	switch strings.ReplaceAll(strings.ToLower(v), "_", "-") {
	case "":
		return rivorav1.EventState_EVENT_STATE_UNSPECIFIED, nil
	case "pending":
		return rivorav1.EventState_EVENT_STATE_PENDING, nil
	case "in-flight":
		return rivorav1.EventState_EVENT_STATE_IN_FLIGHT, nil
	case "delivered":
		return rivorav1.EventState_EVENT_STATE_DELIVERED, nil
	case "dead":
		return rivorav1.EventState_EVENT_STATE_DEAD, nil
	}
	return 0, usagef("--state %q: use pending, in-flight, delivered or dead", v)
}

func (e *env) resendEvent(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one event ID"); err != nil {
		return err
	}
	id, reason := c.Args().First(), strings.TrimSpace(c.String("reason"))
	if reason == "" {
		return usagef("events resend needs --reason TEXT: why the event is sent again, for the audit log")
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.events().ResendEvent(ctx, connect.NewRequest(&rivorav1.ResendEventRequest{EventId: id, Reason: reason}))
	if err != nil {
		return callFailed(fmt.Sprintf("resend event %q", id), err, map[connect.Code]string{
			connect.CodeNotFound:           "see `rivoractl events get " + id + "`: only delivered and dead events within the history retention can be resent",
			connect.CodeFailedPrecondition: "see `rivoractl events get " + id + "`",
		})
	}
	r := resp.Msg
	if e.output == "json" {
		return writeJSON(e.out, r)
	}
	return say(e.out, "Resent event %s (it was %s) to %s, customer %s, lane %s: at the tail of its lane, with rivora-resend: 1.\n",
		r.GetEventId(), stateName(r.GetWas()), r.GetDestinationId(), r.GetCustomerId(), r.GetLaneKey())
}

func (e *env) getEvent(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one event ID"); err != nil {
		return err
	}
	id := c.Args().First()
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.events().GetEvent(ctx, connect.NewRequest(&rivorav1.GetEventRequest{EventId: id}))
	if err != nil {
		return callFailed(fmt.Sprintf("get event %q", id), err, map[connect.Code]string{
			connect.CodeNotFound: "check the id publish printed; in a cell, ask the control plane (it asks every agent); history older than --history-retention is gone",
		})
	}
	ev := resp.Msg
	if e.output == "json" {
		return writeJSON(e.out, ev)
	}

	accepted := fmtTime(ev.GetAcceptedAt())
	if n := len(ev.GetEpisodes()); n > 1 {
		accepted += fmt.Sprintf(" (the latest of %d acceptances: see EPISODE below)", n)
	}
	kv := []string{
		"EVENT", ev.GetEventId(),
		"STATE", stateName(ev.GetState()),
		"DESTINATION", ev.GetDestinationId(),
		"SUBSCRIPTION", dash(ev.GetSubscriptionId()),
		"CUSTOMER", ev.GetCustomerId(),
		"LANE", ev.GetLaneKey(),
		"TYPE", ev.GetType(),
		"ACCEPTED", accepted,
		"TRIES", strconv.Itoa(len(ev.GetAttempts())),
	}
	if ev.GetMaxAttempts() > 0 {
		kv = append(kv, "ATTEMPTS USED", fmt.Sprintf("%d of %d", ev.GetAttemptsUsed(), ev.GetMaxAttempts()))
	}
	if ev.GetNextAttemptAt() != nil {
		kv = append(kv, "NEXT ATTEMPT", fmtTime(ev.GetNextAttemptAt()))
	}
	if ev.GetState() == rivorav1.EventState_EVENT_STATE_PENDING {
		kv = append(kv, "AHEAD IN LANE", strconv.Itoa(int(ev.GetAheadInLane())))
	}
	if ev.GetWaiting() != "" {
		kv = append(kv, "WAITING", ev.GetWaiting())
	}
	if ev.GetWindowEndsAt() != nil {
		kv = append(kv, "WINDOW ENDS", fmtTime(ev.GetWindowEndsAt()))
	}
	if ev.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_UNSPECIFIED {
		kv = append(kv, "DEAD REASON", deadReasonName(ev.GetDeadReason()))
	}
	if ev.GetDeadLetterUnarchived() {
		kv = append(kv, "ARCHIVED", "not yet: dead letter kept in the ledger until the archive is reachable (dlq list and dlq show find it there meanwhile; replay once it is archived)")
	}
	if ev.GetConflictingCopyDead() && ev.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_IDEMPOTENCY_CONFLICT {
		kv = append(kv, "CONFLICTING COPY", "a copy of another payload under this id (its idempotency key reused) is a dead letter, never sent: rivoractl dlq show "+ev.GetEventId())
	}
	if err := fields(e.out, kv...); err != nil {
		return err
	}
	if len(ev.GetEpisodes()) > 1 {
		if err := printEpisodes(e, ev.GetEpisodes()); err != nil {
			return err
		}
	}
	if len(ev.GetAttempts()) == 0 {
		return nil
	}
	fmt.Fprintln(e.out)
	t := newTable(e.out)
	t.row("TRY\tATTEMPT\tTIME\tSTATUS\tDURATION\tERROR\n")
	for i, a := range ev.GetAttempts() {
		status := statusText(a.GetStatusCode())
		errText := a.GetError()
		if errText == "" {
			errText = "-"
		}
		try := int(a.GetTry())
		if try == 0 { // a server that does not number tries
			try = i + 1
		}
		t.row("%d\t%s\t%s\t%s\t%s\t%s\n", try, attemptUsed(a), fmtTime(a.GetAt()), status, attemptDuration(a.GetDuration()), oneLine(errText))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintln(e.out, "\nTRY counts every try (one that failed before sending, such as during its token endpoint's pause, too); ATTEMPT is the one of the event's max attempts it used: a try that failed\nwhile its destination was down or throttling used none (the event waits for its destination instead).")
	return err
}

// printEpisodes lists each time the event was accepted (its publish, then
// each replay or resend), its tries and how it ended.
func printEpisodes(e *env, episodes []*rivorav1.Episode) error {
	fmt.Fprintln(e.out)
	t := newTable(e.out)
	t.row("EPISODE	ACCEPTED	TRIES	ENDED\n")
	for i, ep := range episodes {
		tries := "-"
		switch first, last := ep.GetFirstTry(), ep.GetLastTry(); {
		case first == 0:
		case first == last:
			tries = strconv.Itoa(int(first))
		default:
			tries = fmt.Sprintf("%d–%d", first, last)
		}
		ended := stateName(ep.GetState())
		if ep.GetState() == rivorav1.EventState_EVENT_STATE_UNSPECIFIED {
			ended = "not ended (pending on an agent that did not answer)"
		}
		if ep.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_UNSPECIFIED {
			ended += " (" + deadReasonName(ep.GetDeadReason()) + ")"
		}
		t.row("%d\t%s\t%s\t%s\n", i+1, fmtTime(ep.GetAcceptedAt()), tries, ended)
	}
	return t.Flush()
}

// attemptUsed says which of the event's attempts a try used: its number,
// or "not charged: <why>". A record written before Rivora recorded it
// shows the number it was sent as (rivora-attempt) with a question mark.
func attemptUsed(a *rivorav1.Attempt) string {
	switch {
	case a.Charged == nil:
		return fmt.Sprintf("%d?", a.GetNumber())
	case a.GetCharged():
		return strconv.Itoa(int(a.GetNumber()))
	case a.GetNotChargedReason() != "":
		return "not charged: " + a.GetNotChargedReason()
	}
	return "not charged"
}

// stateName prints EVENT_STATE_IN_FLIGHT as "in flight".
func stateName(s rivorav1.EventState) string {
	return enumWords(s.String(), "EVENT_STATE_")
}

func deadReasonName(r rivorav1.DeadReason) string {
	return enumWords(r.String(), "DEAD_REASON_")
}

func enumWords(name, prefix string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, prefix), "_", " "))
}

// maxErrorCell bounds an error in a table cell: a partner's error page can
// be kilobytes of HTML (-o json and `get` show it whole).
const maxErrorCell = 100

// oneLine keeps a partner's multi-line error text (or a description) in
// its table cell: runs of white space, line breaks among them, are one
// space, every other control or format character is escaped (visible),
// and it is cut to maxErrorCell characters.
func oneLine(s string) string {
	s = visible(strings.Join(strings.Fields(s), " "))
	if r := []rune(s); len(r) > maxErrorCell {
		return string(r[:maxErrorCell-1]) + "…"
	}
	return s
}

// attemptDuration is how long a try took, to a precision worth reading:
// µs under a millisecond, a tenth of a millisecond under a second, else
// milliseconds ("20ms" for 20.01187ms, "1.001s" for 1.000557s).
func attemptDuration(d *durationpb.Duration) string {
	if d == nil {
		return "-"
	}
	switch v := d.AsDuration(); {
	case v < time.Millisecond:
		return v.Round(time.Microsecond).String()
	case v < time.Second:
		return v.Round(100 * time.Microsecond).String()
	default:
		return v.Round(time.Millisecond).String()
	}
}
