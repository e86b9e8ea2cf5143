package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"
	"google.golang.org/protobuf/types/known/durationpb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func (e *env) destinationsHealth() *ucli.Command {
	return &ucli.Command{
		Name:      "health",
		Usage:     "show budgets, health state and backlog per destination and customer",
		ArgsUsage: "[ID]",
		UsageText: "rivoractl destinations health [ID] [-o json]",
		Description: `For each destination (or only ID): its state (healthy, degraded after
throttling, parked while failing: one probe per second; paused by an
operator, or disabled after its partner answered 410 Gone; unusable
while the agent that owns it cannot build its config, e.g. a key its
version does not parse, with why: its events are kept, not attempted,
until a config of it builds there; then the budget's own state follows,
as budgetState in -o json), configured and
current rate, the drain time (how long its pending events take at the
current rate times the share of the last minute's attempts delivered —
never when none was —, less the events arriving on a backlog older than a
minute; a backlog that arrived within the minute is those arrivals, not
counted twice; a lower bound, as the partner's latency and max_in_flight
can slow it), the last minute's attempts with their 429 and 5xx share, the
learned rate (the partner's ceiling as throttling found
it: the rate_per_second to put in the limits file; shown while the budget
remembers one, and said to be older than the partner's outage while it is
parked or failing more than it throttles), tokens, attempts in flight, backlog per customer (lanes due
now, lanes waiting for a retry, pending events), the last attempt statuses
and the last state change with its cause.

Examples:
   rivoractl destinations health
   rivoractl destinations health orders -o json`,
		Action: e.showHealth,
	}
}

// drainText is a drain time rounded for reading: seconds under a minute
// ("<1s" for less), then minutes, then hours.
func drainText(d *durationpb.Duration) string {
	t := d.AsDuration()
	switch {
	case t < time.Second:
		return "<1s"
	case t < time.Minute:
		return t.Round(time.Second).String()
	case t < time.Hour:
		return shortDuration(t.Round(time.Second))
	default:
		return shortDuration(t.Round(time.Minute))
	}
}

// learnedRateText is the learned rate with what to make of it: the rate to
// configure while the partner throttles (or has not failed otherwise
// since), not while it is down or failing more than it throttles: the
// ceiling was learned before, and the partner may come back with another.
func learnedRateText(h *rivorav1.DestinationHealth) string {
	l := h.GetLearnedRate()
	switch {
	case budgetState(h) == "parked":
		return fmt.Sprintf("%.4g/s, learned before the partner stopped answering: check it once the partner is back", l)
	case h.GetServerErrorShare()+h.GetNoAnswerShare() > h.GetThrottledShare():
		return fmt.Sprintf("%.4g/s, learned before the partner failed more than it throttled (5xx, no answer): not a rate to set now", l)
	}
	return fmt.Sprintf("%.4g/s: the partner throttles above this (set rate_per_second to it)", l)
}

// arrivalRate is the events per second that joined the destination's
// lanes over the last minute.
func arrivalRate(h *rivorav1.DestinationHealth) float64 {
	return float64(h.GetArrivalsLastMinute()) / 60
}

// streamArriving reports whether the drain time takes arrivals off the
// rate: any in the last minute, taken as a stream that goes on.
func streamArriving(h *rivorav1.DestinationHealth) bool {
	return arrivalRate(h) > 0
}

// deliveredPercent is the share of the last minute's attempts the partner
// accepted (2xx), in percent: what drains the backlog.
func deliveredPercent(h *rivorav1.DestinationHealth) float64 {
	failed := h.GetThrottledShare() + h.GetServerErrorShare() + h.GetClientErrorShare() + h.GetNoAnswerShare()
	return max(100*(1-failed), 0)
}

// budgetState is h's budget's own state, paused or not (state says
// paused or disabled first); a server older than budget_state answered it
// as state.
func budgetState(h *rivorav1.DestinationHealth) string {
	if b := h.GetBudgetState(); b != "" {
		return b
	}
	return h.GetState()
}

// unusableText says why the agent that owns h's destination cannot build
// its config, as a pause's reason is said: "unusable: REASON".
func unusableText(h *rivorav1.DestinationHealth) string {
	// On one line, escaped, but whole (oneLine cuts a partner's error):
	// why is what the operator mends.
	return "unusable: " + visible(strings.Join(strings.Fields(h.GetUnusable()), " "))
}

