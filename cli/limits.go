package cli

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rivora/rivora/internal/limitbounds"
	"github.com/rivora/rivora/internal/rates"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func (e *env) limitsCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "limits",
		Usage: "see and override a destination's limits during an incident",
		Description: `Limits come, per field, from the built-in defaults, the reviewed limits file
(its defaults, then its entry for the destination; reloaded when the file
changes), the destination's own settings, and — highest — a runtime
override. Overrides are audited (your token, reason, optional expiry), survive
restarts and show as drift from the file.

   rivoractl limits get orders
   rivoractl limits set orders --rate 10 --reason "partner asked us to slow down" --ttl 30m --wait
   rivoractl limits clear orders
   rivoractl limits diff`,
		Action: parentAction,
		Subcommands: []*ucli.Command{
			{
				Name:      "get",
				Usage:     "show effective limits and where each comes from",
				ArgsUsage: "DESTINATION",
				UsageText: "rivoractl limits get DESTINATION [-o json]",
				Description: `Shows, per limit, the EFFECTIVE value, the DESTINATION's own (set with
destinations create or update; - when unset), what the limits FILE gives,
and the SOURCE of the effective value (an override names its author, reason
and expiry). Once an override ends, a limit returns to the destination's
own value, else the file's.`,
				Action: e.getLimits,
			},
			{
				Name:      "set",
				Usage:     "override some limits at runtime (audited)",
				ArgsUsage: "DESTINATION",
				UsageText: `rivoractl limits set DESTINATION [--rate R] [--burst B] [--max-attempts N] [--window D]
    [--timeout D] [--max-in-flight N] --reason TEXT [--ttl 30m] [--wait]
   rivoractl limits set DESTINATION --rate R [...] --dry-run`,
				Description: `Overrides the given limits of DESTINATION in every agent, in place (nothing
pending moves). Fields not given keep their current override, if any.
--reason is required; --ttl makes the override expire by itself. An override
has one expiry for all its fields: a change without --ttl keeps the expiry
of the override in force, and one with --ttl sets it for the fields set
earlier too (the audit log says which). --ttl alone, with no limit, sets
when the override in force ends (refused when there is none).

It prints the effective limits and how long the destination's pending
events take to drain at the rate it would run at (the new limit; a
degraded destination keeps its cut rate below it), counted as destinations
health's DRAIN TIME: from what the partner delivers, less a stream arriving
on a backlog older than a minute (a lower bound: the partner's latency and
max_in_flight can slow it). With --max-attempts it
also says how many pending lane heads already used that many attempts or
more: each becomes a dead letter (reason max_attempts) at its next turn,
without another request. --dry-run prints the same and changes
nothing: no new config version, no audit entry (so it needs no --reason).

Examples:
   rivoractl limits set orders --rate 50 --dry-run
   rivoractl limits set orders --rate 10 --reason "WAF throttling us" --ttl 30m --wait
   rivoractl limits set orders --ttl 2h --reason "WAF fix ships tonight"`,
				Flags: []ucli.Flag{
					&ucli.Float64Flag{Name: "rate", Usage: "delivery `RATE` in events per second, 0.001 to 1e6", DefaultText: "unchanged"},
					&ucli.IntFlag{Name: "burst", Usage: fmt.Sprintf("`N` deliveries allowed at once above the rate, 1 to %d", limitbounds.MaxBurst), DefaultText: "unchanged"},
					&ucli.IntFlag{Name: "max-attempts", Usage: fmt.Sprintf("stop retrying an event after `N` attempts, 1 to %d", limitbounds.MaxAttempts), DefaultText: "unchanged"},
					durationFlagOf("window", "stop retrying an event this `DURATION` after acceptance", 0, "unchanged"),
					durationFlagOf("timeout", "bound one attempt to `DURATION`", 0, "unchanged"),
					&ucli.IntFlag{Name: "max-in-flight", Usage: fmt.Sprintf("at most `N` concurrent attempts, 1 to %d", limitbounds.MaxInFlight), DefaultText: "unchanged"},
					&ucli.StringFlag{Name: "reason", Usage: "why (required; goes to the audit log)"},
					durationFlagOf("ttl", "expire the override after `DURATION`", 0, "the current override's expiry, else never"),
					&ucli.BoolFlag{Name: "dry-run", Usage: "check the override and print the limits and drain time it would give; change nothing"},
					waitFlag(),
				},
				Action: e.setLimits,
			},
			{
				Name:      "clear",
				Usage:     "remove a destination's override",
				ArgsUsage: "DESTINATION",
				UsageText: "rivoractl limits clear DESTINATION [--reason TEXT] [--wait]",
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "reason", Usage: "why, for the audit log"},
					waitFlag(),
				},
				Action: e.clearLimits,
			},
			{
				Name:      "diff",
				Usage:     "list where effective limits differ from the limits file (drift)",
				UsageText: "rivoractl limits diff [-o json]",
				Description: `Lists, per destination and limit, where the effective value differs from
what the limits file gives: a runtime override's, or the destination's own
setting (destinations create or update). With no limits file (the control
plane's --limits), there is nothing reviewed to drift from: it lists the
runtime overrides in force, each beside the value its destination has
without it (WITHOUT OVERRIDE), which it returns to when the override ends.`,
				Action: e.diffLimits,
			},
		},
	}
}

