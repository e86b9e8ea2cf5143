package cli

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

func (e *env) lanes() rivorav1connect.LaneServiceClient {
	return rivorav1connect.NewLaneServiceClient(e.http, e.server, e.clientOptions()...)
}

func (e *env) lanesCommand() *ucli.Command {
	return &ucli.Command{
		Name:    "lanes",
		Aliases: []string{"lane"},
		Usage:   "see a destination's lanes and which are stuck; skip a poison head",
		Description: `A lane is one (destination, customer, lane key): its events are delivered one
at a time, in order, so a head that keeps failing holds the events behind it.
These commands show which lanes are stuck, behind what, and let you move one on.

   rivoractl lanes list --destination orders --stuck
   rivoractl lanes skip orders --customer acme --lane user-42 --reason "poison payload"`,
		Action: parentAction,
		Subcommands: []*ucli.Command{
			{
				Name:      "list",
				Usage:     "list a destination's pending lanes, longest-waiting head first",
				UsageText: "rivoractl lanes list --destination D [--customer C] [--subscription ID] [--stuck] [--limit N] [-o json]",
				Description: `Shows each pending lane: its customer and key, DEPTH (pending events, head
included), the HEAD event, its ATTEMPTS and LAST STATUS (- before any
response), WAITING (how long the head has been the lane's head), NEXT ATTEMPT
(its retry time while it waits for one, or the end of its partner's
Retry-After; "due" once that has passed: it waits for a token of the
destination's budget or its customer's turn; "held: destination parked"
while its parked destination holds it (its last failure was the
destination's: it goes once a probe gets through);
"held: destination paused" and the like while a pause holds it) and its
LAST ERROR. A lane whose head
keeps failing while the lanes around it are delivered holds a poison event:
look at it with ` + "`rivoractl events get HEAD`" + `, and skip it with
` + "`rivoractl lanes skip`" + ` if it will never succeed.

--stuck keeps lanes whose head has failed at least once. After an agent
restart, WAITING counts from the head's first attempt (or its acceptance).

-o json prints the response: lanes (customerId, laneKey, depth, headEventId,
headAttempts, lastStatus, lastError, headSince, nextAttemptAt, state, held,
paused),
matched (how many lanes matched, --limit aside) and truncated.

Example:
   rivoractl lanes list --destination orders --customer acme --stuck --limit 20`,
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "destination", Usage: "destination `ID` (required)"},
					&ucli.StringFlag{Name: "customer", Usage: "only lanes of customer `ID`"},
					&ucli.StringFlag{Name: "subscription", Usage: "only lanes of subscription `ID`"},
					&ucli.BoolFlag{Name: "stuck", Usage: "only lanes whose head has failed at least once"},
					&ucli.IntFlag{Name: "limit", Value: 100, Usage: "show at most `N` lanes (at most 10000)"},
				},
				Action: e.listLanes,
			},
			{
				Name:      "skip",
				Usage:     "make a lane's head (a poison event) a dead letter so the lane moves on",
				ArgsUsage: "DESTINATION",
				UsageText: "rivoractl lanes skip DESTINATION --customer C --lane L [--subscription ID] --reason R [--head EVENT_ID] [-o json]",
				Description: `A lane delivers its events in order, so an event the partner will never
accept (a poison payload answered 400, or 500 while the rest succeed) holds every event
behind it until its attempts or its window run out. skip ends that now: the
head becomes a dead letter with reason manual, like any other dead letter
(` + "`rivoractl dlq list`" + ` shows it, ` + "`rivoractl replay`" + ` sends it again once the
partner is fixed), and the lane's next event goes out. It is recorded in the
audit log (action lane.skip) with your --reason; the audit names your token.

--head EVENT_ID skips only if that event is still the head (take it from
` + "`rivoractl lanes list`" + `), so the event behind it is never skipped by mistake.
A head being attempted right now is refused: try again in a moment.

Prints the event that became a dead letter and how many remain in the lane.

Example:
   rivoractl lanes skip orders --customer acme --lane user-42 \
       --head 0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b --reason "partner rejects this payload (INC-123)"`,
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "customer", Usage: "the lane's customer `ID` (required)"},
					&ucli.StringFlag{Name: "lane", Usage: "the lane `KEY` (required)"},
					&ucli.StringFlag{Name: "reason", Usage: "why, as `TEXT` (required; goes to the audit log)"},
					&ucli.StringFlag{Name: "head", Usage: "skip only if `EVENT_ID` is still the head"},
					&ucli.StringFlag{Name: "subscription", Usage: "the lane's subscription `ID`, for a lane of events routed by a subscription (SUBSCRIPTION in `lanes list`)"},
				},
				Action: e.skipLane,
			},
		},
	}
}

