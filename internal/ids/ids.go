// Package ids is the rule for the ids that become NATS subject tokens
// (destinations, customers): the agent checks it at ingest, the control
// plane when a destination is created, and they must agree.
package ids

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxLen bounds an id, in bytes.
const MaxLen = 64

// Plain reports whether c may appear in an id (and so in a subject token
// unescaped).
func Plain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// Validate checks an id: 1–MaxLen bytes of [A-Za-z0-9_-]. what names the
// field in the error.
func Validate(what, id string) error {
	if id == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(id) > MaxLen {
		return fmt.Errorf("%s %.20q… is %d bytes; the limit is %d", what, id, len(id), MaxLen)
	}
	for i := 0; i < len(id); i++ {
		if !Plain(id[i]) {
			return fmt.Errorf("%s %q has %s at byte %d; use letters, digits, '_' and '-'", what, id, CharAt(id, i), i)
		}
	}
	return nil
}

// CharAt quotes the character that starts at byte i of s, for an error
// that points at it: the whole character ('é', not the 'Ã' of its first
// byte), or the byte in hex when s is not UTF-8 there.
func CharAt(s string, i int) string {
	r, size := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && size <= 1 {
		return fmt.Sprintf(`'\x%02x'`, s[i])
	}
	return strconv.QuoteRune(r)
}
