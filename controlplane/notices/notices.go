// Package notices decides which operator notices (Svix's "operational
// webhooks") to send and what they say: a parked destination, its
// recovery, dead letters, a disabled destination, an expired override.
// It does no I/O and reads no clock: callers pass the time, so its rules
// are exact under test. The control plane owns one Episodes and one
// Batcher (controlplane/notify.go) and publishes the Notices they return
// through an agent's ingest to the reserved destination DestinationID, so
// notices are stored, signed, retried and ordered like any event, on that
// destination's own budget.
//
// Rules:
//   - destination.parked: once per episode, when a destination has been
//     parked without a break for at least Episodes.After.
//   - destination.recovered: once, when a destination that was notified
//     parked is no longer parked; an episode that ends before it was
//     notified produces nothing.
//   - destination.certificate_expiring: once per client certificate
//     (keyed by its fingerprint), when it expires within the warning.
//   - deadletter.created: per destination, at most one notice per
//     Batcher.Every, carrying the count since the last notice and up to
//     MaxEventIDs event ids; the first dead letter after a quiet period is
//     notified Batcher.Gather later, with the ones that came meanwhile.
package notices

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/rivora/rivora/internal/reserved"
)

// DestinationID is the reserved destination operator notices are
// delivered to; no user can create, change or delete it, nor publish to
// it (the cell token only: internal/auth).
const DestinationID = reserved.OperatorDestination

// Customer is the customer id notices are published under; the lane key
// is the destination a notice is about, so notices about one destination
// arrive in order and never wait for another destination's.
const Customer = "rivora"

// The notice types (the event type of each notice and its "type" field).
const (
	DestinationDisabled  = "destination.disabled"
	DestinationParked    = "destination.parked"
	DestinationRecovered = "destination.recovered"
	DeadLetterCreated    = "deadletter.created"
	OverrideExpired      = "override.expired"
	CertificateExpiring  = "destination.certificate_expiring"
)

// DefaultCertExpiryWarning is how long before a client certificate
// expires that destination.certificate_expiring is sent
// (--cert-expiry-warning).
const DefaultCertExpiryWarning = 14 * 24 * time.Hour

// MaxEventIDs bounds the event ids a deadletter.created notice lists.
const MaxEventIDs = 10

// Notice is one operator notice: its JSON form is the webhook body.
type Notice struct {
	Type          string    `json:"type"`
	DestinationID string    `json:"destinationId"`
	At            time.Time `json:"at"`
	Message       string    `json:"message"`
	// Reason: why a destination was disabled, or the cause of a park.
	Reason      string     `json:"reason,omitempty"`
	ParkedSince *time.Time `json:"parkedSince,omitempty"`
	// Count and EventIDs (at most MaxEventIDs) of deadletter.created.
	Count    int      `json:"count,omitempty"`
	EventIDs []string `json:"eventIds,omitempty"`
	// NotAfter: when the certificate of destination.certificate_expiring
	// expires.
	NotAfter *time.Time `json:"notAfter,omitempty"`
	// Key identifies the notice across retries and restarts (it becomes
	// the event's idempotency key, so a notice derived twice is stored
	// once within the dedup window).
	Key string `json:"-"`
	// Through is, for deadletter.created, the newest dead_at it covers.
	Through time.Time `json:"-"`
	// AuditVersion is, for a notice of an audited change (disabled,
	// expired), the config version of that change.
	AuditVersion uint64 `json:"-"`
}

// Payload is the notice's webhook body (JSON, times in RFC 3339).
func (n Notice) Payload() ([]byte, error) {
	n.At = n.At.UTC()
	if n.ParkedSince != nil {
		t := n.ParkedSince.UTC()
		n.ParkedSince = &t
	}
	return json.Marshal(n)
}

// key builds an idempotency key: "notice:<type>:<destination>:<parts>",
// with the type's dots as underscores (keys allow [A-Za-z0-9_:-]).
func key(typ, destination string, parts ...any) string {
	k := "notice:" + strings.ReplaceAll(typ, ".", "_") + ":" + destination
	for _, p := range parts {
		k += fmt.Sprintf(":%v", p)
	}
	return k
}

// Disabled is the notice for a destination Rivora disabled (a partner
// that answered 410 Gone); version is the config version that disabled
// it, which keys the notice.
func Disabled(destination, reason string, version uint64, at time.Time) Notice {
	return Notice{
		Type: DestinationDisabled, DestinationID: destination, At: at, Reason: reason,
		Message: fmt.Sprintf("destination %s was disabled: %s; nothing is delivered to it until `rivoractl destinations resume %s`", destination, reason, destination),
		Key:     key(DestinationDisabled, destination, version), AuditVersion: version,
	}
}

// Expired is the notice for a limits override that expired; version is
// the config version that removed it.
func Expired(destination string, version uint64, at time.Time) Notice {
	return Notice{
		Type: OverrideExpired, DestinationID: destination, At: at,
		Message: fmt.Sprintf("the limits override of destination %s expired; the limits file and the destination's settings apply again (`rivoractl limits get %s`)", destination, destination),
		Key:     key(OverrideExpired, destination, version), AuditVersion: version,
	}
}

// Expiring is the notice for a destination's mTLS client certificate
// (fingerprint) that expires at notAfter; it is keyed by the certificate,
// so each certificate is notified once.
func Expiring(destination, fingerprint string, notAfter, at time.Time) Notice {
	expires := notAfter.UTC()
	return Notice{
		Type: CertificateExpiring, DestinationID: destination, At: at, NotAfter: &expires,
		Message: fmt.Sprintf("the mTLS client certificate %s of destination %s expires at %s; give it a new one with `rivoractl destinations update %s --client-cert FILE --client-key FILE`",
			fingerprint, destination, expires.Format(time.RFC3339), destination),
		Key: key(CertificateExpiring, destination, shortFingerprint(fingerprint)),
	}
}

// shortFingerprint is the first 16 hex digits of a "sha256:<hex>"
// fingerprint, enough to tell certificates apart in a key.
func shortFingerprint(fingerprint string) string {
	hex := strings.TrimPrefix(fingerprint, "sha256:")
	return hex[:min(len(hex), 16)]
}