func noDrainCause(h *rivorav1.DestinationHealth) string {
	switch {
	case h.GetPaused() || h.GetDisabled():
		return destinationState(h.GetPaused(), h.GetDisabled(), h.GetPauseReason())
	case h.GetUnusable() != "":
		return unusableText(h)
	case budgetState(h) == "parked":
		return "parked: only probes go out until the partner answers"
	case h.GetAttemptsLastMinute() > 0 && deliveredPercent(h) < 0.5:
		return fmt.Sprintf("none of the last minute's %d attempts was delivered: %.0f%% 429, %.0f%% 5xx, %.0f%% other 4xx, %.0f%% no answer", h.GetAttemptsLastMinute(), 100*h.GetThrottledShare(), 100*h.GetServerErrorShare(), 100*h.GetClientErrorShare(), 100*h.GetNoAnswerShare())
	case streamArriving(h):
		return fmt.Sprintf("events arrive at %.3g/s, no slower than it delivers: the backlog grows", arrivalRate(h))
	case h.GetCurrentRate() > 0:
		return "so slow it takes more than a century"
	}
	return "its rate is 0"
}

// drainRateText is h's drain time with what it is counted at: the
// current rate, the share of it delivered when not all was, and the
// arrivals it takes off (a stream on a backlog older than a minute).
func drainRateText(h *rivorav1.DestinationHealth) string {
	text := drainText(h.GetDrainTime()) + " at the current rate"
	if p := deliveredPercent(h); h.GetAttemptsLastMinute() > 0 && p < 99.5 {
		text += fmt.Sprintf(", %.0f%% of it delivered", p)
	}
	if streamArriving(h) {
		text += fmt.Sprintf(", less the %.3g/s arriving", arrivalRate(h))
	}
	return text
}

