package ingest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/internal/fingerprint"
	"github.com/rivora/rivora/internal/ids"
)

// This file is where a fan-out's "stored once per key" rule lives, and the
// only place: a publish without destination_id (a fan-out, or a test
// event to one subscription) with an idempotency key is one event of its
// customer, however many subscriptions it reaches.
//
// The rule: the first such publish records, create-only (as the claims of
// idempotency.go), its fingerprint AND the routes it chose (subscription,
// destination, event id) under a record key of its own scope (customer,
// key). A retry with the same fingerprint stores exactly those routes
// again — the streams' msg-id dedup makes that a no-op for those already
// stored and completes a store that failed midway — and answers them, so a
// subscription created (or deleted, or changed) after the first publish
// does not change what the key stored. A route whose destination was
// deleted since is answered as recorded, not stored again (settle): its
// event died with its destination. Another fingerprint is refused
// (already_exists). Of two racing publishes the create-only write decides:
// the loser takes the winner's routes. The record is not released when the
// store fails (claim.keep): part of its deliveries may be stored.
//
// An event published to a destination by name needs no record at the
// cell (direct_idempotency.go: its stream answers, one write); a fan-out
// keeps its record, for it is also where the routes the first publish
// chose are kept. The rule lives in this file's three functions:
// fanoutRecordKey (the scope), routedFingerprint (what "the same publish"
// means) and (*routed).record (decide the routes once, adopt them on a
// retry); routeGone says which recorded route a retry no longer stores.

// fanoutRecordPrefix starts a fan-out's record key. Direct events' records
// are keyed by their event id, a UUID, which never holds a '.': the two
// can never collide, and a fan-out's deliveries' ids
// (eventid.ForSubscription) are UUIDs of another hash domain.
const fanoutRecordPrefix = "fanout."

// fanoutRecordKey is the record key of a keyed publish without a
// destination by customer: its own hash domain, hex (a valid KV token).
func fanoutRecordKey(customer, key string) string {
	h := sha256.New()
	for _, part := range []string{"rivora fan-out record v1", customer, key} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return fanoutRecordPrefix + hex.EncodeToString(h.Sum(nil)[:20])
}

// routedFingerprint is what must match for a repeated key to be the same
// routed publish: the event's type, lane, content type and payload, and
// its target (a fan-out, or a test event to one named subscription), so
// that a key used for a fan-out and then for a test event is a conflict.
func routedFingerprint(r *routed) []byte {
	target := "fan-out"
	if r.test != "" {
		target = "test:" + r.test
	}
	return fingerprint.Of(r.base, []byte(target))
}

// fanoutRecord is what the IDEMPOTENCY bucket holds for a keyed routed
// publish.
type fanoutRecord struct {
	Fingerprint []byte  `json:"fingerprint"`
	Routes      []route `json:"routes"`
}

// fanoutRecordSize bounds an encoded record: MaxFanout routes of ids and
// versions at their longest (a fingerprint, and JSON's punctuation and
// names).
const fanoutRecordSize = 128 + MaxFanout*(len(`{"subscription":"","destination":"","event_id":"","version":18446744073709551615},`)+2*ids.MaxLen+36)

// The bucket holds the largest record: this fails to compile otherwise.
var _ [idempotencyValueSize - fanoutRecordSize]struct{}

// record is the publish's idempotency record: written when the key is
// new (the routes planned now), adopted when it was there with the same
// fingerprint (the routes it recorded replace the planned ones, and the
// publish is a retry), a conflict otherwise.
func (r *routed) record(i int) (recordWrite, error) {
	value, err := json.Marshal(fanoutRecord{Fingerprint: r.fingerprint, Routes: r.routes})
	if err != nil {
		return recordWrite{}, fmt.Errorf("encode idempotency record: %w", err)
	}
	return recordWrite{
		index: i, key: fanoutRecordKey(r.base.GetCustomerId(), r.key), value: value, keep: true,
		same: func(existing []byte) error {
			var rec fanoutRecord
			if err := json.Unmarshal(existing, &rec); err != nil {
				return fmt.Errorf("read the idempotency record of key %q: %w", r.key, err)
			}
			if !bytes.Equal(rec.Fingerprint, r.fingerprint) {
				return errConflict
			}
			r.routes, r.retry = rec.Routes, true
			return nil
		},
		conflict: func(inBatch bool) error {
			msg := fmt.Sprintf("idempotency key %q was already used by customer %s for another publish without destination_id (a different payload, type, lane, content type or subscription_id); a key names one event — use a new key for a new event",
				r.key, r.base.GetCustomerId())
			return inBatchConflict(msg, i, inBatch)
		},
	}, nil
}

// routeGone tells whether a recorded route's destination was deleted
// since the route was recorded, as an owner judges an event's
// (agent/owner: gather): the registry has every destination made up to
// the version this agent applied, so one it lacks although it applied
// the route's version was deleted since — while an agent behind that
// version may just not know it yet; and a destination made after the
// route's version is another one of the same id, the route's deleted.
// A route without a version says nothing: not gone.
func routeGone(rt route, d *destinations.Destination, known bool, applied uint64) bool {
	if rt.Version == 0 {
		return false
	}
	if !known {
		return rt.Version <= applied
	}
	return d.CreatedVersion > rt.Version
}
