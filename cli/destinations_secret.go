package cli

import (
	"fmt"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func (e *env) destinationsRotateSecret() *ucli.Command {
	return &ucli.Command{
		Name:      "rotate-secret",
		Usage:     "replace a destination's signing secret, keeping the old one signing for a grace period",
		ArgsUsage: "ID",
		UsageText: "rivoractl destinations rotate-secret ID [--secret whsec_…] [--grace 24h] [--wait] [-o json]",
		Description: `Gives destination ID a new signing secret (generated unless --secret) and
prints it, once: store it with the receiver. Until the grace period ends,
every delivery carries two signatures, "webhook-signature: v1,<new> v1,<old>"
(Standard Webhooks; a receiver checking either secret accepts it), so the
receiver can switch whenever it likes; after it, only the new one. --grace 0
stops the old secret at once; at most 168h (7 days). Rotating again during a
grace period drops the oldest secret: only the last two sign.

Example:
   rivoractl destinations rotate-secret orders --grace 48h --wait`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "secret", Usage: "the new signing `SECRET` (whsec_ + base64 key of at least 16 bytes)", DefaultText: "generated"},
			&ucli.DurationFlag{Name: "grace", Usage: "how long the previous secret keeps signing too (`DURATION`, 0 to 168h)", Value: 24 * time.Hour},
			waitFlag,
		},
		Action: e.rotateSecret,
	}
}

func (e *env) rotateSecret(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one destination ID"); err != nil {
		return err
	}
	id := c.Args().First()
	req := &rivorav1.RotateDestinationSecretRequest{DestinationId: id}
	if c.IsSet("secret") {
		if err := checkSecret(c.String("secret")); err != nil {
			return err
		}
		req.Secret = c.String("secret")
	}
	if c.IsSet("grace") {
		g := c.Duration("grace")
		if g < 0 {
			return usagef("--grace %s: want 0 (no overlap) up to 168h", g)
		}
		req.Grace = durationpb.New(g)
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.admin().RotateDestinationSecret(ctx, connect.NewRequest(req))
	if err != nil {
		return callFailed(fmt.Sprintf("rotate the secret of destination %q", id), err, notFoundHint)
	}
	d := resp.Msg.GetDestination()
	if e.output == "json" {
		if err := writeJSON(e.out, d); err != nil {
			return err
		}
		return e.afterChange(c, resp.Msg.GetVersion())
	}
	if err := fields(e.out, "ID", d.GetId(), "SECRET", d.GetSecret(), "OLD SECRET", previousSecretText(d.GetPreviousSecretFingerprint(), d.GetPreviousSecretExpiresAt())); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(e.out, "\nSECRET is shown only this once: store it with the receiver now.\n"); err != nil {
		return err
	}
	return e.afterChange(c, resp.Msg.GetVersion())
}

// previousSecretText says whether a rotation's previous secret still
// signs: its fingerprint and until when.
func previousSecretText(fp string, until *timestamppb.Timestamp) string {
	switch {
	case fp == "" || until == nil:
		return "- (only the current secret signs)"
	case !until.AsTime().After(time.Now()):
		return fmt.Sprintf("%s stopped signing at %s", fp, fmtTime(until))
	default:
		return fmt.Sprintf("%s signs too until %s", fp, fmtTime(until))
	}
}
