package cli

import (
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Custom headers of a destination: --header 'Name: value' on create and
// update, --remove-header Name on update. The server validates names and
// values (reserved names, token characters, length); rivoractl only
// splits the flag.

// repeated is a flag value collecting every occurrence as given: unlike
// StringSliceFlag it never splits at commas, which header values carry.
type repeated []string

func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }
func (r *repeated) String() string     { return strings.Join(*r, ", ") }

// headerFlags are create's and update's --header (and update's
// --remove-header). Made per command: the values collect the flags.
func headerFlags(update bool) []ucli.Flag {
	flags := []ucli.Flag{&ucli.GenericFlag{
		Name:  "header",
		Value: &repeated{},
		Usage: "custom header `'Name: value'` sent on every attempt (repeat for several; e.g. 'Authorization: Bearer abc'). " +
			"Values are kept like secrets: answers show only a fingerprint. Refused: webhook-*, rivora-*, proxy-*, content-type, content-length, host, user-agent, idempotency-key and hop-by-hop headers",
	}}
	if update {
		flags = append(flags, &ucli.GenericFlag{Name: "remove-header", Value: &repeated{}, Usage: "stop sending custom header `NAME` (repeat for several)"})
	}
	return flags
}

// flagValues is what a repeated flag collected.
func flagValues(c *ucli.Context, name string) []string {
	if r, ok := c.Generic(name).(*repeated); ok && r != nil {
		return *r
	}
	return nil
}

// headersFlag parses every --header 'Name: value'.
func headersFlag(c *ucli.Context) ([]*rivorav1.Header, error) {
	var out []*rivorav1.Header
	for _, raw := range flagValues(c, "header") {
		name, value, ok := strings.Cut(raw, ":")
		name, value = strings.TrimSpace(name), strings.Trim(value, " \t")
		if !ok || name == "" {
			// Not echoed: a value is often a credential.
			return nil, usagef("--header #%d has no 'Name:' before its value: want 'Name: value', e.g. --header 'Authorization: Bearer abc'", len(out)+1)
		}
		out = append(out, &rivorav1.Header{Name: name, Value: value})
	}
	return out, nil
}

// headersText shows custom headers as answers carry them: names and
// value fingerprints, "-" when none.
func headersText(hs []*rivorav1.Header) string {
	if len(hs) == 0 {
		return "-"
	}
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = fmt.Sprintf("%s: %s", h.GetName(), h.GetValueFingerprint())
	}
	return strings.Join(parts, "; ") + " (value fingerprints)"
}

// rotationAndHeaders are the fields of a destination shown only when it
// has them: a rotation's previous secret, custom headers.
func rotationAndHeaders(d *rivorav1.Destination) []string {
	var kv []string
	if d.GetPreviousSecretFingerprint() != "" {
		kv = append(kv, "OLD SECRET", previousSecretText(d.GetPreviousSecretFingerprint(), d.GetPreviousSecretExpiresAt()))
	}
	if len(d.GetHeaders()) > 0 {
		kv = append(kv, "HEADERS", headersText(d.GetHeaders()))
	}
	return kv
}
