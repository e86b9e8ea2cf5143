// Package eventid derives the id of an event published with an
// idempotency key, as the server does, so that a publisher knows the id
// before it publishes. It is the SDK's, and the server's one rule: the
// agent and the control plane call it too, and the TypeScript SDK is
// tested against the same vectors (testdata/eventid_vectors.json and
// testdata/subscription_eventid_vectors.json).
package eventid

import (
	"crypto/sha256"

	"github.com/google/uuid"
)

// Domains: each id derivation hashes its own first part, so ids of two
// derivations never come from the same hash input.
const (
	destinationDomain  = "rivora event id v1"
	subscriptionDomain = "rivora subscription event id v1"
)

// FromKey is the id of an event published with an idempotency key. An
// idempotency key is scoped to its (destination, customer): two customers
// using the same key publish two events, so the id is derived from all
// three, and the same key in the same scope always names the same event —
// its publisher knows the id before publishing, and a retry after any
// failure gets the same one.
//
// A UUIDv7 key (what the SDKs generate) gives a UUIDv7 id with the key's
// time, so the id still sorts by when the event was made; any other key
// gives a UUIDv8 (RFC 9562's form for ids derived by a hash).
func FromKey(destination, customer, key string) string {
	return derive(destinationDomain, destination, customer, key)
}

// ForSubscription is the id of the delivery a publish without a
// destination (a fan-out) stores for one subscription, when the publish
// has an idempotency key: derived from (subscription, customer, key), so
// each subscription's delivery has its own id, a retry gets the same ones,
// and the publisher can compute them from the routes it is answered with.
// It is domain-separated from FromKey: a subscription's delivery never
// shares an id with an event published to a destination by name, even
// when a destination and a subscription have the same id. Versions are as
// for FromKey.
func ForSubscription(subscription, customer, key string) string {
	return derive(subscriptionDomain, subscription, customer, key)
}

// uuidLength tells whether a string of n bytes may be a UUID in one of
// the forms uuid.Parse reads: 36 (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx,
// an SDK's key), 45 (urn:uuid:…), 38 ({…}) or 32 (hex digits alone).
func uuidLength(n int) bool { return n == 36 || n == 45 || n == 38 || n == 32 }

// derive hashes the domain and the three parts, each NUL-terminated (none
// of them holds a NUL where it matters: the domain is fixed, so two
// domains' inputs differ in their first part), into a UUID.
func derive(domain, scope, customer, key string) string {
	h := sha256.New()
	for _, part := range []string{domain, scope, customer, key} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	// The sum goes into an array on the stack: no allocation per event.
	var sum [sha256.Size]byte
	var id uuid.UUID
	copy(id[:], h.Sum(sum[:0]))
	version := byte(8)
	// Only a key of one of the lengths uuid.Parse reads is parsed: its
	// error for any other would cost an allocation per event.
	if uuidLength(len(key)) {
		if k, err := uuid.Parse(key); err == nil && k.Version() == 7 && k.Variant() == uuid.RFC4122 {
			copy(id[:6], k[:6]) // the key's unix milliseconds
			version = 7
		}
	}
	id[6] = id[6]&0x0f | version<<4
	id[8] = id[8]&0x3f | 0x80 // RFC 4122 / 9562 variant
	return id.String()
}
