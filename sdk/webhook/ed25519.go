package webhook

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks' asymmetric scheme, "v1a": the same signed content as
// v1 (id "." timestamp "." body), signed with ed25519. The sender keeps a
// secret key "whsk_…"; receivers verify with its public key "whpk_…",
// which is not a secret, so a receiver holding it cannot forge a
// delivery (with v1, anyone who can verify can also sign).
//
// Key format: the specification says "base64 encoded" and no more. A
// "whsk_" key is base64 of the 64-byte ed25519 private key (seed then
// public key, as Go, NaCl and libsodium hold it); a 32-byte seed is
// accepted too. A "whpk_" key is base64 of the 32-byte public key.
// Whitespace around a key, as around a secret, is not part of it.

// A destination's signature schemes: v1 (HMAC-SHA256), v1a (ed25519),
// or both side by side; "" means v1.
const (
	SchemeV1   = "v1"
	SchemeV1a  = "v1a"
	SchemeBoth = "both"
)

// Key prefixes of the v1a scheme.
const (
	SigningKeyPrefix = "whsk_"
	PublicKeyPrefix  = "whpk_"
)

// NewSigningKey returns a fresh ed25519 key pair: the secret "whsk_…"
// key and its public "whpk_…" key.
func NewSigningKey() (signingKey, publicKey string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("generate ed25519 key: %w", err)
	}
	return SigningKeyPrefix + base64.StdEncoding.EncodeToString(priv), PublicKeyPrefix + base64.StdEncoding.EncodeToString(pub), nil
}

// ParseSigningKey decodes a "whsk_…" key: base64 of the 64-byte private
// key (whose public half must match its seed) or of the 32-byte seed.
func ParseSigningKey(signingKey string) (ed25519.PrivateKey, error) {
	encoded, ok := strings.CutPrefix(strings.TrimSpace(signingKey), SigningKeyPrefix)
	if !ok {
		return nil, fmt.Errorf("signing key must start with %q", SigningKeyPrefix)
	}
	raw, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return nil, fmt.Errorf("signing key after %q must be base64: %w", SigningKeyPrefix, err)
	}
	switch len(raw) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), nil
	case ed25519.PrivateKeySize:
		key := ed25519.NewKeyFromSeed(raw[:ed25519.SeedSize])
		if !key.Public().(ed25519.PublicKey).Equal(ed25519.PublicKey(raw[ed25519.SeedSize:])) {
			return nil, fmt.Errorf("signing key: its last 32 bytes are not the public key of its first 32 (the seed)")
		}
		return key, nil
	}
	return nil, fmt.Errorf("signing key is %d bytes; an ed25519 key is 64 (seed and public key) or a 32-byte seed", len(raw))
}

// PublicKeyOf returns the "whpk_…" public key of a "whsk_…" key.
func PublicKeyOf(signingKey string) (string, error) {
	key, err := ParseSigningKey(signingKey)
	if err != nil {
		return "", err
	}
	return PublicKeyPrefix + base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey)), nil
}

// ParsePublicKey decodes a "whpk_…" key.
func ParsePublicKey(publicKey string) (ed25519.PublicKey, error) {
	encoded, ok := strings.CutPrefix(strings.TrimSpace(publicKey), PublicKeyPrefix)
	if !ok {
		return nil, fmt.Errorf("public key must start with %q", PublicKeyPrefix)
	}
	raw, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return nil, fmt.Errorf("public key after %q must be base64: %w", PublicKeyPrefix, err)
	}
	if len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("public key is %d bytes; an ed25519 public key is 32", len(raw))
	}
	return ed25519.PublicKey(raw), nil
}

// edKeys are a signer's v1a keys: the current one, and during a
// rotation's grace the previous one.
type edKeys struct {
	current, previous ed25519.PrivateKey
	previousUntil     time.Time
}

// NewEd25519Signer returns a signer that signs v1a only, with a "whsk_…"
// key.
func NewEd25519Signer(signingKey string) (*Signer, error) {
	key, err := ParseSigningKey(signingKey)
	if err != nil {
		return nil, err
	}
	return &Signer{ed: &edKeys{current: key}}, nil
}

// WithEd25519 returns a signer that signs as s does and also v1a with a
// "whsk_…" key (both schemes: a receiver verifies whichever it knows).
func (s *Signer) WithEd25519(signingKey string) (*Signer, error) {
	key, err := ParseSigningKey(signingKey)
	if err != nil {
		return nil, err
	}
	out := s.clone()
	out.ed = &edKeys{current: key}
	return out, nil
}

// WithPreviousEd25519 returns a signer that signs as s does and also
// v1a with previous every delivery whose timestamp is before until (a
// key rotation's grace). s must sign v1a.
func (s *Signer) WithPreviousEd25519(previous string, until time.Time) (*Signer, error) {
	if s.ed == nil {
		return nil, fmt.Errorf("previous signing key: the signer does not sign v1a")
	}
	key, err := ParseSigningKey(previous)
	if err != nil {
		return nil, fmt.Errorf("previous signing key: %w", err)
	}
	out := s.clone()
	out.ed = &edKeys{current: s.ed.current, previous: key, previousUntil: until}
	return out, nil
}

// clone is a copy of s sharing its keyed HMAC states' constructor.
func (s *Signer) clone() *Signer {
	out := &Signer{key: s.key, previous: s.previous, previousUntil: s.previousUntil, ed: s.ed}
	out.macs.New = s.macs.New
	return out
}

// appendEd25519 appends the v1a entries for one delivery to out (each
// after a space when out is not empty).
func (k *edKeys) appendEd25519(out []byte, id string, timestamp int64, body []byte) []byte {
	msg := signedContent(id, timestamp, body)
	out = appendV1a(out, k.current, msg)
	if k.previous != nil && time.Unix(timestamp, 0).Before(k.previousUntil) {
		out = appendV1a(out, k.previous, msg)
	}
	return out
}

// appendV1a appends one "v1a,<signature>" entry.
func appendV1a(out []byte, key ed25519.PrivateKey, msg []byte) []byte {
	if len(out) > 0 {
		out = append(out, ' ')
	}
	out = append(out, "v1a,"...)
	return base64.StdEncoding.AppendEncode(out, ed25519.Sign(key, msg))
}

// signedContent is what both schemes sign: id "." timestamp "." body.
func signedContent(id string, timestamp int64, body []byte) []byte {
	msg := make([]byte, 0, len(id)+len(body)+22)
	msg = append(msg, id...)
	msg = append(msg, '.')
	msg = strconv.AppendInt(msg, timestamp, 10)
	msg = append(msg, '.')
	return append(msg, body...)
}

// NewPublicKeyVerifier returns a verifier of v1a signatures for a
// "whpk_…" public key, with the default timestamp tolerance.
func NewPublicKeyVerifier(publicKey string) (*Verifier, error) {
	pub, err := ParsePublicKey(publicKey)
	if err != nil {
		return nil, err
	}
	return &Verifier{public: pub, tolerance: DefaultTolerance, now: time.Now}, nil
}
