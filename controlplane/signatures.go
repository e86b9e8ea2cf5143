package controlplane

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/legacysig"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
)

// Signature schemes and keys: a destination signs with its HMAC secret
// (Standard Webhooks v1, the default), with an ed25519 key (v1a), or
// both; and may add a partner's legacy signature header. Every
// destination keeps its v1 secret whatever its scheme, so switching back
// to v1 needs no new secret. The ed25519 secret key is never shown (the
// public key is what receivers need; a key given with --signing-key is
// already the caller's); answers carry its fingerprint and the public key.

// signatureScheme checks a requested scheme ("" keeps v1).
func signatureScheme(s string) (string, error) {
	switch s {
	case "", webhook.SchemeV1:
		return webhook.SchemeV1, nil
	case webhook.SchemeV1a, webhook.SchemeBoth:
		return s, nil
	}
	return "", errorf(ErrInvalid, "signature scheme %q: want v1 (HMAC-SHA256 with the whsec_ secret), v1a (ed25519, verified with the whpk_ public key) or both", s)
}

// signsV1a reports a scheme that signs with the ed25519 key.
func signsV1a(scheme string) bool { return scheme == webhook.SchemeV1a || scheme == webhook.SchemeBoth }

// signsV1 reports a scheme that signs with the HMAC secret ("" is v1).
func signsV1(scheme string) bool { return scheme != webhook.SchemeV1a }

// signingKeyOrNew checks a given "whsk_" key, or makes a key pair when
// none is given; it returns the key and its public key.
func signingKeyOrNew(key string) (string, string, error) {
	if key == "" {
		return webhook.NewSigningKey()
	}
	key = strings.TrimSpace(key) // as secretOrNew
	pub, err := webhook.PublicKeyOf(key)
	if err != nil {
		return "", "", errorf(ErrInvalid, "signing key: %w", err)
	}
	return key, pub, nil
}

// applySignatureScheme sets d's scheme and, when it signs v1a, its key:
// the one given (replacing the current one at once), else the current
// one, else a new pair. It returns the audit detail.
func applySignatureScheme(d *rivorav1.Destination, scheme string, key *string) (string, error) {
	if key != nil && !signsV1a(scheme) {
		return "", errorf(ErrInvalid, "signing key: destination %q signs v1 (HMAC) only; set the signature scheme to v1a or both to use an ed25519 key", d.GetId())
	}
	d.SignatureScheme = scheme
	if !signsV1a(scheme) || (key == nil && d.GetSigningKey() != "") {
		return "signature scheme " + scheme, nil
	}
	given := ""
	if key != nil {
		given = *key
	}
	sk, pk, err := signingKeyOrNew(given)
	if err != nil {
		return "", err
	}
	if sk == d.GetSigningKey() {
		return "", errorf(ErrInvalid, "signing key: that is destination %q's current key", d.GetId())
	}
	d.SigningKey, d.PublicKey = sk, pk
	clearPreviousSigningKey(d)
	return fmt.Sprintf("signature scheme %s, signing key %s (public %s)", scheme, auth.Fingerprint(sk), pk), nil
}

// rotateSigningKey makes key (generated when empty) d's ed25519 key and
// keeps the current one signing until grace ends.
func rotateSigningKey(d *rivorav1.Destination, key string, grace time.Duration, now time.Time) (string, error) {
	sk, pk, err := signingKeyOrNew(key)
	if err != nil {
		return "", err
	}
	if sk == d.GetSigningKey() {
		return "", errorf(ErrInvalid, "signing key: that is destination %q's current key; pass another one, or none to have one generated", d.GetId())
	}
	old, oldPub := d.GetSigningKey(), d.GetPublicKey()
	d.SigningKey, d.PublicKey = sk, pk
	if old == "" || grace == 0 {
		clearPreviousSigningKey(d)
		return fmt.Sprintf("signing key rotated to %s (public %s), no grace", auth.Fingerprint(sk), pk), nil
	}
	until := now.Add(grace)
	d.PreviousSigningKey, d.PreviousPublicKey, d.PreviousSigningKeyExpiresAt = old, oldPub, timestamppb.New(until)
	return fmt.Sprintf("signing key rotated to %s (public %s); previous key (public %s) signs too until %s", auth.Fingerprint(sk), pk, oldPub, until.UTC().Format(time.RFC3339)), nil
}

func clearPreviousSigningKey(d *rivorav1.Destination) {
	d.PreviousSigningKey, d.PreviousPublicKey, d.PreviousSigningKeyExpiresAt = "", "", nil
}

