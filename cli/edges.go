package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/rivora/rivora/internal/bytesize"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// edgesAbout is what `rivoractl edges --help` teaches first.
const edgesAbout = `An edge is a ` + "`rivora edge`" + ` process beside the apps that publish, far
from the cell or behind a link that breaks: it acknowledges each event once
it is stored in its own buffer, and the cell takes the buffer over the link
(a NATS leaf connection) whenever the link is up. It never delivers. An edge
registers with the control plane on its first connection and stays
registered, and forwarded, until it is removed here.`

// edgesColumns explains the columns of list and the fields of get.
const edgesColumns = `Columns (and -o json keys):
   NAME (name)                 the edge's --name
   CONNECTED (connected)       its link to the cell is up, as its last report
                               (every 2s) says, and that report is at most 6s
                               old; when false, why; "unknown" when its
                               reports stopped with the link up
   WATCHING (watching)         its config stream to the control plane is open
   LAST SEEN (lastSeen)        when the control plane last heard from it
                               (RFC 3339; "-", null in JSON, if not since the
                               control plane started)
   BUFFERED (bufferedEvents)   events it acknowledged that the cell has not
                               confirmed yet (the cell confirms in bulk: up
                               to ~1,000 it already stored may be counted)
   BYTES (bufferedBytes)       their size
   OLDEST (oldestBufferedAge)  how long the oldest unforwarded event has
                               waited: of those not yet sent while the link
                               is up, of all while it is down ("0s": nothing
                               waits)
   FORWARDED (forwardedTotal)  events the cell took since its buffer was created
BUFFERED, BYTES, OLDEST and FORWARDED are from the edge's last report:
when it is over 6s old and the edge is not known connected, they are
marked "(stale)" (JSON: "stale": true) and are as of LAST SEEN. Before
the edge's first report since the control plane started (a restart, a
new leader) they are unknown: BUFFERED "unknown" (JSON: null, as are
bytes, oldest, forwarded and maxBufferBytes), not 0.
JSON also has registeredAt, disconnectedSince (when its link went
down), maxBufferBytes (its --max-buffer) and bufferMaxAge (its
--buffer-max-age).`

func (e *env) edgesCommand() *ucli.Command {
	return &ucli.Command{
		Name:        "edges",
		Usage:       "see and remove the edges (`rivora edge`) that forward events into the cell",
		Description: edgesAbout,
		Action:      parentAction,
		Subcommands: []*ucli.Command{e.edgesList(), e.edgesGet(), e.edgesRemove()},
	}
}

func (e *env) edgesList() *ucli.Command {
	return &ucli.Command{
		Name:        "list",
		Usage:       "list the registered edges: link to the cell, unforwarded events, forwarded total",
		UsageText:   "rivoractl edges list [-o json]",
		Description: edgesAbout + "\n\n" + edgesColumns + "\n\n-o json prints a JSON array of those objects.",
		Action: func(c *ucli.Context) error {
			if err := exactArgs(c, 0, "no arguments"); err != nil {
				return err
			}
			ctx, cancel := callContext(c)
			defer cancel()
			resp, err := e.admin().ListEdges(ctx, connect.NewRequest(&rivorav1.ListEdgesRequest{}))
			if err != nil {
				return callFailed("list edges", err, nil)
			}
			now := time.Now()
			if e.output == "json" {
				out := make([]edgeJSON, 0, len(resp.Msg.GetEdges()))
				for _, s := range resp.Msg.GetEdges() {
					out = append(out, newEdgeJSON(s, now))
				}
				return writeIndentedJSON(e.out, out)
			}
			return writeEdges(e.out, resp.Msg.GetEdges(), now)
		},
	}
}

