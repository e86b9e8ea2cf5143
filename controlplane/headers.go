package controlplane

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/ids"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Custom headers: set per destination (a gateway's Authorization, a
// tenant id), sent on every attempt. Their values are kept like secrets:
// the agents' feed carries them, answers and the audit log only their
// names (answers add each value's fingerprint).

const (
	// maxHeaders bounds a destination's custom headers.
	maxHeaders = 32
	// maxHeaderName and maxHeaderValue bound one header, in bytes.
	maxHeaderName  = 256
	maxHeaderValue = 4 << 10
)

// reservedHeaders are the names Rivora sets on every attempt, or that
// belong to the connection rather than the request (hop-by-hop, RFC 9110
// 7.6.1), by lower-case name; reservedHeaderPrefixes are whole families.
var (
	reservedHeaders = map[string]string{
		"content-type":      "Rivora sets it from the event's content_type",
		"content-length":    "Rivora sets it from the payload",
		"host":              "it comes from the destination's URL",
		"user-agent":        "Rivora sets it",
		"idempotency-key":   "Rivora sets it to the event id",
		"traceparent":       "Rivora sets the W3C trace context of each attempt",
		"tracestate":        "Rivora sets the W3C trace context of each attempt",
		"connection":        "it is a hop-by-hop header",
		"keep-alive":        "it is a hop-by-hop header",
		"te":                "it is a hop-by-hop header",
		"trailer":           "it is a hop-by-hop header",
		"transfer-encoding": "it is a hop-by-hop header",
		"upgrade":           "it is a hop-by-hop header",
	}
	reservedHeaderPrefixes = map[string]string{
		"webhook-": "Rivora sets the Standard Webhooks headers (webhook-id, webhook-timestamp, webhook-signature)",
		"rivora-":  "Rivora sets its own rivora-* headers",
		"proxy-":   "proxy-* headers are for proxies, not the receiver",
	}
)

// validateHeaderName refuses a name that is not an HTTP token or that
// Rivora reserves (an ErrInvalid naming the rule).
func validateHeaderName(name string) error {
	if name == "" {
		return errorf(ErrInvalid, "header: empty name; give 'Name: value'")
	}
	if len(name) > maxHeaderName {
		return errorf(ErrInvalid, "header name of %d bytes: at most %d", len(name), maxHeaderName)
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			// Only what precedes the bad character: a value typed
			// without its colon would otherwise be echoed back.
			return errorf(ErrInvalid, "header name %q… has character %s at byte %d, which is not allowed (letters, digits and !#$%%&'*+-.^_`|~ only; give 'Name: value')", name[:i], ids.CharAt(name, i), i)
		}
	}
	lower := strings.ToLower(name)
	if why, ok := reservedHeaders[lower]; ok {
		return errorf(ErrInvalid, "header %q is reserved: %s", name, why)
	}
	for prefix, why := range reservedHeaderPrefixes {
		if strings.HasPrefix(lower, prefix) {
			return errorf(ErrInvalid, "header %q is reserved: %s", name, why)
		}
	}
	return nil
}

// validateHeader checks one header to set.
func validateHeader(h *rivorav1.Header) error {
	name, value := h.GetName(), h.GetValue()
	if err := validateHeaderName(name); err != nil {
		return err
	}
	if value == "" {
		return errorf(ErrInvalid, "header %q: empty value (to drop a header, remove it)", name)
	}
	if len(value) > maxHeaderValue {
		return errorf(ErrInvalid, "header %q: value of %d bytes, at most %d", name, len(value), maxHeaderValue)
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return errorf(ErrInvalid, "header %q: value holds control character %q at byte %d (CR, LF, NUL and other controls are not allowed)", name, c, i)
		}
	}
	return nil
}

// isTokenChar reports whether c may appear in an HTTP field name (tchar,
// RFC 9110 5.6.2).
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// applyHeaders sets the headers in set on d (replacing a same-named
// one, whatever its case) and drops those named in remove (mergeHeaders),
// and returns what it changed, by name only, for the audit log.
func applyHeaders(d *rivorav1.Destination, set []*rivorav1.Header, remove []string) ([]string, error) {
	headers, changes, err := mergeHeaders(fmt.Sprintf("destination %q", d.GetId()), d.GetHeaders(), set, remove)
	if err != nil {
		return nil, err
	}
	d.Headers = headers
	return changes, nil
}

// mergeHeaders returns current with the headers in set set (replacing a
// same-named one, whatever its case) and those named in remove dropped,
// validating each, and what it changed, by name only, for the audit log.
// Names are kept in canonical form (Authorization), sorted. The result
// is bounded by maxHeaders; a header removed that is not there, or named
// twice, is an ErrInvalid. owner names whose headers they are, for
// messages.
func mergeHeaders(owner string, current, set []*rivorav1.Header, remove []string) ([]*rivorav1.Header, []string, error) {
	byName := make(map[string]*rivorav1.Header, len(current))
	for _, h := range current {
		byName[h.GetName()] = h
	}
	named := make(map[string]bool, len(set)+len(remove))
	var changes []string
	for _, raw := range remove {
		if err := validateHeaderName(raw); err != nil {
			return nil, nil, err
		}
		name := http.CanonicalHeaderKey(raw)
		if named[name] {
			return nil, nil, errorf(ErrInvalid, "header %q is named twice", raw)
		}
		named[name] = true
		if _, ok := byName[name]; !ok {
			return nil, nil, errorf(ErrInvalid, "remove header %q: %s has no such header (it has %s)", raw, owner, headerNames(current))
		}
		delete(byName, name)
		changes = append(changes, "header "+name+" removed")
	}
	for _, h := range set {
		if err := validateHeader(h); err != nil {
			return nil, nil, err
		}
		name := http.CanonicalHeaderKey(h.GetName())
		if named[name] {
			return nil, nil, errorf(ErrInvalid, "header %q is named twice", h.GetName())
		}
		named[name] = true
		byName[name] = &rivorav1.Header{Name: name, Value: h.GetValue()}
		changes = append(changes, "header "+name+" set")
	}
	if len(byName) > maxHeaders {
		return nil, nil, errorf(ErrInvalid, "%d custom headers: at most %d per %s", len(byName), maxHeaders, strings.Fields(owner)[0])
	}
	var headers []*rivorav1.Header
	for _, h := range byName {
		headers = append(headers, h)
	}
	slices.SortFunc(headers, func(a, b *rivorav1.Header) int { return strings.Compare(a.GetName(), b.GetName()) })
	return headers, changes, nil
}

// headerNames lists headers' names for messages ("none" when empty).
func headerNames(hs []*rivorav1.Header) string {
	if len(hs) == 0 {
		return "none"
	}
	names := make([]string, len(hs))
	for i, h := range hs {
		names[i] = h.GetName()
	}
	return strings.Join(names, ", ")
}

// withoutHeaderValues replaces each custom header's value by its
// fingerprint.
func withoutHeaderValues(d *rivorav1.Destination) { maskHeaderValues(d.GetHeaders()) }

// maskHeaderValues replaces each header's value by its fingerprint.
func maskHeaderValues(hs []*rivorav1.Header) {
	for _, h := range hs {
		h.ValueFingerprint = auth.Fingerprint(h.GetValue())
		h.Value = ""
	}
}

// describeHeaders is the audit detail of create's headers: names only.
func describeHeaders(hs []*rivorav1.Header) string {
	if len(hs) == 0 {
		return ""
	}
	return fmt.Sprintf(", headers %s", headerNames(hs))
}