func (e *env) getLimits(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one destination ID"); err != nil {
		return err
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.admin().GetLimits(ctx, connect.NewRequest(&rivorav1.GetLimitsRequest{DestinationId: c.Args().First()}))
	if err != nil {
		return callFailed("get limits", err, notFoundHint)
	}
	if e.output == "json" {
		return writeJSON(e.out, resp.Msg)
	}
	return e.writeLimits(resp.Msg)
}

var limitFieldNames = []string{"rate_per_second", "burst", "max_attempts", "window", "timeout", "max_in_flight"}

func limitText(l *rivorav1.Limits, field string) string {
	switch field {
	case "rate_per_second":
		return strconv.FormatFloat(l.GetRatePerSecond(), 'g', -1, 64) + "/s"
	case "burst":
		return fmt.Sprint(l.GetBurst())
	case "max_attempts":
		return fmt.Sprint(l.GetMaxAttempts())
	case "window":
		return fmtDuration(l.GetWindow())
	case "timeout":
		return fmtDuration(l.GetTimeout())
	case "max_in_flight":
		return fmt.Sprint(l.GetMaxInFlight())
	}
	return ""
}

func sourceText(s *rivorav1.LimitSource) string {
	if s == nil {
		return "-"
	}
	text := s.GetSource()
	if s.GetSource() == "override" {
		text += " by " + s.GetAuthor()
		if s.GetReason() != "" {
			text += ": " + s.GetReason()
		}
		if s.GetExpiresAt() != nil {
			text += " (until " + fmtTime(s.GetExpiresAt()) + ")"
		}
	}
	return text
}

