package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/bounds"
	"github.com/rivora/rivora/internal/durations"
	"github.com/rivora/rivora/internal/rates"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

func (e *env) archive() rivorav1connect.ArchiveServiceClient {
	return rivorav1connect.NewArchiveServiceClient(e.http, e.server, e.clientOptions()...)
}

func filterFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "destination", Usage: "only dead letters of destination `ID`"},
		&ucli.StringFlag{Name: "customer", Usage: "only those of customer `ID`"},
		&ucli.StringFlag{Name: "lane", Usage: "only those of lane `KEY`"},
		&ucli.StringFlag{Name: "subscription", Usage: "only those routed by subscription `ID`"},
		&ucli.StringFlag{Name: "since", Usage: "only those that died at or after `TIME` (RFC 3339, or a duration ago such as 2h)"},
		&ucli.StringFlag{Name: "until", Usage: "only those that died before `TIME` (RFC 3339, or a duration ago)"},
		&ucli.StringFlag{Name: "reason", Usage: "only those that died for `REASON`: max_attempts, window, deleted, manual or idempotency_conflict (an edge's copy of a key the cell had used for another event)"},
	}
}

// parseWhen reads RFC 3339 or "a duration ago" (before now).
func parseWhen(flag, v string, now time.Time) (*timestamppb.Timestamp, error) {
	if v == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return timestamppb.New(t), nil
	}
	if d, err := durations.Parse(v); err == nil && d >= 0 {
		return timestamppb.New(now.Add(-d)), nil
	}
	return nil, usagef("--%s %q: use RFC 3339 (%s) or a duration ago (90m, 36h, 7d)", flag, v, now.UTC().Add(-time.Hour).Truncate(time.Hour).Format(time.RFC3339))
}

// sinceUntil reads --since and --until (each nil when not given), both
// counted back from one now, and refuses a range that ends before it
// starts, naming the flags as typed: the server would name its API's
// fields. emptyIfEqual says the range excludes --until (dead letters), so
// that one that ends where it starts is empty too.
func sinceUntil(c *ucli.Context, emptyIfEqual bool) (since, until *timestamppb.Timestamp, err error) {
	now := time.Now()
	s, u := c.String("since"), c.String("until")
	if since, err = parseWhen("since", s, now); err != nil {
		return nil, nil, err
	}
	if until, err = parseWhen("until", u, now); err != nil {
		return nil, nil, err
	}
	if since == nil || until == nil {
		return since, until, nil
	}
	st, ut := since.AsTime(), until.AsTime()
	if st.Before(ut) || (st.Equal(ut) && !emptyIfEqual) {
		return since, until, nil
	}
	_, sinceErr := time.Parse(time.RFC3339, s)
	_, untilErr := time.Parse(time.RFC3339, u)
	if st.Equal(ut) {
		return nil, nil, usagef("--since %s is the same time as --until %s: the range is empty (--until itself is left out); give an earlier --since", s, u)
	}
	// A duration beside a date is told as the time it stands for: "1h"
	// and a date compare only so.
	mixed := (sinceErr == nil) != (untilErr == nil)
	shown := func(typed string, parseErr error, at time.Time) string {
		if parseErr == nil || !mixed {
			return typed
		}
		return fmt.Sprintf("%s (%s)", typed, at.UTC().Format(time.RFC3339))
	}
	why := "--since starts the range and --until ends it"
	if sinceErr != nil && untilErr != nil {
		why = "durations count back from now, so --since is the longer one (e.g. --since " + u + " --until " + s + ")"
	}
	return nil, nil, usagef("--since %s is after --until %s: %s", shown(s, sinceErr, st), shown(u, untilErr, ut), why)
}

// filterText is the dead-letter filter flags given, as typed
// ("--destination orders --customer acme").
func filterText(c *ucli.Context) string {
	var parts []string
	for _, name := range []string{"destination", "subscription", "customer", "lane", "reason", "since", "until"} {
		if v := c.String(name); v != "" {
			parts = append(parts, "--"+name+" "+v)
		}
	}
	return strings.Join(parts, " ")
}

