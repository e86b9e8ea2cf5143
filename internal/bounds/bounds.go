// Package bounds holds the size limits on what Rivora's APIs accept, so
// that no single request can exhaust a server and no single stored value
// can break a reader: request bodies (bounded on the wire and again after
// decompression) and strings. The agent and the control plane both apply
// them; the rules live here once.
package bounds

import (
	"fmt"
	"net/http"
	"unicode/utf8"

	"connectrpc.com/connect"
)

// String lengths, in bytes.
const (
	// URL bounds a destination's URL (and any other URL an API stores).
	URL = 2 << 10
	// Text bounds free text: reasons, descriptions, details.
	Text = 1 << 10
	// Name bounds short names: authors, token names, agent addresses.
	Name = 256
	// Secret bounds a signing secret as given.
	Secret = 1 << 10
	// PEM bounds a certificate chain or CA bundle as given: a leaf and
	// two intermediates of RSA-4096 take ~6 KiB, a CA bundle several
	// such certificates.
	PEM = 64 << 10
	// KeyPEM bounds a private key as given (RSA-8192 takes ~6.4 KiB).
	KeyPEM = 16 << 10
)

// AuditDetail bounds the detail of an audit entry the control plane
// writes itself (a limits file's diff or refusal can be long; a key
// of megabytes must not make a line of megabytes). Agents' entries are
// bounded by Text on the way in.
const AuditDetail = 16 << 10

// Truncate returns value cut to at most limit bytes (at a UTF-8
// boundary), ending in a marker that says how long it was, so that a
// stored record stays bounded whatever it quotes. A value within limit is
// returned as is.
func Truncate(value string, limit int) string {
	if len(value) <= limit {
		return value
	}
	marker := fmt.Sprintf("… [cut: %d bytes]", len(value))
	keep := max(0, limit-len(marker))
	for keep > 0 && !utf8.RuneStart(value[keep]) {
		keep--
	}
	out := value[:keep] + marker
	if len(out) > limit { // a limit shorter than the marker: cut that too
		n := limit
		for n > 0 && !utf8.RuneStart(out[n]) {
			n--
		}
		out = out[:n]
	}
	return out
}

// String checks that value is at most limit bytes. field names it in the
// error, which the caller returns as InvalidArgument.
func String(field, value string, limit int) error {
	if len(value) > limit {
		return fmt.Errorf("%s is %d bytes; the limit is %d", field, len(value), limit)
	}
	return nil
}

// Strings checks each value of a list as String does, and the list's
// length against count.
func Strings(field string, values []string, limit, count int) error {
	if len(values) > count {
		return fmt.Errorf("%s has %d entries; the limit is %d", field, len(values), count)
	}
	for i, v := range values {
		if err := String(fmt.Sprintf("%s[%d]", field, i), v, limit); err != nil {
			return err
		}
	}
	return nil
}

// DeadLetterList bounds how many dead letters one ListDeadLetters answer
// holds, and is its default: each is read from the archive and held in
// memory for the answer. A larger limit is taken as this one (the answer
// says truncated when more match). The CLI asks for 1000 by default, the
// console for 500.
const DeadLetterList = 1000

// DefaultMessage bounds one request message of the services that carry
// no payloads (admin, tokens, agent reports, lookups), after
// decompression.
const DefaultMessage = 4 << 20

// Handler bounds the raw body of h's requests to a little more than
// maxMessage bytes, so a body that does not compress (or is not a message
// at all) is cut on the wire; give the same maxMessage to ReadMax, which
// bounds the message after decompression. The body must also keep the
// BodyPace.
func Handler(maxMessage int, h http.Handler) http.Handler {
	raw := rawLimit(maxMessage)
	h = framing(h) // a malformed envelope is InvalidArgument; inside the bound, as it reads the bounded body
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		BodyPace.Apply(w, r)
		r.Body = http.MaxBytesReader(w, r.Body, raw)
		h.ServeHTTP(w, r)
	})
}

// ReadMax is the handler option bounding a message to maxMessage bytes
// after decompression: connect-go answers ResourceExhausted above it and
// never decompresses more than maxMessage+1 bytes into memory.
func ReadMax(maxMessage int) connect.HandlerOption {
	return connect.WithReadMaxBytes(maxMessage)
}

// rawLimit is the wire bound for a message bound: gzip can grow
// incompressible data by a few bytes per 16 KiB block, and gRPC adds a
// 5-byte envelope.
func rawLimit(maxMessage int) int64 {
	return int64(maxMessage) + int64(maxMessage)/256 + 64<<10
}
