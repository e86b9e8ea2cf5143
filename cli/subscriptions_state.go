package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Pause, resume and secret rotation of a subscription, and how
// subscriptions are printed.

func (e *env) subscriptionsPause() *ucli.Command {
	return &ucli.Command{
		Name:      "pause",
		Usage:     "hold a subscription's events: they keep being accepted, nothing is dropped",
		ArgsUsage: "ID",
		UsageText: "rivoractl subscriptions pause ID --reason TEXT [--wait] [-o json]",
		Description: `Stops every delivery attempt of subscription ID's events. New events keep
being accepted and routed to it and wait in their lanes; the time spent
paused does not count against their retry window. Resume with
` + "`rivoractl subscriptions resume ID`" + `: they drain in lane order.
--reason is required: the audit log and subscriptions get say it.

Example:
   rivoractl subscriptions pause sub_0123456789abcdef --reason "customer migrating its endpoint"`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "reason", Usage: "why, as `TEXT` (required; for the audit log and subscriptions get)"},
			waitFlag(),
		},
		Action: func(c *ucli.Context) error {
			if err := exactArgs(c, 1, "one subscription ID"); err != nil {
				return err
			}
			id := c.Args().First()
			if strings.TrimSpace(c.String("reason")) == "" {
				return usagef("--reason is required: say why the subscription's events are held (it goes to the audit log and subscriptions get)")
			}
			ctx, cancel := callContext(c)
			defer cancel()
			resp, err := e.subscriptions().PauseSubscription(ctx, connect.NewRequest(&rivorav1.PauseSubscriptionRequest{Id: id, Reason: c.String("reason")}))
			if err != nil {
				return callFailed(fmt.Sprintf("pause subscription %q", id), err, subscriptionNotFoundHint)
			}
			return e.afterSubscriptionChange(c, resp.Msg.GetSubscription(), resp.Msg.GetVersion(),
				fmt.Sprintf("Paused subscription %s: its events wait until `rivoractl subscriptions resume %s`.", id, id))
		},
	}
}

func (e *env) subscriptionsResume() *ucli.Command {
	return &ucli.Command{
		Name:      "resume",
		Usage:     "let a paused subscription's events drain, in lane order",
		ArgsUsage: "ID",
		UsageText: "rivoractl subscriptions resume ID [--wait] [-o json]",
		Description: `Resumes delivery of subscription ID's events. What it held drains in lane
order, paced by its destination's budget.

Example:
   rivoractl subscriptions resume sub_0123456789abcdef --wait`,
		Flags: []ucli.Flag{waitFlag()},
		Action: func(c *ucli.Context) error {
			if err := exactArgs(c, 1, "one subscription ID"); err != nil {
				return err
			}
			id := c.Args().First()
			ctx, cancel := callContext(c)
			defer cancel()
			resp, err := e.subscriptions().ResumeSubscription(ctx, connect.NewRequest(&rivorav1.ResumeSubscriptionRequest{Id: id}))
			if err != nil {
				return callFailed(fmt.Sprintf("resume subscription %q", id), err, subscriptionNotFoundHint)
			}
			return e.afterSubscriptionChange(c, resp.Msg.GetSubscription(), resp.Msg.GetVersion(), fmt.Sprintf("Resumed subscription %s.", id))
		},
	}
}

// afterSubscriptionChange prints a paused or resumed subscription (JSON)
// or one line saying what happened, then honours --wait.
func (e *env) afterSubscriptionChange(c *ucli.Context, s *rivorav1.Subscription, version uint64, line string) error {
	var err error
	if e.output == "json" {
		err = writeJSON(e.out, s)
	} else {
		_, err = fmt.Fprintln(e.out, line)
	}
	if err != nil {
		return err
	}
	return e.afterChange(c, version)
}

func (e *env) subscriptionsRotateSecret() *ucli.Command {
	return &ucli.Command{
		Name:      "rotate-secret",
		Usage:     "give a subscription a new signing secret, keeping the old one signing for a grace period",
		ArgsUsage: "ID",
		UsageText: "rivoractl subscriptions rotate-secret ID [--secret whsec_…] [--grace 24h] [--wait] [-o json]",
		Description: `Gives subscription ID a new signing secret (generated unless --secret) and
prints it, once: store it with the receiver. Until the grace period ends,
every delivery carries two signatures (the new and the old secret; a
receiver checking either accepts it), so the receiver can switch whenever it
likes. --grace 0 stops the old secret at once; at most 168h (7 days). A
subscription signed with its destination's secret gets its own secret this
way: the destination's secret is then the old one, signing too for the
grace (the subscription never holds it; OLD SECRET says so).

Example:
   rivoractl subscriptions rotate-secret sub_0123456789abcdef --grace 48h`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "secret", Usage: "the new signing `SECRET` (whsec_ + base64 key of at least 16 bytes)", DefaultText: "generated"},
			durationFlagOf("grace", "how long the previous secret keeps signing too (`DURATION`, 0 to 168h)", 24*time.Hour, ""),
			waitFlag(),
		},
		Action: e.rotateSubscriptionSecret,
	}
}

