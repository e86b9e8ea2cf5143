// Package webhook implements the Standard Webhooks signature scheme that
// Rivora signs every delivery with: the sender computes
// base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)) and sends it as
// "v1,<signature>" in the webhook-signature header; the receiver recomputes it
// and checks the timestamp is recent. A destination may sign with ed25519
// instead, or as well ("v1a,<signature>", ed25519.go): receivers verify
// those with a public key.
package webhook

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// Header names of the Standard Webhooks scheme.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts every secret: "whsec_" + base64 of the key bytes.
const SecretPrefix = "whsec_"

// DefaultTolerance is how far a webhook-timestamp may be from now.
const DefaultTolerance = 5 * time.Minute

// NewSecret returns a fresh random secret with a 32-byte key.
func NewSecret() (string, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("generate secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// Key decodes a "whsec_…" secret into its HMAC key. Whitespace around it
// (a newline from a file or a paste) is not part of it.
func Key(secret string) ([]byte, error) {
	encoded, ok := strings.CutPrefix(strings.TrimSpace(secret), SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("secret must start with %q", SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return nil, fmt.Errorf("secret after %q must be base64: %w", SecretPrefix, err)
	}
	if len(key) < 16 {
		return nil, fmt.Errorf("secret key is %d bytes; use at least 16", len(key))
	}
	return key, nil
}

// Signer signs deliveries for one secret, and during a secret rotation's
// grace period also for the previous one (WithPrevious). It is safe for
// concurrent use.
type Signer struct {
	key []byte
	// macs reuses keyed HMAC states: keying one costs as much as signing
	// a small body.
	macs sync.Pool
	// previous signs too deliveries whose timestamp is before
	// previousUntil.
	previous      *Signer
	previousUntil time.Time
	// ed, when set, signs v1a (ed25519) too; key is nil for a signer of
	// v1a alone.
	ed *edKeys
}

// NewSigner returns a signer for a "whsec_…" secret.
func NewSigner(secret string) (*Signer, error) {
	key, err := Key(secret)
	if err != nil {
		return nil, err
	}
	s := &Signer{key: key}
	s.macs.New = func() any { return &macState{h: hmac.New(sha256.New, key)} }
	return s, nil
}

// Sign returns the webhook-signature header value for one delivery:
// "v1,<signature>", and while a rotation's grace lasts (timestamp before
// its end) "v1,<new> v1,<previous>"; then, for a signer of v1a too, its
// "v1a,<signature>" entries the same way.
func (s *Signer) Sign(id string, timestamp int64, body []byte) string {
	if s == nil || (s.key == nil && s.ed == nil) {
		return "" // not made by NewSigner: no key to sign with
	}
	if s.key == nil {
		return string(s.ed.appendEd25519(nil, id, timestamp, body))
	}
	st := s.macs.Get().(*macState)
	defer s.macs.Put(st)
	st.out = append(st.out[:0], "v1,"...)
	st.out = base64.StdEncoding.AppendEncode(st.out, st.sum(id, timestamp, body))
	if s.previous != nil && time.Unix(timestamp, 0).Before(s.previousUntil) {
		prev := s.previous.macs.Get().(*macState)
		st.out = append(st.out, " v1,"...)
		st.out = base64.StdEncoding.AppendEncode(st.out, prev.sum(id, timestamp, body))
		s.previous.macs.Put(prev)
	}
	if s.ed != nil {
		st.out = s.ed.appendEd25519(st.out, id, timestamp, body)
	}
	return string(st.out)
}

func (s *Signer) mac(id string, timestamp int64, body []byte) []byte {
	st := s.macs.Get().(*macState)
	defer s.macs.Put(st)
	return slices.Clone(st.sum(id, timestamp, body))
}

// macState is a keyed HMAC with the scratch space one signature needs, so
// that signing allocates only the header value it returns.
type macState struct {
	h hash.Hash
	// in is the signed prefix (id "." timestamp "."); digest and out hold
	// the MAC and the header value being built.
	in, digest, out []byte
}

// sum is the MAC of id "." timestamp "." body, valid until st's next use.
func (st *macState) sum(id string, timestamp int64, body []byte) []byte {
	st.h.Reset()
	st.in = append(st.in[:0], id...)
	st.in = append(st.in, '.')
	st.in = strconv.AppendInt(st.in, timestamp, 10)
	st.in = append(st.in, '.')
	st.h.Write(st.in)
	st.h.Write(body)
	st.digest = st.h.Sum(st.digest[:0])
	return st.digest
}

// Errors returned by Verify; wrap-checked with errors.Is.
var (
	ErrMissingHeaders   = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature header")
	ErrInvalidTimestamp = errors.New("webhook: timestamp outside tolerance")
	ErrNoMatch          = errors.New("webhook: no matching signature")
	// ErrTooManySignatures refuses a webhook-signature header of more than
	// MaxSignatures entries before any is checked: Rivora sends a few
	// (current and previous, per scheme), and each entry costs a MAC or
	// an ed25519 verification that an unauthenticated sender could
	// otherwise multiply by the thousand.
	ErrTooManySignatures = fmt.Errorf("webhook: more than %d entries in the webhook-signature header", MaxSignatures)
)

// MaxSignatures is the most entries Verify reads in a webhook-signature
// header (the TypeScript SDK's verifyWebhook has the same bound).
const MaxSignatures = 16

// unixSeconds reads a webhook-timestamp: decimal digits only, as it is
// signed ("+17…" or "017…" would verify against another text than the
// one the sender signed).
func unixSeconds(ts string) (int64, error) {
	for _, c := range ts {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %q is not unix seconds", ErrInvalidTimestamp, ts)
		}
	}
	if len(ts) > 1 && ts[0] == '0' {
		return 0, fmt.Errorf("%w: %q is not unix seconds (leading zero)", ErrInvalidTimestamp, ts)
	}
	n, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not unix seconds", ErrInvalidTimestamp, ts)
	}
	return n, nil
}

// Bounds beyond which a webhook-timestamp is taken for another unit than
// seconds rather than a clock that is off: after the year 9999, or further
// from now than a time.Duration holds (292 years; "off by" would print the
// largest Duration instead). The TypeScript SDK's verifyWebhook uses the same.
const (
	lastSecondOf9999 = 253402300799
	farSeconds       = math.MaxInt64 / int64(time.Second)
)

// notSeconds says why timestamp, refused as outside the tolerance at now,
// cannot be Unix seconds ("" when it can: a clock off, or a replay),
// guessing its unit by its size: Unix milliseconds have 13 digits today,
// microseconds 16, nanoseconds 19.
func notSeconds(now time.Time, timestamp int64) string {
	off := now.Unix() - timestamp // no overflow: timestamp is not negative
	if off >= farSeconds {
		// Only a clock set centuries ahead gets here.
		return fmt.Sprintf("timestamp %d is more than 292 years before now", timestamp)
	}
	if timestamp <= lastSecondOf9999 && off > -farSeconds {
		return ""
	}
	guess := fmt.Sprintf("year %d?", time.Unix(timestamp, 0).UTC().Year())
	switch {
	case timestamp >= 1e17:
		guess = "nanoseconds?"
	case timestamp >= 1e14:
		guess = "microseconds?"
	case timestamp >= 1e11:
		guess = "milliseconds?"
	}
	return fmt.Sprintf("timestamp %d is not Unix seconds (%s)", timestamp, guess)
}

// Verifier checks signed requests for one secret (v1), or for one public
// key (v1a, NewPublicKeyVerifier).
type Verifier struct {
	signer    *Signer
	public    ed25519.PublicKey
	tolerance time.Duration
	now       func() time.Time
}

// NewVerifier returns a verifier for a "whsec_…" secret with the default
// timestamp tolerance; given a "whpk_…" public key it is
// NewPublicKeyVerifier (Standard Webhooks: the prefix tells the scheme).
func NewVerifier(secret string) (*Verifier, error) {
	secret = strings.TrimSpace(secret)
	if strings.HasPrefix(secret, PublicKeyPrefix) {
		return NewPublicKeyVerifier(secret)
	}
	if strings.HasPrefix(secret, SigningKeyPrefix) {
		return nil, fmt.Errorf("a %q key signs; a receiver verifies with its public key %q (webhook.PublicKeyOf, or the destination's public key in `rivoractl destinations get`)", SigningKeyPrefix, PublicKeyPrefix)
	}
	s, err := NewSigner(secret)
	if err != nil {
		return nil, fmt.Errorf("%w (or a %q public key for ed25519)", err, PublicKeyPrefix)
	}
	return &Verifier{signer: s, tolerance: DefaultTolerance, now: time.Now}, nil
}

// WithTolerance returns a copy of v accepting timestamps within d of now;
// d of zero or below keeps v's tolerance (it would refuse every request).
func (v *Verifier) WithTolerance(d time.Duration) *Verifier {
	var c Verifier
	if v != nil {
		c = *v
	}
	if d > 0 {
		c.tolerance = d
	}
	return &c
}

// ErrNoKey is Verify's answer on a Verifier not made by NewVerifier or
// NewPublicKeyVerifier (a zero or nil one): it holds no key to check with.
var ErrNoKey = errors.New("webhook: the Verifier has no key: make it with webhook.NewVerifier")

// Verify checks the Standard Webhooks headers of a request against its body.
// The signature header may carry several space-separated entries (secret
// rotation, or v1 and v1a side by side; several lines, or lines an
// intermediary joined with ", "); one match of the verifier's
// scheme is enough: v1 for a secret, v1a for a public key. A header of
// more than MaxSignatures entries is refused (ErrTooManySignatures) before
// any is checked.
func (v *Verifier) Verify(h http.Header, body []byte) error {
	if v == nil || (v.signer == nil && v.public == nil) {
		return ErrNoKey
	}
	// A signature header sent as several lines is one list of entries.
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), strings.Join(h.Values(HeaderSignature), " ")
	if id == "" || ts == "" || strings.TrimSpace(sigs) == "" {
		return ErrMissingHeaders
	}
	entries, err := signatureEntries(sigs)
	if err != nil {
		return err
	}
	timestamp, err := unixSeconds(ts)
	if err != nil {
		return err
	}
	now := time.Now
	if v.now != nil {
		now = v.now
	}
	tolerance := v.tolerance
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	at := now()
	if d := at.Sub(time.Unix(timestamp, 0)); d > tolerance || d < -tolerance {
		if why := notSeconds(at, timestamp); why != "" {
			return fmt.Errorf("%w: %s", ErrInvalidTimestamp, why)
		}
		return fmt.Errorf("%w: off by %s", ErrInvalidTimestamp, d.Round(time.Second))
	}
	var want, content []byte
	if v.signer != nil {
		want = v.signer.mac(id, timestamp, body)
	} else {
		content = signedContent(id, timestamp, body)
	}
	for _, entry := range entries {
		// An intermediary merging repeated header lines joins them with
		// ", ": the comma ending an entry is the list's, not the
		// signature's (the TypeScript SDK reads it the same way).
		version, sig, ok := strings.Cut(strings.TrimRight(entry, ","), ",")
		if !ok {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err != nil {
			continue
		}
		switch {
		case version == "v1" && v.signer != nil && hmac.Equal(got, want):
			return nil
		case version == "v1a" && v.public != nil && ed25519.Verify(v.public, content, got):
			return nil
		}
	}
	return ErrNoMatch
}

// signatureEntries splits a webhook-signature header into its
// space-separated entries, refusing more than MaxSignatures without
// splitting the rest.
func signatureEntries(sigs string) ([]string, error) {
	var entries []string
	for rest := sigs; ; {
		rest = strings.TrimLeftFunc(rest, unicode.IsSpace)
		if rest == "" {
			return entries, nil
		}
		if len(entries) == MaxSignatures {
			return nil, ErrTooManySignatures
		}
		end := strings.IndexFunc(rest, unicode.IsSpace)
		if end < 0 {
			end = len(rest)
		}
		entries = append(entries, rest[:end])
		rest = rest[end:]
	}
}