func (e *env) writeLimits(l *rivorav1.GetLimitsResponse) error {
	tw := newTable(e.out)
	tw.row("LIMIT\tEFFECTIVE\tDESTINATION\tFILE\tSOURCE\n")
	for _, f := range limitFieldNames {
		own := "-" // unset: the file's (or the default)
		if v := limitText(l.GetDestination(), f); v != limitText(&rivorav1.Limits{}, f) {
			own = v
		}
		tw.row("%s\t%s\t%s\t%s\t%s\n", f, limitText(l.GetEffective(), f), own, limitText(l.GetFile(), f), sourceText(l.GetSources()[f]))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if l.GetLimitsFile() == "" {
		_, err := fmt.Fprintln(e.out, noLimitsFile)
		return err
	}
	return nil
}

// noLimitsFile says what FILE means when the control plane loaded none.
const noLimitsFile = "No limits file: FILE is Rivora's built-in defaults (the control plane's --limits loads a reviewed file)."

func (e *env) setLimits(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one destination ID"); err != nil {
		return err
	}
	req := &rivorav1.SetLimitsOverrideRequest{DestinationId: c.Args().First(), Reason: c.String("reason"), DryRun: c.Bool("dry-run")}
	if strings.TrimSpace(req.Reason) == "" && !req.DryRun {
		return usagef("--reason is required: say why the limits change (it goes to the audit log)")
	}
	any := false
	if c.IsSet("rate") {
		r := c.Float64("rate")
		if !rates.Valid(r) {
			return usagef("--rate %v: want %s", r, rates.Bound())
		}
		req.RatePerSecond, any = ptr(r), true
	}
	for _, f := range []struct {
		name string
		dst  **int32
	}{{"burst", &req.Burst}, {"max-attempts", &req.MaxAttempts}, {"max-in-flight", &req.MaxInFlight}} {
		if c.IsSet(f.name) {
			if c.Int(f.name) == 0 {
				// The server reads 0 as "not overridden".
				return usagef("--%s 0: an override needs a whole number from 1 to %d (`rivoractl limits clear` drops an override)", f.name, countMax[f.name])
			}
			n, err := countFlag(c, f.name)
			if err != nil {
				return err
			}
			*f.dst, any = ptr(n), true
		}
	}
	for _, f := range []struct {
		name string
		dst  **durationpb.Duration
	}{{"window", &req.Window}, {"timeout", &req.Timeout}} {
		if c.IsSet(f.name) {
			d, err := durationFlag(c, f.name)
			if err != nil {
				return err
			}
			*f.dst, any = d, true
		}
	}
	if !any && !c.IsSet("ttl") {
		return usagef("nothing to override: pass at least one of --rate, --burst, --max-attempts, --window, --timeout, --max-in-flight (or --ttl alone to set when the override in force ends)")
	}
	if c.IsSet("ttl") {
		if flagDuration(c, "ttl") <= 0 {
			return usagef("--ttl must be positive")
		}
		req.Ttl = durationpb.New(flagDuration(c, "ttl"))
	}
	if req.DryRun && c.Bool("wait") {
		return usagef("--dry-run changes nothing, so there is nothing to --wait for")
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.admin().SetLimitsOverride(ctx, connect.NewRequest(req))
	if err != nil {
		return callFailed("set limits override", err, notFoundHint)
	}
	m := resp.Msg
	if !req.DryRun {
		return e.limitsChanged(c, m.GetLimits(), m.GetVersion(), func() { e.writeDrain(m) })
	}
	if e.output == "json" {
		return writeJSON(e.out, m)
	}
	fmt.Fprintln(e.out, "dry run: nothing changed. The override would give:")
	if err := e.writeLimits(m.GetLimits()); err != nil {
		return err
	}
	e.writeDrain(m)
	return nil
}

// writeDrain says how long the pending events take at the rate the
// destination would run at (as destinations health's DRAIN TIME).
func (e *env) writeDrain(m *rivorav1.SetLimitsOverrideResponse) {
	rate := e.runRateText(m)
	arrivals := m.GetArrivalsPerSecond()
	switch {
	case m.GetNoDrainReason() != "":
		say(e.out, "%d pending events do not drain now: %s\n", m.GetPendingEvents(), m.GetNoDrainReason())
	case m.GetProjectedDrainTime() != nil && arrivals > 0:
		fmt.Fprintf(e.out, "%d pending events drain in %s at %s, less the %.3g/s arriving\n", m.GetPendingEvents(), drainText(m.GetProjectedDrainTime()), rate, arrivals)
	case m.GetProjectedDrainTime() != nil:
		fmt.Fprintf(e.out, "%d pending events drain in %s at %s\n", m.GetPendingEvents(), drainText(m.GetProjectedDrainTime()), rate)
	case m.GetPendingEvents() > 0 && arrivals > 0:
		fmt.Fprintf(e.out, "%d pending events never drain at %s: events arrive at %.3g/s, no slower (the backlog grows)\n", m.GetPendingEvents(), rate, arrivals)
	case m.GetPendingEvents() > 0:
		fmt.Fprintf(e.out, "%d pending events do not drain at %s\n", m.GetPendingEvents(), rate)
	}
	if n := m.GetHeadsAtMaxAttempts(); n > 0 {
		heads := "lane heads"
		if n == 1 {
			heads = "lane head"
		}
		fmt.Fprintf(e.out, "%d pending %s already used %d attempts or more: each becomes a dead letter (reason max_attempts) at its next turn, without another request\n", n, heads, m.GetLimits().GetEffective().GetMaxAttempts())
	}
	if n := m.GetEventsPastWindow(); n > 0 {
		events := "events are"
		if n == 1 {
			events = "event is"
		}
		fmt.Fprintf(e.out, "%d pending %s already older than the %s window (from acceptance, paused time left out): each becomes a dead letter (reason window) at its next failure, not retried; while the destination is parked, they all become dead letters at once\n", n, events, shortDuration(m.GetLimits().GetEffective().GetWindow().AsDuration()))
	}
}

func (e *env) clearLimits(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one destination ID"); err != nil {
		return err
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.admin().ClearLimitsOverride(ctx, connect.NewRequest(&rivorav1.ClearLimitsOverrideRequest{DestinationId: c.Args().First(), Reason: c.String("reason")}))
	if err != nil {
		return callFailed("clear limits override", err, notFoundHint)
	}
	return e.limitsChanged(c, resp.Msg.GetLimits(), resp.Msg.GetVersion(), nil)
}

// limitsChanged shows a destination's limits after a change (and, in a
// table, more when more is not nil), then honours --wait.
func (e *env) limitsChanged(c *ucli.Context, l *rivorav1.GetLimitsResponse, version uint64, more func()) error {
	var err error
	if e.output == "json" {
		err = writeJSON(e.out, l)
	} else if err = e.writeLimits(l); err == nil && more != nil {
		more()
	}
	if err != nil {
		return err
	}
	return e.afterChange(c, version)
}

func (e *env) diffLimits(c *ucli.Context) error {
	if err := exactArgs(c, 0, "no arguments"); err != nil {
		return err
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.admin().DiffLimits(ctx, connect.NewRequest(&rivorav1.DiffLimitsRequest{}))
	if err != nil {
		return callFailed("diff limits", err, nil)
	}
	if e.output == "json" {
		return writeJSONArray(e.out, resp.Msg.GetDrifts())
	}
	return e.writeDrifts(resp.Msg)
}

// writeDrifts is limits diff's table. With no limits file there is no
// reviewed value to drift from: the server lists only the runtime
// overrides, each beside what its destination has without it.
func (e *env) writeDrifts(resp *rivorav1.DiffLimitsResponse) error {
	drifts := resp.GetDrifts()
	noFile := resp.GetLimitsFile() == ""
	switch {
	case len(drifts) == 0 && noFile:
		_, err := fmt.Fprintln(e.out, "No limits file (the control plane's --limits loads one), and no runtime override in force: every destination runs its own settings, else Rivora's built-in defaults.")
		return err
	case len(drifts) == 0:
		_, err := fmt.Fprintf(e.out, "No drift: every destination runs the values of the limits file %s.\n", resp.GetLimitsFile())
		return err
	case noFile:
		fmt.Fprintln(e.out, "No limits file (the control plane's --limits loads one): the runtime overrides in force, each beside what its destination has without it.")
	}
	sort.SliceStable(drifts, func(i, j int) bool { return drifts[i].GetDestinationId() < drifts[j].GetDestinationId() })
	tw := newTable(e.out)
	base := "FILE"
	if noFile {
		base = "WITHOUT OVERRIDE"
	}
	tw.row("DESTINATION\tLIMIT\t%s\tEFFECTIVE\tSOURCE\n", base)
	for _, d := range drifts {
		tw.row("%s\t%s\t%s\t%s\t%s\n", d.GetDestinationId(), d.GetField(), d.GetFileValue(), d.GetEffectiveValue(), sourceText(d.GetSource()))
	}
	return tw.Flush()
}