// legacySignature checks a requested legacy signature and returns it as
// stored: defaults filled in, the header name canonical.
func legacySignature(m *rivorav1.LegacySignature) (*rivorav1.LegacySignature, error) {
	if err := validateHeaderName(m.GetHeader()); err != nil {
		return nil, errorf(ErrInvalid, "legacy signature: %w", err)
	}
	c := legacysig.Contract{Header: http.CanonicalHeaderKey(m.GetHeader()), Template: m.GetTemplate(), Algorithm: m.GetAlgorithm(),
		Encoding: m.GetEncoding(), Prefix: m.GetPrefix(), Secret: m.GetSecret()}.WithDefaults()
	if _, err := legacysig.New(c); err != nil {
		return nil, errorf(ErrInvalid, "%w", err)
	}
	return &rivorav1.LegacySignature{Header: c.Header, Template: c.Template, Algorithm: c.Algorithm, Encoding: c.Encoding,
		Prefix: c.Prefix, Secret: c.Secret, ReplaceStandard: m.GetReplaceStandard()}, nil
}

// describeLegacy is the audit detail of a legacy signature: its contract,
// never its secret.
func describeLegacy(l *rivorav1.LegacySignature) string {
	s := fmt.Sprintf("legacy signature %s: %s of %q, %s%s, secret %s", l.GetHeader(), l.GetAlgorithm(), l.GetTemplate(), l.GetPrefix(), l.GetEncoding(), auth.Fingerprint(l.GetSecret()))
	if l.GetReplaceStandard() {
		s += ", instead of webhook-signature"
	}
	return s
}

// withoutSigningSecrets replaces the ed25519 keys and the legacy secret
// by fingerprints (the public keys stay: they are not secrets), and
// names the default scheme.
func withoutSigningSecrets(d *rivorav1.Destination) {
	if d.GetSignatureScheme() == "" {
		d.SignatureScheme = webhook.SchemeV1
	}
	if d.GetSigningKey() != "" {
		d.SigningKeyFingerprint = auth.Fingerprint(d.GetSigningKey())
	}
	d.SigningKey, d.PreviousSigningKey = "", ""
	if l := d.GetLegacySignature(); l != nil {
		l.SecretFingerprint = auth.Fingerprint(l.GetSecret())
		l.Secret = ""
	}
}

// createSignatures sets a new destination's scheme, key and legacy
// signature from its create request; it returns the audit detail.
func createSignatures(d *rivorav1.Destination, m *rivorav1.CreateDestinationRequest) (string, error) {
	scheme, err := signatureScheme(m.GetSignatureScheme())
	if err != nil {
		return "", err
	}
	var key *string
	if m.GetSigningKey() != "" {
		key = &m.SigningKey
	}
	detail := ""
	if scheme != webhook.SchemeV1 || key != nil {
		s, err := applySignatureScheme(d, scheme, key)
		if err != nil {
			return "", err
		}
		detail = ", " + s
	}
	if m.GetLegacySignature() != nil {
		if d.LegacySignature, err = legacySignature(m.GetLegacySignature()); err != nil {
			return "", err
		}
		detail += ", " + describeLegacy(d.LegacySignature)
	}
	return detail, nil
}

// updateSignatures applies an update's scheme, key and legacy signature
// to d and says what it changed.
func updateSignatures(d *rivorav1.Destination, m *rivorav1.UpdateDestinationRequest) ([]string, error) {
	var changes []string
	if m.SignatureScheme != nil || m.SigningKey != nil {
		scheme := d.GetSignatureScheme()
		if m.SignatureScheme != nil {
			var err error
			if scheme, err = signatureScheme(m.GetSignatureScheme()); err != nil {
				return nil, err
			}
		}
		if scheme == "" {
			scheme = webhook.SchemeV1
		}
		s, err := applySignatureScheme(d, scheme, m.SigningKey)
		if err != nil {
			return nil, err
		}
		changes = append(changes, s)
	}
	switch {
	case m.GetLegacySignature() != nil && m.GetRemoveLegacySignature():
		return nil, errorf(ErrInvalid, "legacy signature: set it or remove it, not both")
	case m.GetLegacySignature() != nil:
		l, err := legacySignature(m.GetLegacySignature())
		if err != nil {
			return nil, err
		}
		d.LegacySignature = l
		changes = append(changes, describeLegacy(l))
	case m.GetRemoveLegacySignature():
		if d.GetLegacySignature() == nil {
			return nil, errorf(ErrInvalid, "remove legacy signature: destination %q has none", d.GetId())
		}
		d.LegacySignature = nil
		changes = append(changes, "legacy signature removed")
	}
	return changes, nil
}
