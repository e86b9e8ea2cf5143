package cli

import (
	"fmt"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func (e *env) eventsCommand() *ucli.Command {
	return &ucli.Command{
		Name:    "events",
		Aliases: []string{"event"},
		Usage:   "follow events: where is my event?",
		Description: `Answers where an accepted event is: pending in its lane, in flight,
delivered, or dead (archived after its attempts or window ran out), with every
delivery attempt.

   rivoractl events get 0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b`,
		Action: parentAction,
		Subcommands: []*ucli.Command{
			{
				Name:      "get",
				Usage:     "show an event's state and delivery attempts",
				ArgsUsage: "EVENT_ID",
				UsageText: "rivoractl events get EVENT_ID [-o json]",
				Description: `Shows the event's state, its destination, customer and lane, when it was
accepted, every attempt (number, time, HTTP status, error, duration), the next
attempt and how many events are ahead of it in its lane while pending, and
why it died when dead. EVENT_ID is what publish printed.

While pending, WAITING says why it is not being delivered now, e.g.
   held: destination parked since 2026-12-01T09:12:03Z; 2 of 8 attempts used
Failures that are the destination's (connection errors, timeouts, 429,
502/503/504, 408/409/425) while it is down or throttling use no attempt: the
event waits for its destination until WINDOW ENDS, then it is a dead letter
(reason window). 500 and other 4xx use one attempt each.

Example:
   rivoractl events get 0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b -o json`,
				Action: e.getEvent,
			},
		},
	}
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
			connect.CodeNotFound: "check the id publish printed; events are found by the agent that holds their destination",
		})
	}
	ev := resp.Msg
	if e.output == "json" {
		return writeJSON(e.out, ev)
	}

	kv := []string{
		"EVENT", ev.GetEventId(),
		"STATE", stateName(ev.GetState()),
		"DESTINATION", ev.GetDestinationId(),
		"CUSTOMER", ev.GetCustomerId(),
		"LANE", ev.GetLaneKey(),
		"TYPE", ev.GetType(),
		"ACCEPTED", fmtTime(ev.GetAcceptedAt()),
		"ATTEMPTS", strconv.Itoa(len(ev.GetAttempts())),
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
	if err := fields(e.out, kv...); err != nil {
		return err
	}
	if len(ev.GetAttempts()) == 0 {
		return nil
	}
	fmt.Fprintln(e.out)
	t := newTable(e.out)
	fmt.Fprintln(t, "#\tTIME\tSTATUS\tDURATION\tERROR")
	for _, a := range ev.GetAttempts() {
		status := "-"
		if a.GetStatusCode() != 0 {
			status = strconv.Itoa(int(a.GetStatusCode()))
		}
		errText := a.GetError()
		if errText == "" {
			errText = "-"
		}
		fmt.Fprintf(t, "%d\t%s\t%s\t%s\t%s\n", a.GetNumber(), fmtTime(a.GetAt()), status, fmtDuration(a.GetDuration()), oneLine(errText))
	}
	return t.Flush()
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

// oneLine keeps a partner's multi-line error text in its table cell.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