func (e *env) edgesGet() *ucli.Command {
	return &ucli.Command{
		Name:        "get",
		Usage:       "show one edge",
		ArgsUsage:   "NAME",
		UsageText:   "rivoractl edges get NAME [-o json]",
		Description: edgesAbout + "\n\n" + edgesColumns + "\n\n-o json prints one such object.",
		Action: func(c *ucli.Context) error {
			if err := exactArgs(c, 1, "one edge NAME"); err != nil {
				return err
			}
			name := c.Args().First()
			ctx, cancel := callContext(c)
			defer cancel()
			resp, err := e.admin().GetEdge(ctx, connect.NewRequest(&rivorav1.GetEdgeRequest{Name: name}))
			if err != nil {
				return callFailed(fmt.Sprintf("get edge %q", name), err, nil)
			}
			now := time.Now()
			s := resp.Msg.GetEdge()
			j := newEdgeJSON(s, now)
			if e.output == "json" {
				return writeIndentedJSON(e.out, j)
			}
			if s.GetBuffer() == nil {
				// Nothing reported since the control plane started: the
				// buffer is unknown, not empty.
				return fields(e.out,
					"NAME", j.Name,
					"CONNECTED", connectedText(s, now),
					"WATCHING", fmt.Sprint(j.Watching),
					"LAST SEEN", lastSeenText(s),
					"REGISTERED", fmtTime(s.GetRegisteredAt()),
					"BUFFERED", "unknown: no report since the control plane started (it may hold events the cell has not taken)",
					"OLDEST", "unknown",
					"FORWARDED", "unknown",
					"MAX BUFFER", "-",
					"ACCEPTING", acceptingText(nil, now),
				)
			}
			return fields(e.out,
				"NAME", j.Name,
				"CONNECTED", connectedText(s, now),
				"WATCHING", fmt.Sprint(j.Watching),
				"LAST SEEN", lastSeenText(s),
				"REGISTERED", fmtTime(s.GetRegisteredAt()),
				"BUFFERED", fmt.Sprintf("%d %s, %s%s", *j.BufferedEvents, plural(int(*j.BufferedEvents), "event"), bytesize.IEC(int64(*j.BufferedBytes)), asOf(s, now)),
				"OLDEST", *j.OldestBufferedAge+staleMark(j),
				"FORWARDED", fmt.Sprint(*j.ForwardedTotal)+staleMark(j),
				"MAX BUFFER", maxBufferText(j),
				"ACCEPTING", acceptingText(s.GetBuffer(), now)+staleMark(j),
			)
		},
	}
}

func (e *env) edgesRemove() *ucli.Command {
	return &ucli.Command{
		Name:      "remove",
		Aliases:   []string{"rm"},
		Usage:     "forget an edge: the cell stops forwarding its buffer",
		ArgsUsage: "NAME",
		UsageText: "rivoractl edges remove NAME [--force]",
		Description: `Removes edge NAME: the cell no longer takes its buffer (the agent that
runs partition 0 drops its source from INGEST). A running edge registers
again when it next connects, so stop it for good.

Refused unless the control plane knows the edge's buffer is empty: while
its last report counts unforwarded events, while that report is stale
(over 6s old: an edge cut off from the cell keeps accepting, so it may
hold more than it said) and when it has not reported since the control
plane started. --force removes it anyway: what it holds stays in its
buffer and never reaches the cell (unless it registers again).

So, to retire an edge:
   1. move its publishers elsewhere;
   2. wait until ` + "`rivoractl edges get NAME`" + ` shows it connected with BUFFERED 0;
   3. stop the edge (its reports stop too);
   4. rivoractl edges remove NAME --force

Examples:
   rivoractl edges remove lyon
   rivoractl edges remove lyon --force`,
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "force", Usage: "remove it even though its buffer may not be empty (it reported unforwarded events, or its report is stale or missing): what it holds is not forwarded any more"},
		},
		Action: func(c *ucli.Context) error {
			if err := exactArgs(c, 1, "one edge NAME"); err != nil {
				return err
			}
			name := c.Args().First()
			ctx, cancel := callContext(c)
			defer cancel()
			// Whether it runs now (its config stream is open): best effort,
			// the removal decides.
			before, _ := e.admin().GetEdge(ctx, connect.NewRequest(&rivorav1.GetEdgeRequest{Name: name}))
			if _, err := e.admin().RemoveEdge(ctx, connect.NewRequest(&rivorav1.RemoveEdgeRequest{Name: name, Force: c.Bool("force")})); err != nil {
				return callFailed(fmt.Sprintf("remove edge %q", name), err, map[connect.Code]string{
					connect.CodeFailedPrecondition: "see `rivoractl edges get " + name + "`; pass --force once the edge is stopped with nothing buffered, or to give up what it holds",
				})
			}
			if before != nil && before.Msg.GetEdge().GetWatching() {
				_, err := fmt.Fprintf(e.out, "Removed edge %s, but it is running: it registers again as soon as it reconnects, and the cell forwards its buffer again. Stop the edge to keep it removed.\n", name)
				return err
			}
			_, err := fmt.Fprintf(e.out, "Removed edge %s; the cell no longer forwards its buffer.\n", name)
			return err
		},
	}
}

