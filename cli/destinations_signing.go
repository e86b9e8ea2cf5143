package cli

import (
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/rivora/rivora/internal/legacysig"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
)

// Signature flags of destinations create and update: the Standard
// Webhooks scheme (v1 HMAC, v1a ed25519, or both) and a partner's legacy
// signature header.

// signingHelp is the part of create's and update's help about them.
const signingHelp = `
--signature-scheme v1a signs with ed25519 instead of the HMAC secret
("webhook-signature: v1a,<base64>"); receivers verify with the destination's
public key whpk_…, which every answer shows (it is not a secret: holding it
does not let anyone sign). Rivora generates the key pair unless --signing-key
whsk_… is given; the secret key is never shown. create then prints the public
key, not the whsec_ secret, which signs nothing while the scheme is v1a (-o
json carries it, for a later switch to v1 or both). --signature-scheme both sends
a v1 and a v1a signature, each verifying on its own: a way to move receivers
from one to the other. rotate-secret rotates the key with the same grace.

--legacy-signature-header keeps a partner's existing signature contract, as a
migration aid: an HMAC (--legacy-signature-algorithm) of a template
(--legacy-signature-template: {body}, {id}, {timestamp} and literal text) with
the partner's secret (--legacy-signature-secret, its bytes as given), encoded
as --legacy-signature-encoding (hex or base64, after an optional literal
prefix: 'sha256=hex'). It is sent beside webhook-signature, or instead of it
with --legacy-signature-only. Weaker than Standard Webhooks: a template without
{timestamp} gives no replay protection. See docs/security.md.`

func signingFlags(update bool) []ucli.Flag {
	flags := []ucli.Flag{
		&ucli.StringFlag{Name: "signature-scheme", Usage: "`SCHEME` of webhook-signature: v1 (HMAC-SHA256 with the whsec_ secret), v1a (ed25519; receivers verify with the whpk_ public key) or both", DefaultText: "v1"},
		&ucli.StringFlag{Name: "signing-key", Usage: "ed25519 `KEY` for v1a (whsk_ + base64 of the 64-byte key or 32-byte seed)", DefaultText: "generated when v1a needs one"},
		&ucli.StringFlag{Name: "legacy-signature-header", Usage: "also sign in header `NAME` in a partner's existing format (X-Signature, say)"},
		&ucli.StringFlag{Name: "legacy-signature-template", Usage: "signed `CONTENT`: {body}, {id}, {timestamp} and literal text", DefaultText: legacysig.DefaultTemplate},
		&ucli.StringFlag{Name: "legacy-signature-algorithm", Usage: "`ALG`: hmac-sha256, hmac-sha512 or hmac-sha1", DefaultText: legacysig.DefaultAlgorithm},
		&ucli.StringFlag{Name: "legacy-signature-encoding", Usage: "`ENCODING` of the MAC: hex or base64, after an optional literal prefix ('sha256=hex')", DefaultText: legacysig.DefaultEncoding},
		&ucli.StringFlag{Name: "legacy-signature-secret", Usage: "the partner's HMAC `SECRET` (its bytes as given); required with --legacy-signature-header"},
		&ucli.BoolFlag{Name: "legacy-signature-only", Usage: "send the legacy signature instead of webhook-signature (webhook-id and webhook-timestamp stay)"},
	}
	if update {
		flags = append(flags, &ucli.BoolFlag{Name: "remove-legacy-signature", Usage: "stop sending the legacy signature"})
	}
	return flags
}

// schemeFlag is --signature-scheme, checked ("" when not given).
func schemeFlag(c *ucli.Context) (string, error) {
	if !c.IsSet("signature-scheme") {
		return "", nil
	}
	switch s := c.String("signature-scheme"); s {
	case webhook.SchemeV1, webhook.SchemeV1a, webhook.SchemeBoth:
		return s, nil
	default:
		return "", usagef("--signature-scheme %q: want v1, v1a or both", s)
	}
}

// signingKeyFlag is --signing-key, checked ("" when not given).
func signingKeyFlag(c *ucli.Context) (string, error) {
	if !c.IsSet("signing-key") {
		return "", nil
	}
	k := c.String("signing-key")
	if _, err := webhook.ParseSigningKey(k); err != nil {
		return "", usagef("--signing-key: %v (or omit it to have a key pair generated)", err)
	}
	return k, nil
}