func (e *env) showHealth(c *ucli.Context) error {
	if c.NArg() > 1 {
		return usagef("health takes at most one destination ID, got %d arguments", c.NArg())
	}
	id := c.Args().First()
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.admin().GetDestinationHealth(ctx, connect.NewRequest(&rivorav1.GetDestinationHealthRequest{DestinationId: id}))
	if err != nil {
		return callFailed("destination health", err, notFoundHint)
	}
	if e.output == "json" {
		return writeJSONArray(e.out, resp.Msg.GetDestinations())
	}
	if len(resp.Msg.GetDestinations()) == 0 {
		fmt.Fprintln(e.out, "no destinations")
		return nil
	}
	for i, h := range resp.Msg.GetDestinations() {
		if i > 0 {
			fmt.Fprintln(e.out)
		}
		tw := newTable(e.out)
		tw.row("DESTINATION\t%s\n", h.GetDestinationId())
		switch {
		case h.GetPaused() || h.GetDisabled():
			// No attempt goes out whatever the budget says; an unusable
			// config is said too, as a resume alone does not send then.
			state := destinationState(h.GetPaused(), h.GetDisabled(), h.GetPauseReason())
			if h.GetUnusable() != "" {
				state += "; " + unusableText(h)
			}
			resume := fmt.Sprintf("resume with `rivoractl destinations resume %s`", h.GetDestinationId())
			if h.GetUnusable() != "" {
				resume += ", and mend its config (a resume alone sends nothing while its owner cannot build it)"
			}
			tw.row("STATE\t%s (budget %s); %s\n", state, budgetState(h), resume)
		case h.GetUnusable() != "":
			tw.row("STATE\t%s (budget %s); the agent that owns it cannot build its config: no attempt goes out until a config of it builds there\n", unusableText(h), budgetState(h))
		default:
			tw.row("STATE\t%s\n", h.GetState())
		}
		tw.row("CLASS\t%s\n", className(h.GetPriorityClass()))
		tw.row("RATE\t%.4g/s of %.4g/s configured\n", h.GetCurrentRate(), h.GetConfiguredRate())
		if h.GetLearnedRate() > 0 {
			tw.row("LEARNED RATE\t%s\n", learnedRateText(h))
		}
		tw.row("TOKENS\t%.1f\n", h.GetTokens())
		tw.row("IN FLIGHT\t%d of %d\n", h.GetInFlight(), h.GetMaxInFlight())
		tw.row("PENDING\t%d events\n", h.GetPendingEvents())
		switch {
		case h.GetPendingEvents() == 0:
		case h.GetDrainTime() != nil:
			tw.row("DRAIN TIME\t%s\n", drainRateText(h))
		case !h.GetPaused() && !h.GetDisabled() && h.GetUnusable() == "" && budgetState(h) != "parked" && h.GetCurrentRate() > 0:
			tw.row("DRAIN TIME\tnever at this rate (%s)\n", noDrainCause(h))
		default:
			tw.row("DRAIN TIME\tnever: no attempt goes out (%s)\n", noDrainCause(h))
		}
		if n := h.GetArrivalsLastMinute(); n > 0 {
			tw.row("ARRIVING\t%d events in the last minute (%.3g/s)\n", n, arrivalRate(h))
		}
		if age := h.GetOldestPendingAge(); age != nil {
			tw.row("OLDEST PENDING\t%s ago\n", drainText(age))
		}
		if n := h.GetAttemptsLastMinute(); n > 0 {
			tw.row("LAST MINUTE\t%d attempts: %.0f%% answered 429, %.0f%% 5xx, %.0f%% other 4xx (refused events), %.0f%% no answer\n", n, 100*h.GetThrottledShare(), 100*h.GetServerErrorShare(), 100*h.GetClientErrorShare(), 100*h.GetNoAnswerShare())
		}
		if n := h.GetUnarchivedDeadLetters(); n > 0 {
			tw.row("UNARCHIVED\t%d dead letters wait for the archive\n", n)
		}
		if h.GetHoldUntil() != nil {
			tw.row("HELD UNTIL\t%s (the partner's Retry-After; `rivoractl destinations resume %s` ends it now)\n", fmtTime(h.GetHoldUntil()), h.GetDestinationId())
		}
		if na := h.GetClientCertificateNotAfter(); na != nil {
			note := ""
			switch {
			case !na.AsTime().After(time.Now()):
				note = "; EXPIRED: the partner refuses it; replace it with `rivoractl destinations update " + h.GetDestinationId() + " --client-cert FILE --client-key FILE`"
			case h.GetClientCertificateExpiring():
				note = "; EXPIRING: replace it with `rivoractl destinations update " + h.GetDestinationId() + " --client-cert FILE --client-key FILE`"
			}
			tw.row("CLIENT CERT\texpires %s%s\n", fmtTime(na), note)
		}
		if at := h.GetClientCertificateRefusedAt(); at != nil {
			tw.row("CERT REFUSED\tthe partner refused the new client certificate (last at %s): attempts go with the replaced one until %s, when its overlap ends; fix the partner's trust or the certificate before then (--client-cert-overlap moves that end)\n", fmtTime(at), fmtTime(h.GetClientCertificateFallbackUntil()))
		}
		if st := h.GetLastStatuses(); len(st) > 0 {
			parts := make([]string, len(st))
			for i, s := range st {
				parts[i] = fmt.Sprint(s)
				if s == 0 {
					parts[i] = "err"
				}
			}
			tw.row("LAST STATUSES\t%s\n", strings.Join(parts, " "))
		}
		if t := h.GetLastTransition(); t != nil {
			tw.row("LAST CHANGE\t%s %s → %s: %s\n", fmtTime(t.GetAt()), t.GetFrom(), t.GetTo(), oneLine(t.GetCause()))
		}
		if at := h.GetLastFailureAt(); at != nil && (h.GetLastTransition() == nil || at.AsTime().After(h.GetLastTransition().GetAt().AsTime())) {
			tw.row("LAST FAILURE\t%s: %s\n", fmtTime(at), oneLine(h.GetLastFailure()))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(h.GetCustomers()) > 0 {
			tw = newTable(e.out)
			tw.row("  CUSTOMER\tWEIGHT\tDUE LANES\tWAITING LANES\tIN FLIGHT\tPENDING\n")
			for _, cu := range h.GetCustomers() {
				tw.row("  %s\t%g\t%d\t%d\t%d\t%d\n", cu.GetCustomerId(), cu.GetWeight(), cu.GetDueLanes(), cu.GetWaitingLanes(), cu.GetInFlight(), cu.GetPendingEvents())
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// runRateText is the rate a limits change's drain time is counted at:
// the new limit, or, for a degraded destination cut below it, its current
// rate, which it keeps under a raised limit (recovering from there as the
// partner lets it) — as the control plane projects it. The new limit when
// the health cannot be read.
func (e *env) runRateText(m *rivorav1.SetLimitsOverrideResponse) string {
	limit := m.GetLimits().GetEffective().GetRatePerSecond()
	text := strconv.FormatFloat(limit, 'g', 4, 64) + "/s"
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	resp, err := e.admin().GetDestinationHealth(ctx, connect.NewRequest(&rivorav1.GetDestinationHealthRequest{DestinationId: m.GetLimits().GetDestinationId()}))
	if err != nil || len(resp.Msg.GetDestinations()) != 1 {
		return text
	}
	if h := resp.Msg.GetDestinations()[0]; budgetState(h) == "degraded" && h.GetCurrentRate() < limit {
		return fmt.Sprintf("%s/s (degraded: it keeps its cut rate under the new limit of %s, and recovers from there as the partner lets it)", strconv.FormatFloat(h.GetCurrentRate(), 'g', 4, 64), text)
	}
	return text
}
