// Package eventid derives the id of an event published with an
// idempotency key, as the server does, so that a publisher knows the id
// before it publishes. It is the SDK's, and the server's one rule: the
// agent and the control plane call it too, and the TypeScript SDK is
// tested against the same vectors (testdata/eventid_vectors.json).
package eventid

import (
	"crypto/sha256"

	"github.com/google/uuid"
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
	h := sha256.New()
	for _, part := range []string{"rivora event id v1", destination, customer, key} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	var id uuid.UUID
	copy(id[:], h.Sum(nil))
	version := byte(8)
	if k, err := uuid.Parse(key); err == nil && k.Version() == 7 && k.Variant() == uuid.RFC4122 {
		copy(id[:6], k[:6]) // the key's unix milliseconds
		version = 7
	}
	id[6] = id[6]&0x0f | version<<4
	id[8] = id[8]&0x3f | 0x80 // RFC 4122 / 9562 variant
	return id.String()
}