// edgeJSON is one edge as `edges list|get -o json` print it (the keys are
// a contract). The buffer's figures are null while the edge has not
// reported since the control plane started: unknown, not 0.
type edgeJSON struct {
	Name              string  `json:"name"`
	Connected         bool    `json:"connected"`
	Watching          bool    `json:"watching"`
	LastSeen          *string `json:"lastSeen"`
	RegisteredAt      *string `json:"registeredAt"`
	DisconnectedSince *string `json:"disconnectedSince,omitempty"`
	BufferedEvents    *uint64 `json:"bufferedEvents"`
	BufferedBytes     *uint64 `json:"bufferedBytes"`
	OldestBufferedAge *string `json:"oldestBufferedAge"`
	ForwardedTotal    *uint64 `json:"forwardedTotal"`
	MaxBufferBytes    *uint64 `json:"maxBufferBytes"`
	BufferMaxAge      string  `json:"bufferMaxAge,omitempty"`
	// Stale: the buffer's figures are from a report too old to go by
	// (as of lastSeen).
	Stale bool `json:"stale,omitempty"`
}

func newEdgeJSON(s *rivorav1.EdgeStatus, now time.Time) edgeJSON {
	b := s.GetBuffer()
	j := edgeJSON{
		Name: s.GetName(), Connected: s.GetConnected(), Watching: s.GetWatching(),
		LastSeen: rfc3339(s.GetLastSeen()), RegisteredAt: rfc3339(s.GetRegisteredAt()), DisconnectedSince: rfc3339(b.GetDisconnectedSince()),
		Stale: staleReport(s, now),
	}
	if b == nil {
		return j
	}
	age := oldestAge(b, now).String()
	j.BufferedEvents, j.BufferedBytes, j.ForwardedTotal = new(b.GetBufferedEvents()), new(b.GetBufferedBytes()), new(b.GetForwardedTotal())
	j.OldestBufferedAge, j.MaxBufferBytes = &age, new(b.GetMaxBufferBytes())
	if b.GetBufferMaxAge() != nil {
		j.BufferMaxAge = shortDuration(b.GetBufferMaxAge().AsDuration())
	}
	return j
}

// lastSeenText is LAST SEEN in edges get: when the control plane last
// heard from the edge, or that it has not since it started.
func lastSeenText(s *rivorav1.EdgeStatus) string {
	if s.GetLastSeen() == nil {
		return "- (not since the control plane started)"
	}
	return fmtTime(s.GetLastSeen())
}

// staleReport tells whether s's buffer figures are from a report too old
// to go by, as the control plane judged it by its own clock (an
// operator's clock ahead of it took every report of a cut-off edge for
// stale).
func staleReport(s *rivorav1.EdgeStatus, _ time.Time) bool {
	return s.GetBuffer() != nil && s.GetReportStale()
}

// staleMark is what follows a figure of a stale report in a table.
func staleMark(j edgeJSON) string {
	if j.Stale {
		return " (stale)"
	}
	return ""
}

// asOf is what follows the figures of a stale report in edges get.
func asOf(s *rivorav1.EdgeStatus, now time.Time) string {
	switch {
	case !staleReport(s, now):
		return ""
	case s.GetLastSeen() == nil:
		return " (stale: as of a report before the control plane started)"
	}
	return fmt.Sprintf(" (stale: as of its last report, %s, %s ago)", fmtTime(s.GetLastSeen()), now.Sub(s.GetLastSeen().AsTime()).Truncate(time.Second))
}