func (e *env) listLanes(c *ucli.Context) error {
	if err := exactArgs(c, 0, "no arguments (the destination is --destination)"); err != nil {
		return err
	}
	dest := c.String("destination")
	if dest == "" {
		return usagef("lanes list needs --destination: see `rivoractl lanes list --help`")
	}
	limit, err := limitFlag(c, 10000)
	if err != nil {
		return err
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.lanes().ListLanes(ctx, connect.NewRequest(&rivorav1.ListLanesRequest{
		DestinationId: dest, CustomerId: c.String("customer"), SubscriptionId: c.String("subscription"), Stuck: c.Bool("stuck"), Limit: limit,
	}))
	if err != nil {
		return callFailed(fmt.Sprintf("list lanes of %q", dest), err, map[connect.Code]string{
			connect.CodeNotFound: "check the destination id (rivoractl destinations list)",
		})
	}
	if e.output == "json" {
		return writeJSON(e.out, resp.Msg)
	}
	return writeLanes(e, resp.Msg, time.Now())
}

func writeLanes(e *env, resp *rivorav1.ListLanesResponse, now time.Time) error {
	if len(resp.GetLanes()) == 0 {
		_, err := fmt.Fprintln(e.out, "No pending lanes match.")
		return err
	}
	// A lane of events routed by a subscription is also the subscription's:
	// its column appears when some lane has one.
	bySubscription := slices.ContainsFunc(resp.GetLanes(), func(l *rivorav1.LaneSummary) bool { return l.GetSubscriptionId() != "" })
	tw := newTable(e.out)
	if bySubscription {
		tw.row("SUBSCRIPTION\t")
	}
	tw.row("CUSTOMER\tLANE\tDEPTH\tHEAD\tATTEMPTS\tLAST STATUS\tWAITING\tNEXT ATTEMPT\tLAST ERROR\n")
	for _, l := range resp.GetLanes() {
		if bySubscription {
			tw.row("%s\t", dash(l.GetSubscriptionId()))
		}
		tw.row("%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n", l.GetCustomerId(), l.GetLaneKey(), l.GetDepth(), l.GetHeadEventId(),
			l.GetHeadAttempts(), statusText(l.GetLastStatus()), age(l.GetHeadSince(), now), nextAttempt(l), dash(oneLine(l.GetLastError())))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if resp.GetTruncated() {
		fmt.Fprintf(e.out, "(%d lanes match; showing the %d waiting longest: raise --limit or narrow the filter)\n", resp.GetMatched(), len(resp.GetLanes()))
	}
	return nil
}

func statusText(status int32) string {
	if status == 0 {
		return "-"
	}
	return strconv.Itoa(int(status))
}

// age prints how long ago ts was, to the second ("3m12s").
func age(ts *timestamppb.Timestamp, now time.Time) string {
	if ts == nil {
		return "-"
	}
	return shortDuration(max(now.Sub(ts.AsTime()), 0).Truncate(time.Second))
}

// nextAttempt is a lane's NEXT ATTEMPT. held is set only while the lane's
// destination is parked and holds it (an agent set it for any head whose
// last failure was the destination's, which read "held by destination"
// on a healthy destination); a due lane otherwise waits for a token of
// the destination's budget or its customer's turn.
func nextAttempt(l *rivorav1.LaneSummary) string {
	switch {
	case l.GetState() == rivorav1.LaneState_LANE_STATE_IN_FLIGHT:
		return "in flight"
	case l.GetPaused() != "":
		return "held: " + l.GetPaused()
	case l.GetNextAttemptAt() != nil:
		return fmtTime(l.GetNextAttemptAt())
	case l.GetHeld():
		return "held: destination parked"
	case l.GetState() == rivorav1.LaneState_LANE_STATE_DUE:
		return "due"
	}
	return "-"
}

func (e *env) skipLane(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one destination ID"); err != nil {
		return err
	}
	dest := c.Args().First()
	for _, name := range []string{"customer", "lane", "reason"} {
		if c.String(name) == "" {
			return usagef("lanes skip needs --%s: see `rivoractl lanes skip --help`", name)
		}
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.lanes().SkipLaneHead(ctx, connect.NewRequest(&rivorav1.SkipLaneHeadRequest{
		DestinationId: dest, CustomerId: c.String("customer"), LaneKey: c.String("lane"),
		Reason: c.String("reason"), HeadEventId: c.String("head"), SubscriptionId: c.String("subscription"),
	}))
	if err != nil {
		return callFailed(fmt.Sprintf("skip the head of lane %s/%s of %q", c.String("customer"), c.String("lane"), dest), err, map[connect.Code]string{
			connect.CodeNotFound: "see `rivoractl lanes list --destination " + dest + "`",
		})
	}
	if e.output == "json" {
		return writeJSON(e.out, resp.Msg)
	}
	return say(e.out, "Skipped %s: now a dead letter (reason manual). It reaches the archive within a few seconds; then `rivoractl dlq list --destination %s` shows it and `rivoractl replay` can send it again.\n%d %s left in lane %s/%s.\n",
		resp.Msg.GetEventId(), dest, resp.Msg.GetRemaining(), plural(int(resp.Msg.GetRemaining()), "event"), c.String("customer"), c.String("lane"))
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