// legacyFlags is the legacy signature the flags describe, nil when none
// of them is given.
func legacyFlags(c *ucli.Context) (*rivorav1.LegacySignature, error) {
	given := false
	for _, name := range []string{"legacy-signature-header", "legacy-signature-template", "legacy-signature-algorithm", "legacy-signature-encoding", "legacy-signature-secret", "legacy-signature-only"} {
		given = given || c.IsSet(name)
	}
	if !given {
		return nil, nil
	}
	if !c.IsSet("legacy-signature-header") || !c.IsSet("legacy-signature-secret") {
		return nil, usagef("a legacy signature needs --legacy-signature-header and --legacy-signature-secret (e.g. --legacy-signature-header X-Signature --legacy-signature-secret \"$OLD_SECRET\" --legacy-signature-encoding sha256=hex)")
	}
	l := &rivorav1.LegacySignature{Header: c.String("legacy-signature-header"), Template: c.String("legacy-signature-template"),
		Algorithm: c.String("legacy-signature-algorithm"), Secret: c.String("legacy-signature-secret"), ReplaceStandard: c.Bool("legacy-signature-only")}
	if c.IsSet("legacy-signature-encoding") {
		prefix, enc, err := legacysig.ParseEncoding(c.String("legacy-signature-encoding"))
		if err != nil {
			return nil, usagef("--legacy-signature-encoding: %v", err)
		}
		l.Prefix, l.Encoding = prefix, enc
	}
	return l, nil
}

// signingRows are the table rows about how a destination signs: its
// scheme with the public key, a rotation's previous public key, and its
// legacy signature.
func signingRows(d *rivorav1.Destination) []string {
	scheme := d.GetSignatureScheme()
	if scheme == "" {
		scheme = webhook.SchemeV1
	}
	rows := []string{"SIGNATURE", scheme}
	if pk := d.GetPublicKey(); pk != "" && scheme != webhook.SchemeV1 {
		rows = append(rows, "PUBLIC KEY", pk, "SIGNING KEY", d.GetSigningKeyFingerprint()+" (fingerprint; the secret key is never shown)")
		if prev := d.GetPreviousPublicKey(); prev != "" {
			rows = append(rows, "OLD PUBLIC KEY", fmt.Sprintf("%s signs too until %s", prev, fmtTime(d.GetPreviousSigningKeyExpiresAt())))
		}
	}
	if l := d.GetLegacySignature(); l != nil {
		text := fmt.Sprintf("%s: %s%s of %s (%s), secret %s", l.GetHeader(), l.GetPrefix(), l.GetEncoding(), l.GetTemplate(), l.GetAlgorithm(), l.GetSecretFingerprint())
		if l.GetReplaceStandard() {
			text += "; instead of webhook-signature"
		}
		rows = append(rows, "LEGACY SIGNATURE", text)
	}
	return rows
}

// destinationSecretText is a destination's SECRET row: its whsec_
// secret when the answer carries it (create's), else its fingerprint.
// A destination that signs v1a only signs nothing with that secret: its
// row shows the fingerprint and says so, so that no one hands receivers
// a secret that verifies no delivery (they need PUBLIC KEY). The secret
// is kept for a switch to v1 or both; -o json prints create's answer
// whole, secret included.
func destinationSecretText(d *rivorav1.Destination) string {
	if d.GetSignatureScheme() != webhook.SchemeV1a {
		return secretText(d.GetSecret(), d.GetSecretFingerprint())
	}
	fp := d.GetSecretFingerprint()
	if fp == "" {
		fp = "-"
	}
	return fp + " (fingerprint; not used: this destination signs v1a only, and receivers verify with PUBLIC KEY)"
}

// verifyHint is what create prints under the table: what receivers
// verify with.
func verifyHint(d *rivorav1.Destination) string {
	var hints []string
	if d.GetSignatureScheme() != webhook.SchemeV1a && !d.GetLegacySignature().GetReplaceStandard() {
		hints = append(hints, "Receivers verify each delivery's webhook-signature with SECRET (Go: sdk.VerifyRequest).\nSECRET is shown only this once: store it with the receiver now.")
	}
	if d.GetSignatureScheme() == webhook.SchemeV1a || d.GetSignatureScheme() == webhook.SchemeBoth {
		hints = append(hints, "Receivers verify v1a signatures with PUBLIC KEY (Go: webhook.NewPublicKeyVerifier; it is not a secret).")
	}
	if d.GetLegacySignature() != nil {
		hints = append(hints, "The partner verifies "+visible(d.GetLegacySignature().GetHeader())+" with its existing secret, as before.")
	}
	return strings.Join(hints, "\n")
}

// updateSigningFlags sets update's signature fields from the flags and
// reports whether any was given.
func updateSigningFlags(c *ucli.Context, req *rivorav1.UpdateDestinationRequest) (bool, error) {
	scheme, err := schemeFlag(c)
	if err != nil {
		return false, err
	}
	key, err := signingKeyFlag(c)
	if err != nil {
		return false, err
	}
	legacy, err := legacyFlags(c)
	if err != nil {
		return false, err
	}
	if scheme != "" {
		req.SignatureScheme = &scheme
	}
	if key != "" {
		req.SigningKey = &key
	}
	req.LegacySignature, req.RemoveLegacySignature = legacy, c.Bool("remove-legacy-signature")
	if legacy != nil && req.RemoveLegacySignature {
		return false, usagef("--remove-legacy-signature with --legacy-signature-*: set the legacy signature or remove it, not both")
	}
	return scheme != "" || key != "" || legacy != nil || req.RemoveLegacySignature, nil
}