func filterFrom(c *ucli.Context) (*rivorav1.DeadLetterFilter, error) {
	f := &rivorav1.DeadLetterFilter{DestinationId: c.String("destination"), CustomerId: c.String("customer"), LaneKey: c.String("lane"), SubscriptionId: c.String("subscription")}
	var err error
	if f.Since, f.Until, err = sinceUntil(c, true); err != nil {
		return nil, err
	}
	if r := c.String("reason"); r != "" {
		v, ok := rivorav1.DeadReason_value["DEAD_REASON_"+strings.ToUpper(r)]
		if !ok || v == 0 {
			return nil, usagef("--reason %q: use max_attempts, window, deleted, manual or idempotency_conflict", r)
		}
		f.Reason = rivorav1.DeadReason(v)
	}
	return f, nil
}

func reasonText(r rivorav1.DeadReason) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "DEAD_REASON_"))
}

func (e *env) dlqCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "dlq",
		Usage: "inspect dead letters: events whose attempts or window ran out, archived with their last status",
		Description: `Dead letters live in the archive (a local directory in rivora dev, or
S3/MinIO). Replay them with ` + "`rivoractl replay`" + `. A dead letter is first kept in
its partition's ledger and written to the archive within seconds; while
the archive cannot be read, list, show and stats answer from the ledgers
instead and say so.

   rivoractl dlq list --destination orders
   rivoractl dlq show EVENT_ID
   rivoractl dlq stats`,
		Action: parentAction,
		Subcommands: []*ucli.Command{
			{
				Name:      "list",
				Usage:     "list dead letters (without payloads): destination by destination, each one's in the order they were recorded, oldest hour first",
				UsageText: "rivoractl dlq list [--destination D] [--customer C] [--lane L] [--subscription S] [--reason R] [--since T] [--until T] [--limit N] [-o json]",
				Description: `REPLAYED says when a replay handled a dead letter (re-accepted it, or found
its event already sent); "-" means none has, and the next replay sends it.

-o json prints a JSON array, one object per event: eventId, destinationId,
subscriptionId, customerId, laneKey, type, attempts, lastStatus, lastError,
reason, deadAt, replayed (it died as a replay), replayedAt (when a replay
handled it), unarchived (true: it waits in a ledger, not in the archive
yet); notes go to stderr.

` + ledgerHelp + `
Such a list has an ARCHIVED column ("not yet"). The ledgers are not
paged: when more match than --limit, it says how many more (narrow the
filter).`,
				Flags:  append(filterFlags(), &ucli.IntFlag{Name: "limit", Value: bounds.DeadLetterList, Usage: "show at most `N` (the archive answers at most 1000 at a time: narrow the filter for more)"}),
				Action: e.listDeadLetters,
			},
			{
				Name:      "show",
				Usage:     "show one dead letter with its payload",
				ArgsUsage: "EVENT_ID",
				UsageText: "rivoractl dlq show EVENT_ID [--destination D] [-o json]",
				Flags:     []ucli.Flag{&ucli.StringFlag{Name: "destination", Usage: "search only destination `ID` (faster)"}},
				Action:    e.showDeadLetter,
			},
			{
				Name:      "stats",
				Usage:     "count dead letters per destination, customer and reason",
				UsageText: "rivoractl dlq stats [filters] [--by-subscription] [-o json]",
				Description: `COUNT counts every matching dead letter, as dlq list lists them; REPLAYED
those of them a replay handled already (dlq list's REPLAYED column): the
next replay leaves them, and sends the others. -o json: count and
replayed per row, total and replayed overall.

` + ledgerHelp + `
Then the last line counts the dead letters waiting in the ledgers (none
replayed yet: a replay reads the archive), and -o json carries
archiveUnavailable, ledgerPartitions and unreadLedgers.`,
				Flags:  append(filterFlags(), &ucli.BoolFlag{Name: "by-subscription", Usage: "count per subscription too"}),
				Action: e.deadLetterStats,
			},
		},
	}
}

type deadLetterJSON struct {
	EventID        string `json:"eventId"`
	DestinationID  string `json:"destinationId"`
	SubscriptionID string `json:"subscriptionId,omitempty"`
	CustomerID     string `json:"customerId"`
	LaneKey        string `json:"laneKey"`
	Type           string `json:"type"`
	Attempts       int32  `json:"attempts"`
	LastStatus     int32  `json:"lastStatus"`
	LastError      string `json:"lastError"`
	Reason         string `json:"reason"`
	DeadAt         string `json:"deadAt"`
	Replayed       bool   `json:"replayed,omitempty"`
	// ReplayedAt: when a replay handled this dead letter (none yet: the
	// next replay sends it).
	ReplayedAt string `json:"replayedAt,omitempty"`
	// Unarchived: it waits in its partition's ledger, not in the archive
	// yet (listed so while the archive is unreachable).
	Unarchived bool `json:"unarchived,omitempty"`
}

