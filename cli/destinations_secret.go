package cli

import (
	"fmt"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
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

A destination signing v1a (ed25519) rotates its key pair the same way: both
keys sign during the grace ("v1a,<new> v1a,<old>"); the new public key is
printed (the secret key never is), give it to receivers. One signing v1a
alone keeps its v1 secret unchanged; one signing both rotates both.

Examples:
   rivoractl destinations rotate-secret orders --grace 48h --wait
   rivoractl destinations rotate-secret bank --signing-key "$(cat bank.whsk)"`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "secret", Usage: "the new signing `SECRET` (whsec_ + base64 key of at least 16 bytes)", DefaultText: "generated"},
			&ucli.StringFlag{Name: "signing-key", Usage: "the new ed25519 `KEY` of a v1a or both destination (whsk_…)", DefaultText: "generated"},
			durationFlagOf("grace", "how long the previous secret keeps signing too (`DURATION`, 0 to 168h)", 24*time.Hour, ""),
			waitFlag(),
		},
		Action: e.rotateSecret,
	}
}

func (e *env) rotateSecret(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one destination ID"); err != nil {
		return err
	}
	id := c.Args().First()
	secret, grace, err := rotationFlags(c)
	if err != nil {
		return err
	}
	ctx, cancel := callContext(c)
	defer cancel()
	key, err := signingKeyFlag(c)
	if err != nil {
		return err
	}
	resp, err := e.admin().RotateDestinationSecret(ctx, connect.NewRequest(&rivorav1.RotateDestinationSecretRequest{DestinationId: id, Secret: secret, Grace: grace, SigningKey: key}))
	if err != nil {
		return callFailed(fmt.Sprintf("rotate the secret of destination %q", id), err, notFoundHint)
	}
	d := resp.Msg.GetDestination()
	if d.GetSignatureScheme() == webhook.SchemeV1a {
		return e.printRotatedKey(c, d, resp.Msg.GetVersion())
	}
	if d.GetSignatureScheme() == webhook.SchemeBoth && e.output != "json" {
		if err := fields(e.out, "PUBLIC KEY", d.GetPublicKey(), "OLD PUBLIC KEY", previousKeyText(d)); err != nil {
			return err
		}
	}
	return e.printRotated(c, d, rotated{d.GetId(), d.GetSecret(), d.GetPreviousSecretFingerprint(), d.GetPreviousSecretExpiresAt()}, resp.Msg.GetVersion())
}

// rotationFlags reads rotate-secret's --secret (empty: generated) and
// --grace (nil: the server's default).
func rotationFlags(c *ucli.Context) (secret string, grace *durationpb.Duration, err error) {
	if c.IsSet("secret") {
		if err := checkSecret(c.String("secret"), "omit --secret to have one generated"); err != nil {
			return "", nil, err
		}
		secret = c.String("secret")
	}
	if c.IsSet("grace") {
		g := flagDuration(c, "grace")
		if g < 0 {
			return "", nil, usagef("--grace %s: want 0 (no overlap) up to 168h", g)
		}
		grace = durationpb.New(g)
	}
	return secret, grace, nil
}

// rotated is what a rotate-secret answer shows of the object rotated.
type rotated struct {
	id, secret, previousFingerprint string
	previousExpires                 *timestamppb.Timestamp
}

// printRotated prints a rotate-secret answer — the whole object with -o
// json, else its new secret, once — then waits for the change with --wait.
func (e *env) printRotated(c *ucli.Context, answer proto.Message, r rotated, version uint64) error {
	if e.output == "json" {
		if err := writeJSON(e.out, answer); err != nil {
			return err
		}
		return e.afterChange(c, version)
	}
	if err := fields(e.out, "ID", r.id, "SECRET", r.secret, "OLD SECRET", previousSecretText(r.previousFingerprint, r.previousExpires)); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(e.out, "\nSECRET is shown only this once: store it with the receiver now.\n"); err != nil {
		return err
	}
	return e.afterChange(c, version)
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

// printRotatedKey prints the answer to rotating a v1a destination's key:
// the new public key (not a secret) and until when the old one signs.
func (e *env) printRotatedKey(c *ucli.Context, d *rivorav1.Destination, version uint64) error {
	if e.output == "json" {
		if err := writeJSON(e.out, d); err != nil {
			return err
		}
		return e.afterChange(c, version)
	}
	if err := fields(e.out, "ID", d.GetId(), "PUBLIC KEY", d.GetPublicKey(), "OLD PUBLIC KEY", previousKeyText(d)); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(e.out, "\nGive PUBLIC KEY to the receivers (it is not a secret).\n"); err != nil {
		return err
	}
	return e.afterChange(c, version)
}

// previousKeyText says whether a rotation's previous ed25519 key still
// signs: its public key and until when.
func previousKeyText(d *rivorav1.Destination) string {
	if d.GetPreviousPublicKey() == "" {
		return "- (only the current key signs)"
	}
	return fmt.Sprintf("%s signs too until %s", d.GetPreviousPublicKey(), fmtTime(d.GetPreviousSigningKeyExpiresAt()))
}