// oldestAge is how long the oldest unforwarded event has waited, to the
// second (0 when none waits, or a clock ahead of ours).
func oldestAge(b *rivorav1.EdgeBuffer, now time.Time) time.Duration {
	if b.GetBufferedEvents() == 0 || b.GetOldestBuffered() == nil {
		return 0
	}
	return max(0, now.Sub(b.GetOldestBuffered().AsTime()).Truncate(time.Second))
}

// linkError is why the edge said its link to the cell is down ("" when
// it did not say).
func linkError(b *rivorav1.EdgeBuffer) string {
	if b.GetLinkError() == "" {
		return ""
	}
	return ": " + oneLine(b.GetLinkError())
}

// connectedText is CONNECTED: true, false and why, or unknown.
func connectedText(s *rivorav1.EdgeStatus, now time.Time) string {
	b := s.GetBuffer()
	switch {
	case s.GetConnected():
		return "true"
	case b == nil:
		return "false (no report yet)"
	case !b.GetCellConnected() && b.GetDisconnectedSince() != nil:
		return "false (link to the cell down since " + fmtTime(b.GetDisconnectedSince()) + linkError(b) + ")"
	case !b.GetCellConnected():
		return "false (link to the cell down" + linkError(b) + ")"
	default:
		// Its last report had the link up; it may still be: only the
		// edge's reports to the control plane stopped.
		return fmt.Sprintf("unknown (no report for %s; the last had the link up)", now.Sub(s.GetLastSeen().AsTime()).Truncate(time.Second))
	}
}

// fullShare is how full a buffer is, by its last report, when a publish
// may no longer fit: an event is refused whole when it does not.
const fullShare = 0.99

// acceptingText says whether the edge takes publishes, by its last
// report: it refuses them (resource_exhausted) once its buffer is full or
// its oldest unforwarded event is older than --buffer-max-age.
func acceptingText(b *rivorav1.EdgeBuffer, now time.Time) string {
	switch {
	case b == nil:
		return "- (no report yet)"
	case b.GetMaxBufferBytes() > 0 && float64(b.GetBufferedBytes()) >= fullShare*float64(b.GetMaxBufferBytes()):
		return fmt.Sprintf("no: its buffer is full (%s of %s): publishes are refused until the cell takes events", bytesize.IEC(int64(b.GetBufferedBytes())), bytesize.IEC(int64(b.GetMaxBufferBytes())))
	case b.GetBufferMaxAge() != nil && b.GetOldestBuffered() != nil && now.Sub(b.GetOldestBuffered().AsTime()) > b.GetBufferMaxAge().AsDuration():
		return fmt.Sprintf("no: its oldest unforwarded event is older than --buffer-max-age %s: publishes are refused until the cell takes it", fmtDuration(b.GetBufferMaxAge()))
	}
	return "yes"
}

func maxBufferText(j edgeJSON) string {
	if j.MaxBufferBytes == nil || *j.MaxBufferBytes == 0 && j.BufferMaxAge == "" {
		return "-"
	}
	return fmt.Sprintf("%s, %s", bytesize.IEC(int64(*j.MaxBufferBytes)), dash(j.BufferMaxAge))
}

func writeEdges(w io.Writer, edges []*rivorav1.EdgeStatus, now time.Time) error {
	tw := newTable(w)
	tw.row("NAME\tCONNECTED\tWATCHING\tLAST SEEN\tBUFFERED\tBYTES\tOLDEST\tFORWARDED\n")
	for _, s := range edges {
		j := newEdgeJSON(s, now)
		if j.BufferedEvents == nil {
			// No report since the control plane started: unknown, not 0.
			tw.row("%s\t%s\t%t\t%s\tunknown\t-\t-\t-\n", j.Name, connectedText(s, now), j.Watching, fmtTime(s.GetLastSeen()))
			continue
		}
		stale := staleMark(j)
		tw.row("%s\t%s\t%t\t%s\t%d%s\t%s%s\t%s%s\t%d%s\n", j.Name, connectedText(s, now), j.Watching, fmtTime(s.GetLastSeen()),
			*j.BufferedEvents, stale, bytesize.IEC(int64(*j.BufferedBytes)), stale, *j.OldestBufferedAge, stale, *j.ForwardedTotal, stale)
	}
	return tw.Flush()
}

// writeIndentedJSON prints v as indented JSON, as agents list does.
func writeIndentedJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