func flatDeadLetter(dl *rivorav1.DeadLetter) deadLetterJSON {
	ev := dl.GetEvent()
	return deadLetterJSON{
		EventID: ev.GetEventId(), DestinationID: ev.GetDestinationId(), SubscriptionID: ev.GetSubscriptionId(), CustomerID: ev.GetCustomerId(), LaneKey: ev.GetLaneKey(),
		Type: ev.GetType(), Attempts: dl.GetAttempts(), LastStatus: dl.GetLastStatus(), LastError: dl.GetLastError(),
		Reason: reasonText(dl.GetReason()), DeadAt: dl.GetDeadAt().AsTime().UTC().Format(time.RFC3339Nano), Replayed: ev.GetReplayed(),
		ReplayedAt: optionalTime(dl.GetReplayedAt()), Unarchived: dl.GetUnarchived(),
	}
}

// optionalTime is t in RFC 3339 for JSON, "" when unset.
func optionalTime(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return t.AsTime().UTC().Format(time.RFC3339Nano)
}

// replayedText says whether, and when, a replay handled a dead letter.
func replayedText(dl *rivorav1.DeadLetter) string {
	if dl.GetReplayedAt() == nil {
		return "-"
	}
	return fmtTime(dl.GetReplayedAt())
}

func (e *env) listDeadLetters(c *ucli.Context) error {
	if err := exactArgs(c, 0, "no arguments (filters are flags)"); err != nil {
		return err
	}
	f, err := filterFrom(c)
	if err != nil {
		return err
	}
	limit := c.Int("limit")
	switch {
	case limit < 1:
		return usagef("--limit %d: use 1 to %d", limit, bounds.DeadLetterList)
	case limit > bounds.DeadLetterList:
		fmt.Fprintf(e.errOut, "--limit %d: showing at most %d, the most the archive answers at a time (narrow the filter for more)\n", limit, bounds.DeadLetterList)
		limit = bounds.DeadLetterList
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.archive().ListDeadLetters(ctx, connect.NewRequest(&rivorav1.ListDeadLettersRequest{Filter: f, Limit: int32(limit)}))
	if err != nil {
		return callFailed("list dead letters", err, nil)
	}
	dls := resp.Msg.GetDeadLetters()
	if len(dls) == 0 {
		e.noteUnknownDestination(ctx, f.GetDestinationId())
	}
	fromLedgers := resp.Msg.GetArchiveUnavailable() != ""
	if e.output == "json" {
		out := make([]deadLetterJSON, 0, len(dls))
		for _, dl := range dls {
			out = append(out, flatDeadLetter(dl))
		}
		if fromLedgers {
			// The array is all a script sees: the warning goes to stderr.
			ledgerWarning(e.errOut, resp.Msg.GetArchiveUnavailable(), listedFromLedgers(resp.Msg), resp.Msg.GetUnreadLedgers())
		}
		if fromLedgers && resp.Msg.GetTruncated() {
			fmt.Fprintf(e.errOut, "note: %d dead letters listed; %d more wait in the ledgers (they are not paged: narrow the filter)\n", len(out), resp.Msg.GetMoreUnarchived())
		} else if resp.Msg.GetTruncated() {
			// The array is all a script sees: say on stderr that it is
			// not all there is.
			fmt.Fprintf(e.errOut, "note: %d dead letters listed; more match (raise --limit, at most %d, or narrow the filter)\n", len(out), bounds.DeadLetterList)
		}
		enc := json.NewEncoder(e.out)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if fromLedgers {
		ledgerWarning(e.out, resp.Msg.GetArchiveUnavailable(), listedFromLedgers(resp.Msg), resp.Msg.GetUnreadLedgers())
	}
	if len(dls) == 0 {
		_, err := fmt.Fprintln(e.out, "No dead letters match.")
		return err
	}
	if err := deadLetterTable(e.out, dls, fromLedgers); err != nil {
		return err
	}
	if fromLedgers && resp.Msg.GetTruncated() {
		fmt.Fprintf(e.out, "(%d more wait in the ledgers: narrow the filter; the ledgers are not paged)\n", resp.Msg.GetMoreUnarchived())
	} else if resp.Msg.GetTruncated() {
		if c.Int("limit") < bounds.DeadLetterList {
			fmt.Fprintf(e.out, "(more match: raise --limit or narrow the filter)\n")
		} else {
			fmt.Fprintf(e.out, "(more match: narrow the filter; a list shows at most %d)\n", bounds.DeadLetterList)
		}
	}
	return nil
}

// deadLetterTable writes dlq list's table; withArchived adds the ARCHIVED
// column (a list from the ledgers: "not yet"). A dead letter of a
// subscription's event is the subscription's (a deleted subscription's
// are what replay refuses): the SUBSCRIPTION column appears when some dead
// letter has one, as in lanes list. Each cell is its own row call: row
// escapes a tab inside an argument.
func deadLetterTable(w io.Writer, dls []*rivorav1.DeadLetter, withArchived bool) error {
	bySubscription := slices.ContainsFunc(dls, func(dl *rivorav1.DeadLetter) bool { return dl.GetEvent().GetSubscriptionId() != "" })
	tw := newTable(w)
	tw.row("DEAD AT\tEVENT\tDESTINATION\t")
	if bySubscription {
		tw.row("SUBSCRIPTION\t")
	}
	tw.row("CUSTOMER\tLANE\tATTEMPTS\tLAST STATUS\tREASON\tREPLAYED\t")
	if withArchived {
		tw.row("ARCHIVED\t")
	}
	tw.row("LAST ERROR\n")
	for _, dl := range dls {
		j := flatDeadLetter(dl)
		tw.row("%s\t%s\t%s\t", fmtTime(dl.GetDeadAt()), j.EventID, j.DestinationID)
		if bySubscription {
			tw.row("%s\t", dash(j.SubscriptionID))
		}
		tw.row("%s\t%s\t%d\t%s\t%s\t%s\t", j.CustomerID, j.LaneKey, j.Attempts, statusText(j.LastStatus), j.Reason, replayedText(dl))
		if withArchived {
			tw.row("%s\t", ledgerArchivedText(dl))
		}
		tw.row("%s\n", dash(oneLine(j.LastError)))
	}
	return tw.Flush()
}

func (e *env) showDeadLetter(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one event ID"); err != nil {
		return err
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.archive().GetDeadLetter(ctx, connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: c.Args().First(), DestinationId: c.String("destination")}))
	if err != nil {
		return callFailed("show dead letter", err, nil)
	}
	dl := resp.Msg.GetDeadLetter()
	if e.output == "json" {
		if dl.GetUnarchived() {
			// The object is all a script sees: the warning goes to
			// stderr, as list's and stats'.
			showLedgerWarning(e.errOut, resp.Msg.GetArchiveUnavailable())
		}
		return writeJSON(e.out, resp.Msg)
	}
	ev := dl.GetEvent()
	j := flatDeadLetter(dl)
	object := resp.Msg.GetObject()
	if dl.GetUnarchived() {
		showLedgerWarning(e.out, resp.Msg.GetArchiveUnavailable())
		object = "not yet: waits in the ledger of partition " + fmt.Sprint(dl.GetPartition())
	}
	if err := fields(e.out,
		"EVENT", j.EventID, "DESTINATION", j.DestinationID, "CUSTOMER", j.CustomerID, "LANE", j.LaneKey, "TYPE", j.Type,
		"ACCEPTED", fmtTime(ev.GetAcceptedAt()), "FIRST ATTEMPT", fmtTime(dl.GetFirstAttemptAt()), "LAST ATTEMPT", fmtTime(dl.GetLastAttemptAt()),
		"DEAD AT", fmtTime(dl.GetDeadAt()), "REASON", j.Reason, "ATTEMPTS", fmt.Sprint(j.Attempts), "LAST STATUS", statusText(j.LastStatus),
		"LAST ERROR", dash(j.LastError), "REPLAYED", replayedText(dl), "CONTENT TYPE", ev.GetContentType(), "OBJECT", object,
	); err != nil {
		return err
	}
	// The payload's lines as they are; any other control or format
	// character (a binary payload's bytes) escaped.
	_, err = fmt.Fprintf(e.out, "\nPAYLOAD\n%s\n", visibleText(string(ev.GetPayload())))
	return err
}

