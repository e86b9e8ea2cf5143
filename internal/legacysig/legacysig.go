// Package legacysig signs deliveries in a partner's pre-existing
// signature format — a migration aid for partners integrated with
// another webhook system: an HMAC of a template over the delivery, in a
// header and an encoding of the partner's choosing (the classic
// "X-Signature: sha256=<hex of the body>"). It owns the contract's
// validation, so the control plane refuses what the agents could not
// sign, and the signing itself.
//
// Such a contract is weaker than Standard Webhooks': a template without
// {timestamp} gives no replay protection (a captured request verifies
// forever), and one without {id} lets a signature be moved between
// deliveries of the same body.
package legacysig

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"strconv"
	"strings"
)

// Defaults of a contract's fields left empty.
const (
	DefaultTemplate  = "{body}"
	DefaultAlgorithm = "hmac-sha256"
	DefaultEncoding  = "hex"
)

// Bounds of a contract's fields.
const (
	maxTemplate = 256
	maxPrefix   = 64
	maxSecret   = 1 << 10
)

// Contract is a partner's signature format.
type Contract struct {
	// Header is the header's name (X-Signature).
	Header string
	// Template is the signed content: literal text and the placeholders
	// {body}, {id} and {timestamp}.
	Template string
	// Algorithm is hmac-sha256, hmac-sha512 or hmac-sha1.
	Algorithm string
	// Encoding is hex (lower case) or base64 (standard, padded).
	Encoding string
	// Prefix is literal text before the encoded MAC (sha256=).
	Prefix string
	// Secret is the HMAC key, its bytes as given.
	Secret string
}

var algorithms = map[string]func() hash.Hash{
	"hmac-sha256": sha256.New,
	"hmac-sha512": sha512.New,
	"hmac-sha1":   sha1.New,
}

// part is one piece of a parsed template: literal text, or a
// placeholder.
type part struct {
	literal string
	field   string // "body", "id", "timestamp" or "" for a literal
}

// Signer signs deliveries in one contract. It is safe for concurrent
// use.
type Signer struct {
	header string
	parts  []part
	newMAC func() hash.Hash
	key    []byte
	base64 bool
	prefix string
}

// WithDefaults is c with its empty optional fields set to their
// defaults.
func (c Contract) WithDefaults() Contract {
	if c.Template == "" {
		c.Template = DefaultTemplate
	}
	if c.Algorithm == "" {
		c.Algorithm = DefaultAlgorithm
	}
	if c.Encoding == "" {
		c.Encoding = DefaultEncoding
	}
	return c
}

// New checks a contract (its empty optional fields take the defaults)
// and returns its signer. Errors say which field is wrong and what is
// allowed. The header name is the caller's to check against the names
// it reserves.
func New(c Contract) (*Signer, error) {
	c = c.WithDefaults()
	if c.Header == "" {
		return nil, fmt.Errorf("legacy signature: a header name is required (X-Signature, say)")
	}
	newMAC, ok := algorithms[c.Algorithm]
	if !ok {
		return nil, fmt.Errorf("legacy signature algorithm %q: want hmac-sha256, hmac-sha512 or hmac-sha1", c.Algorithm)
	}
	if c.Encoding != "hex" && c.Encoding != "base64" {
		return nil, fmt.Errorf("legacy signature encoding %q: want hex or base64", c.Encoding)
	}
	if len(c.Prefix) > maxPrefix || !printable(c.Prefix) {
		return nil, fmt.Errorf("legacy signature prefix: at most %d printable ASCII characters", maxPrefix)
	}
	if c.Secret == "" {
		return nil, fmt.Errorf("legacy signature: a secret is required (the HMAC key the partner already verifies with)")
	}
	if len(c.Secret) > maxSecret {
		return nil, fmt.Errorf("legacy signature secret of %d bytes: at most %d", len(c.Secret), maxSecret)
	}
	parts, err := parseTemplate(c.Template)
	if err != nil {
		return nil, err
	}
	return &Signer{header: c.Header, parts: parts, newMAC: newMAC, key: []byte(c.Secret), base64: c.Encoding == "base64", prefix: c.Prefix}, nil
}

// parseTemplate splits a template into literals and placeholders; it
// must hold {body} once or more (a signature that does not cover the
// body proves nothing about it).
func parseTemplate(t string) ([]part, error) {
	if len(t) > maxTemplate {
		return nil, fmt.Errorf("legacy signature template of %d bytes: at most %d", len(t), maxTemplate)
	}
	var parts []part
	hasBody := false
	for rest := t; rest != ""; {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			parts = append(parts, part{literal: rest})
			break
		}
		if open > 0 {
			parts = append(parts, part{literal: rest[:open]})
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, fmt.Errorf("legacy signature template %q: a { without its }", t)
		}
		field := rest[open+1 : open+end]
		switch field {
		case "body":
			hasBody = true
		case "id", "timestamp":
		default:
			return nil, fmt.Errorf("legacy signature template %q: unknown placeholder {%s}; use {body}, {id} and {timestamp}", t, field)
		}
		parts = append(parts, part{field: field})
		rest = rest[open+end+1:]
	}
	if !hasBody {
		return nil, fmt.Errorf("legacy signature template %q: it must include {body}", t)
	}
	return parts, nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Header is the name of the header the signature goes in.
func (s *Signer) Header() string { return s.header }

// Sign returns the header's value for one delivery: the prefix and the
// encoded HMAC of the template filled with id, timestamp and body.
func (s *Signer) Sign(id string, timestamp int64, body []byte) string {
	mac := hmac.New(s.newMAC, s.key)
	for _, p := range s.parts {
		switch p.field {
		case "":
			mac.Write([]byte(p.literal))
		case "body":
			mac.Write(body)
		case "id":
			mac.Write([]byte(id))
		case "timestamp":
			mac.Write(strconv.AppendInt(nil, timestamp, 10))
		}
	}
	sum := mac.Sum(nil)
	if s.base64 {
		return s.prefix + base64.StdEncoding.EncodeToString(sum)
	}
	return s.prefix + hex.EncodeToString(sum)
}

// ParseEncoding reads the command line's encoding spec: "hex" or
// "base64", optionally after a literal prefix ("sha256=hex" is the prefix
// "sha256=" and hex).
func ParseEncoding(spec string) (prefix, encoding string, err error) {
	for _, enc := range []string{"base64", "hex"} {
		if p, ok := strings.CutSuffix(spec, enc); ok {
			return p, enc, nil
		}
	}
	return "", "", fmt.Errorf("legacy signature encoding %q: want hex or base64, optionally after a literal prefix (sha256=hex)", spec)
}
