// Package routing is the vocabulary of subscriptions that the control
// plane and the agents share: which event types a subscription's patterns
// match, its CEL filter, and an event type's JSON Schema. The control plane
// compiles them to refuse a bad subscription or schema at create time; the
// agents compile the same text to route and validate at ingest, so both
// sides agree by construction.
package routing

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rivora/rivora/internal/ids"
)

// Bounds.
const (
	// MaxTypes bounds a subscription's type patterns.
	MaxTypes = 64
	// MaxTypeLen bounds an event type and a type pattern.
	MaxTypeLen = 128
)

// ValidateType checks an event type name for the catalogue: 1–128 bytes of
// letters, digits and "._-:".
func ValidateType(name string) error {
	if name == "" || len(name) > MaxTypeLen {
		return fmt.Errorf("event type must be 1–%d bytes (e.g. \"order.created\"), got %d bytes", MaxTypeLen, len(name))
	}
	for i := 0; i < len(name); i++ {
		if !typeByte(name[i]) {
			return fmt.Errorf("event type %q has %s at byte %d: use letters, digits and \"._-:\" (e.g. \"order.created\")", name, ids.CharAt(name, i), i)
		}
	}
	return nil
}

func typeByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':'
}

// ValidatePatterns checks a subscription's type patterns: at least one,
// at most MaxTypes, each an event type where "*" may stand for any run of
// characters ("order.*", "*.created", "*").
func ValidatePatterns(patterns []string) error {
	if len(patterns) == 0 {
		return errors.New("types is empty: name the event types to subscribe to, e.g. 'order.*,invoice.paid' ('*' for every type)")
	}
	if len(patterns) > MaxTypes {
		return fmt.Errorf("types has %d patterns; the limit is %d", len(patterns), MaxTypes)
	}
	seen := make(map[string]bool, len(patterns))
	for _, p := range patterns {
		if p == "" || len(p) > MaxTypeLen {
			return fmt.Errorf("type pattern %q must be 1–%d bytes", p, MaxTypeLen)
		}
		for i := 0; i < len(p); i++ {
			if p[i] != '*' && !typeByte(p[i]) {
				return fmt.Errorf("type pattern %q has %s at byte %d: use letters, digits, \"._-:\" and \"*\"", p, ids.CharAt(p, i), i)
			}
		}
		if seen[p] {
			return fmt.Errorf("type pattern %q is listed twice", p)
		}
		seen[p] = true
	}
	return nil
}

// TypeMatches tells whether an event type matches one of the patterns.
func TypeMatches(patterns []string, typ string) bool {
	for _, p := range patterns {
		if globMatch(p, typ) {
			return true
		}
	}
	return false
}

// globMatch matches s against a pattern where '*' is any run of bytes
// (none included). It is linear in practice: the classic backtracking
// over the last star.
func globMatch(pattern, s string) bool {
	if !strings.Contains(pattern, "*") {
		return pattern == s
	}
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