func (e *env) deadLetterStats(c *ucli.Context) error {
	if err := exactArgs(c, 0, "no arguments (filters are flags)"); err != nil {
		return err
	}
	f, err := filterFrom(c)
	if err != nil {
		return err
	}
	ctx, cancel := callContext(c)
	defer cancel()
	bySubscription := c.Bool("by-subscription")
	resp, err := e.archive().DeadLetterStats(ctx, connect.NewRequest(&rivorav1.DeadLetterStatsRequest{Filter: f, BySubscription: bySubscription}))
	if err != nil {
		return callFailed("dead letter stats", err, nil)
	}
	if resp.Msg.GetTotal() == 0 {
		e.noteUnknownDestination(ctx, f.GetDestinationId())
	}
	why := resp.Msg.GetArchiveUnavailable()
	if e.output == "json" {
		if why != "" {
			ledgerWarning(e.errOut, why, fmt.Sprintf("counting the %d matching dead letters", resp.Msg.GetTotal()), resp.Msg.GetUnreadLedgers())
		}
		// int64 counts are strings in protojson.
		return writeJSONWith(e.out, resp.Msg, map[string]any{"counts": []any{}, "total": "0", "replayed": "0", "objects": "0"})
	}
	if why != "" {
		ledgerWarning(e.out, why, fmt.Sprintf("counting the %d matching dead letters", resp.Msg.GetTotal()), resp.Msg.GetUnreadLedgers())
	}
	tw := newTable(e.out)
	if bySubscription {
		tw.row("SUBSCRIPTION\t")
	}
	tw.row("DESTINATION\tCUSTOMER\tREASON\tCOUNT\tREPLAYED\tOLDEST\tNEWEST\n")
	for _, n := range resp.Msg.GetCounts() {
		if bySubscription {
			tw.row("%s\t", dash(n.GetSubscriptionId()))
		}
		tw.row("%s\t%s\t%s\t%d\t%d\t%s\t%s\n", n.GetDestinationId(), n.GetCustomerId(), reasonText(n.GetReason()), n.GetCount(), n.GetReplayed(), fmtTime(n.GetOldest()), fmtTime(n.GetNewest()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if why != "" {
		_, err = fmt.Fprintf(e.out, "%d dead letters waiting in the agents' ledgers (the archive's are counted once it is back)\n", resp.Msg.GetTotal())
		return err
	}
	_, err = fmt.Fprintf(e.out, "%d dead letters in %d archive objects, %d of them handled by a replay already (REPLAYED; the next replay leaves them)\n", resp.Msg.GetTotal(), resp.Msg.GetObjects(), resp.Msg.GetReplayed())
	return err
}

// subscriptionDestination is the destination of subscription id, for a
// replay that names only the subscription. A deleted subscription is
// gone from the API while its dead letters stay: naming its destination
// replays them.
func (e *env) subscriptionDestination(c *ucli.Context, id string) (string, error) {
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.subscriptions().GetSubscription(ctx, connect.NewRequest(&rivorav1.GetSubscriptionRequest{Id: id}))
	if connect.CodeOf(err) == connect.CodeNotFound {
		return "", fmt.Errorf("subscription %q not found, so its destination is unknown here: a deleted subscription's dead letters stay in the archive, and --destination D --subscription %s names them", id, id)
	}
	if err != nil {
		return "", callFailed(fmt.Sprintf("get subscription %q", id), err, nil)
	}
	return resp.Msg.GetSubscription().GetDestinationId(), nil
}

func (e *env) replayCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "replay",
		Usage: "re-ingest dead letters of a destination, in lane order, keeping their event ids",
		UsageText: `rivoractl replay --destination D [--customer C] [--lane L] [--subscription S] [--reason R]
    [--since T] [--until T] [--rate N] [--dry-run] [--restart] [--skip-deleted-subscriptions]
   rivoractl replay --subscription S [--customer C] …   (the subscription's destination)`,
		Description: `Streams matching dead letters back through ingest: each keeps its event id
(receivers dedupe on webhook-id), is marked replayed (header rivora-replay:
true) and gets a fresh retry window. Lanes keep the order their events died
in (archive order), with one exception: an event a partial replay (--until,
say) sent again that died again is replayed at its new death, after the
lane's events that died before that (replay a lane's dead letters together
to keep its order). Replaying into a paused or failing destination is fine:
the events wait in their lanes. An event that was replayed before and died
again has a dead letter per death; a replay re-accepts it once, at its
first. A dead letter archived twice (an owner change between an archive
write and its ledger's purge) is one: counted and sent once.

One exception to the ids: a dead letter of reason idempotency_conflict (an
edge's copy of a key the cell had used for another payload) died under the
id of that other event, so it is delivered under an id of its own, with
the header rivora-replay-of naming the old one; the replay lists each.

A dead letter is sent by one replay only: each is marked once re-accepted,
and a later replay skips it, whatever its filter. So Ctrl-C stops cleanly:
the replay says how many dead letters it had done, and running the same
command again resumes after what was already re-accepted (also after its
agent stopped midway). --restart sends the marked ones again. Two replays
at the same time leave to each other what the other marked: each reads a
dead letter's marks again just before sending it, and its summary counts
those the other one handled first ("already replayed by another
replay"). Only a batch both send at once, before either marks it, goes
twice; within the stream's dedup window (2 min by default) the second is
dropped.

A dead letter whose subscription was deleted cannot be delivered as it
would have been (the subscription's URL, secret and headers went with it):
a replay matching any is refused before it re-ingests anything, saying how
many and whose. --skip-deleted-subscriptions replays the others and leaves
those in the archive (not marked: a later replay finds them again), and
says how many it left, for which subscriptions; so one customer's deleted
subscription does not hold a shared destination's replay for every other
customer. A --dry-run says first what would be refused or left; when the
replay would be refused, the dry run fails too (exit 1, after its count).

Examples:
   rivoractl replay --destination orders --dry-run
   rivoractl replay --destination orders --since 6h --rate 100
   rivoractl replay --subscription sub_0123456789abcdef --customer acme --dry-run
   rivoractl replay --destination poison --reason max_attempts --skip-deleted-subscriptions`,
		Flags: append(filterFlags(),
			&ucli.Float64Flag{Name: "rate", Usage: "re-ingest at most `N` events per second, 0.001 to 1e6", DefaultText: "as fast as ingest takes them"},
			&ucli.BoolFlag{Name: "dry-run", Usage: "only count what would be replayed, per destination and customer"},
			&ucli.BoolFlag{Name: "restart", Usage: "send again what earlier replays, with any filter, already re-accepted"},
			&ucli.BoolFlag{Name: "skip-deleted-subscriptions", Usage: "replay the others when some dead letters' subscription was deleted, leaving those in the archive (else the replay is refused)"},
		),
		Action: e.replay,
	}
}

func (e *env) replay(c *ucli.Context) error {
	if err := exactArgs(c, 0, "no arguments (filters are flags)"); err != nil {
		return err
	}
	if c.String("destination") == "" && c.String("subscription") == "" {
		return usagef("replay needs --destination (or --subscription, whose destination it then is)")
	}
	f, err := filterFrom(c)
	if err != nil {
		return err
	}
	if f.DestinationId == "" {
		if f.DestinationId, err = e.subscriptionDestination(c, f.SubscriptionId); err != nil {
			return err
		}
	}
	if r := c.Float64("rate"); c.IsSet("rate") && !rates.Valid(r) {
		return usagef("--rate %v: want %s (leave --rate out to replay as fast as ingest takes them)", r, rates.Bound())
	}
	// No overall timeout: a replay runs as long as it needs; Ctrl-C stops it.
	req := &rivorav1.ReplayRequest{Filter: f, DryRun: c.Bool("dry-run"), Restart: c.Bool("restart"), SkipDeletedSubscriptions: c.Bool("skip-deleted-subscriptions")}
	if c.IsSet("rate") {
		req.RatePerSecond = proto.Float64(c.Float64("rate"))
	}
	stream, err := e.archive().Replay(c.Context, connect.NewRequest(req))
	if err != nil {
		return callFailed("replay", err, nil)
	}
	defer stream.Close()
	tty := isTerminal(e.out) && e.output != "json"
	start := time.Now()
	var last *rivorav1.ReplayResponse
	var renamed []*rivorav1.ReplayRename
	shown := int64(-1) // dead letters done, as last shown
	for stream.Receive() {
		last = stream.Msg()
		renamed = append(renamed, last.GetRenamed()...)
		done := replayDone(last)
		if c.Bool("dry-run") || e.output == "json" || done == shown {
			continue // the final report repeats the last batch's
		}
		shown = done
		e.showProgress(last, start, tty)
	}
	if err := stream.Err(); err != nil {
		if tty {
			fmt.Fprintln(e.out)
		}
		if c.Context.Err() != nil {
			return replayStopped(last, c.Bool("dry-run"))
		}
		return callFailed("replay", err, resumeHints(last, c.Bool("dry-run")))
	}
	if last == nil {
		return fmt.Errorf("replay: the server ended without a report")
	}
	last.Renamed = renamed
	if last.GetTotal() == 0 && last.GetRefused() == "" && !c.Bool("dry-run") {
		// "Replayed 0 of 0" alone reads as a replay that did nothing
		// wrong; a mistyped filter is the likelier cause.
		fmt.Fprintf(e.errOut, "note: no dead letters match %s: nothing to replay (`rivoractl dlq stats` with the same flags counts what there is)\n", filterText(c))
		ctx, cancel := callContext(c)
		e.noteUnknownDestination(ctx, f.GetDestinationId())
		cancel()
	}
	if e.output == "json" {
		if err := writeJSON(e.out, last); err != nil {
			return err
		}
		return wouldBeRefused(last, c.Bool("dry-run"))
	}
	if tty {
		fmt.Fprintln(e.out)
	}
	if c.Bool("dry-run") {
		if err := e.showDryRun(last); err != nil {
			return err
		}
		return wouldBeRefused(last, true)
	}
	if _, err := fmt.Fprintf(e.out, "Replayed %d of %d dead letters in %s (%d skipped: sent by an earlier replay, stored already within the dedup window, or a later death of an event sent once).\n", last.GetReplayed(), last.GetTotal(), time.Since(start).Round(time.Millisecond), last.GetSkipped()); err != nil {
		return err
	}
	if n := last.GetReplayedByAnother(); n > 0 {
		say(e.out, "%d already replayed by another replay running at the same time (a dead letter is sent by one replay only).\n", n)
	}
	if n := last.GetDeletedSubscriptionDeadLetters(); n > 0 {
		say(e.out, "Left %d %s in the archive: routed by %s, deleted since (not marked: a later replay finds them again).\n", n, plural(int(n), "dead letter"), deletedSubscriptionsText(last))
	}
	return e.showRenamed(renamed)
}

// showDryRun shows a dry run's count: first what a replay would refuse or
// leave in the archive, then what it would replay.
func (e *env) showDryRun(last *rivorav1.ReplayResponse) error {
	if why := last.GetRefused(); why != "" {
		say(e.out, "a replay would be refused: %s\n", why)
	} else if n := last.GetDeletedSubscriptionDeadLetters(); n > 0 {
		say(e.out, "%d %s would be left in the archive: routed by %s, deleted since.\n", n, plural(int(n), "dead letter"), deletedSubscriptionsText(last))
	}
	tw := newTable(e.out)
	tw.row("DESTINATION\tCUSTOMER\tWOULD REPLAY\n")
	for _, n := range last.GetCounts() {
		tw.row("%s\t%s\t%d\n", n.GetDestinationId(), n.GetCustomerId(), n.GetCount())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(e.out, "%d match; %d skipped: sent by an earlier replay, or a later death of an event sent once\n", last.GetTotal(), last.GetSkipped())
	return err
}

// wouldBeRefused fails a dry run whose replay would be refused, as the
// replay itself fails (exit 1): a script that checks a dry run's exit
// code before replaying learns the replay would not go ahead. Its count
// is shown first.
func wouldBeRefused(last *rivorav1.ReplayResponse, dryRun bool) error {
	if !dryRun || last.GetRefused() == "" {
		return nil
	}
	return fmt.Errorf("replay --dry-run: a replay would be refused: %s (nothing was replayed)", last.GetRefused())
}

// replayDone is how many matching dead letters a replay is done with:
// replayed, skipped, replayed by another replay meanwhile, or left in
// the archive for their deleted subscription.
func replayDone(p *rivorav1.ReplayResponse) int64 {
	return p.GetReplayed() + p.GetSkipped() + p.GetReplayedByAnother() + p.GetDeletedSubscriptionDeadLetters()
}

// maxDeletedShown bounds the deleted subscriptions a replay names (-o
// json lists those the agent sent).
const maxDeletedShown = 10

// deletedSubscriptionsText names a replay's deleted subscriptions:
// "subscription sub_a", "3 subscriptions (sub_a, sub_b, sub_c)", "… and
// N more".
func deletedSubscriptionsText(p *rivorav1.ReplayResponse) string {
	ids, n := p.GetDeletedSubscriptions(), p.GetDeletedSubscriptionCount()
	if n == 1 && len(ids) == 1 {
		return "subscription " + ids[0]
	}
	shown := ids[:min(len(ids), maxDeletedShown)]
	list := strings.Join(shown, ", ")
	if more := n - int64(len(shown)); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Sprintf("%d subscriptions (%s)", n, list)
}

// replayStopped says how far a replay that Ctrl-C stopped got (its last
// report: the server may have re-accepted a few more since), and that
// running it again resumes after them.
func replayStopped(last *rivorav1.ReplayResponse, dryRun bool) error {
	switch {
	case dryRun:
		return errors.New("replay --dry-run stopped (Ctrl-C) before its count; nothing was replayed")
	case last == nil:
		return errors.New("replay stopped (Ctrl-C) before its first report; run the same command again to resume (each dead letter re-accepted is marked, and a re-run skips it)")
	}
	return fmt.Errorf("replay stopped (Ctrl-C) with %d of %d dead letters done (%d replayed, %d skipped; a few more may have been since its last report); run the same command again to resume (each dead letter re-accepted is marked, and a re-run skips it)",
		replayDone(last), last.GetTotal(), last.GetReplayed(), last.GetSkipped())
}

// resumeHints tell, for a replay that stopped after it began (the agent
// serving it went away, say), how far it got and that it resumes.
func resumeHints(last *rivorav1.ReplayResponse, dryRun bool) map[connect.Code]string {
	if last == nil || dryRun {
		return nil
	}
	hint := fmt.Sprintf("%d of %d done before it stopped; run the same command again to resume (each dead letter re-accepted is marked)", replayDone(last), last.GetTotal())
	hints := map[connect.Code]string{}
	for _, code := range []connect.Code{connect.CodeInternal, connect.CodeUnknown, connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeAborted} {
		hints[code] = hint
	}
	return hints
}

// maxRenamedShown bounds the renamed dead letters a replay lists in a
// table (-o json lists them all).
const maxRenamedShown = 20

// showRenamed lists the idempotency_conflict dead letters a replay
// delivered under ids of their own.
func (e *env) showRenamed(renamed []*rivorav1.ReplayRename) error {
	if len(renamed) == 0 {
		return nil
	}
	fmt.Fprintf(e.out, "%d of them died as idempotency conflicts: their ids name other payloads, which receivers dedupe on, so each is delivered under an id of its own:\n", len(renamed))
	for _, r := range renamed[:min(len(renamed), maxRenamedShown)] {
		say(e.out, "  %s replayed as %s\n", r.GetEventId(), r.GetReplayedAs())
	}
	if n := len(renamed) - maxRenamedShown; n > 0 {
		fmt.Fprintf(e.out, "  … and %d more (-o json lists them all)\n", n)
	}
	return nil
}

func (e *env) showProgress(p *rivorav1.ReplayResponse, start time.Time, tty bool) {
	done := replayDone(p)
	total := max(p.GetTotal(), 1)
	rate := p.GetRatePerSecond()
	eta := "-"
	if rate > 0 && total > done {
		eta = (time.Duration(float64(total-done)/rate) * time.Second).Round(time.Second).String()
	}
	if !tty {
		left := ""
		if n := p.GetReplayedByAnother(); n > 0 {
			left += fmt.Sprintf(", %d by another replay", n)
		}
		if n := p.GetDeletedSubscriptionDeadLetters(); n > 0 {
			left += fmt.Sprintf(", %d left: subscription deleted", n)
		}
		fmt.Fprintf(e.out, "replay: %d/%d (%d replayed, %d skipped%s) %.0f/s\n", done, p.GetTotal(), p.GetReplayed(), p.GetSkipped(), left, rate)
		return
	}
	const width = 30
	filled := int(float64(width) * float64(done) / float64(total))
	bar := strings.Repeat("=", min(filled, width)) + strings.Repeat(" ", max(width-filled, 0))
	fmt.Fprintf(e.out, "\r[%s] %d/%d  %.0f/s  ETA %s  ", bar, done, p.GetTotal(), rate, eta)
}

func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