func (e *env) rotateSubscriptionSecret(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one subscription ID"); err != nil {
		return err
	}
	id := c.Args().First()
	secret, grace, err := rotationFlags(c)
	if err != nil {
		return err
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.subscriptions().RotateSubscriptionSecret(ctx, connect.NewRequest(&rivorav1.RotateSubscriptionSecretRequest{Id: id, Secret: secret, Grace: grace}))
	if err != nil {
		return callFailed(fmt.Sprintf("rotate the secret of subscription %q", id), err, subscriptionNotFoundHint)
	}
	s := resp.Msg.GetSubscription()
	previous, until := subscriptionPrevious(s)
	return e.printRotated(c, s, rotated{s.GetId(), s.GetSecret(), previous, until}, resp.Msg.GetVersion())
}

// writeSubscription prints one subscription as aligned fields; pending is
// printed when known.
func writeSubscription(w io.Writer, s *rivorav1.Subscription, pending *int64) error {
	kv := []string{
		"ID", s.GetId(),
		"CUSTOMER", s.GetCustomerId(),
		"DESTINATION", s.GetDestinationId(),
		"TYPES", strings.Join(s.GetTypes(), ", "),
		"FILTER", dash(s.GetFilter()),
		"DELIVERS TO", deliveryText(s),
		"SECRET", subscriptionSecretText(s),
	}
	if previous, until := subscriptionPrevious(s); previous != "" {
		kv = append(kv, "OLD SECRET", previousSecretText(previous, until))
	}
	if len(s.GetHeaders()) > 0 {
		kv = append(kv, "HEADERS", headersText(s.GetHeaders()))
	}
	kv = append(kv,
		"STATE", subscriptionState(s),
		"DESTINATION STATE", dash(s.GetDestinationState()),
	)
	if s.GetDescription() != "" {
		kv = append(kv, "DESCRIPTION", oneLine(s.GetDescription()))
	}
	kv = append(kv, "CREATED", fmtTime(s.GetCreatedAt()), "UPDATED", fmtTime(s.GetUpdatedAt()))
	if pending != nil {
		kv = append(kv, "PENDING", strconv.FormatInt(*pending, 10))
	}
	return fields(w, kv...)
}

// writeSubscriptions prints subscriptions as a table, one per row.
func writeSubscriptions(w io.Writer, subs []*rivorav1.Subscription) error {
	t := newTable(w)
	t.row("ID\tCUSTOMER\tDESTINATION\tTYPES\tFILTER\tDELIVERS TO\tSTATE\tDESTINATION STATE\n")
	for _, s := range subs {
		t.row("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			s.GetId(), s.GetCustomerId(), s.GetDestinationId(), strings.Join(s.GetTypes(), ","),
			dash(oneLine(s.GetFilter())), deliveryText(s), subscriptionState(s), dash(s.GetDestinationState()))
	}
	return t.Flush()
}

// deliveryText is where a subscription's deliveries go.
func deliveryText(s *rivorav1.Subscription) string {
	if u := s.GetDeliveryUrl(); u != "" {
		return u
	}
	if u := s.GetUrl(); u != "" {
		return u
	}
	if p := s.GetPath(); p != "" {
		return p + " on the destination's URL"
	}
	return "the destination's URL"
}

// subscriptionSecretText is the subscription's own secret where the server
// sends it (create, rotate), its fingerprint elsewhere, or which secret
// signs when it has none of its own.
func subscriptionSecretText(s *rivorav1.Subscription) string {
	if s.GetSecret() == "" && s.GetSecretFingerprint() == "" {
		return fmt.Sprintf("- (destination %s's secret signs)", s.GetDestinationId())
	}
	return secretText(s.GetSecret(), s.GetSecretFingerprint())
}

// subscriptionState is "active", "paused" or "paused: REASON" (the reason
// of the pause still running).
func subscriptionState(s *rivorav1.Subscription) string {
	if !s.GetPaused() {
		return "active"
	}
	reason := ""
	if ps := s.GetPauses(); len(ps) > 0 && ps[len(ps)-1].GetEnd() == nil {
		reason = ps[len(ps)-1].GetReason()
	}
	return destinationState(true, false, oneLine(reason))
}

// subscriptionPrevious is what signs a subscription's deliveries beside
// its secret after a rotation, and until when: the previous secret (its
// fingerprint) or, after its first own secret, its destination's secret
// ("" : nothing).
func subscriptionPrevious(s *rivorav1.Subscription) (string, *timestamppb.Timestamp) {
	if fp := s.GetPreviousSecretFingerprint(); fp != "" {
		return fp, s.GetPreviousSecretExpiresAt()
	}
	if until := s.GetDestinationSecretUntil(); until != nil {
		return "the destination's secret", until
	}
	return "", nil
}
