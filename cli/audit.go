package cli

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func (e *env) auditCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "audit",
		Usage:     "list configuration changes: limits file reloads, overrides, priorities, pauses, destinations",
		UsageText: "rivoractl audit [--destination ID] [--limit N] [-o json]",
		Description: `Every change to the configuration is appended to the control plane's audit
log with its time, config version, author (the name and id of the API
token that made it; "rivora" or "system" for Rivora's own changes) and
reason.

Examples:
   rivoractl audit
   rivoractl audit --destination orders --limit 20`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "destination", Usage: "only changes of destination `ID`"},
			&ucli.IntFlag{Name: "limit", Value: 100, Usage: "show the newest `N` entries (1 to 1000000)"},
		},
		Action: func(c *ucli.Context) error {
			if err := exactArgs(c, 0, "no arguments"); err != nil {
				return err
			}
			limit, err := limitFlag(c, 1_000_000)
			if err != nil {
				return err
			}
			ctx, cancel := callContext(c)
			defer cancel()
			resp, err := e.admin().ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{Limit: limit, DestinationId: c.String("destination")}))
			if err != nil {
				return callFailed("list audit log", err, nil)
			}
			entries := resp.Msg.GetEntries()
			if len(entries) == 0 {
				e.noteUnknownDestination(ctx, c.String("destination"))
			}
			if e.output == "json" {
				return writeJSONArray(e.out, entries)
			}
			if len(entries) == 0 {
				_, err := fmt.Fprintln(e.out, "No audit entries match.")
				return err
			}
			tw := newTable(e.out)
			tw.row("TIME\tVERSION\tAUTHOR\tACTION\tDESTINATION\tDETAIL\tREASON\n")
			for _, a := range entries {
				tw.row("%s\t%d\t%s\t%s\t%s\t%s\t%s\n", fmtTime(a.GetAt()), a.GetVersion(), dash(auditAuthor(a)), a.GetAction(), dash(a.GetDestinationId()), dash(a.GetDetail()), dash(a.GetReason()))
			}
			return tw.Flush()
		},
	}
}

// auditAuthor is the author with the token's id, "ci-deploy (tok_…)", when
// the change was made with an API token.
func auditAuthor(a *rivorav1.AuditEntry) string {
	if a.GetTokenId() == "" {
		return a.GetAuthor()
	}
	return a.GetAuthor() + " (" + a.GetTokenId() + ")"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// noteUnknownDestination says, on stderr, that a filter named a destination
// that is not configured, when the list came back empty: a mistyped name
// would otherwise read as "nothing happened there". A deleted destination
// keeps its dead letters and audit entries, so the list itself is not
// refused. Nothing is said when the lookup fails (a role that may not read
// destinations, say): the empty list stands on its own.
func (e *env) noteUnknownDestination(ctx context.Context, id string) {
	if id == "" {
		return
	}
	_, err := e.admin().GetDestination(ctx, connect.NewRequest(&rivorav1.GetDestinationRequest{Id: id}))
	if connect.CodeOf(err) == connect.CodeNotFound {
		fmt.Fprintf(e.errOut, "note: no destination %q is configured (see `rivoractl destinations list`); a deleted destination keeps its dead letters and audit entries\n", id)
	}
}
