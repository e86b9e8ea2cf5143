package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/edge"
	"github.com/rivora/rivora/internal/fingerprint"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// This file holds the cell's idempotency rule for the events an edge
// accepted (package edge) while it could not ask the cell: the partition
// owner checks each one that an edge forwarded into INGEST before it
// stores it in its lane, against the records this package's claims keep
// (idempotency.go, fanout_idempotency.go).
//
// The rule, per event:
//   - an event published to a destination by name (no subscription_id):
//     compared with the cell's own copy of the event when the cell stored
//     one (found by a probe of INGEST and of the partition's lanes:
//     originals.go; the cell's gateway writes no record for it), and
//     held to a create-only record of its fingerprint under its event id
//     (the cell's copy's fingerprint when there is one). No record →
//     recorded now (a later publish of the key at the cell with another
//     payload is refused: the gateway reads these records). The same
//     fingerprint → the same event: stored, and the lanes' dedup by event
//     id keeps one copy. Another fingerprint → a conflict. An event
//     published without a key has a fresh UUIDv7 id: its record is new by
//     construction and costs one KV write.
//   - a delivery of a fan-out (or of a test event; subscription_id set):
//     its publish's record is under (customer, key) and holds the
//     fingerprint of the whole publish and all its routes, which one
//     delivery cannot write. With its key (edge.KeyHeader) and a record
//     there: the same fingerprint (as a fan-out, or as a test event to its
//     subscription) → stored; another → a conflict. No record, or no key
//     → stored, nothing recorded (so a later publish of the key at the
//     cell with another payload is not refused there; the lanes' dedup
//     then keeps the edge's copy, the one acknowledged first).
//
// A conflict is never dropped: the owner stores the copy in its lane,
// marked (Event.idempotency_conflict, with ForwardedConflict's text), and
// it becomes a dead letter at its turn without being sent.
//
// Like every idempotency rule of Rivora it holds within the dedup window:
// a record older than that has expired, and the copy is then stored as a
// new event.

// ForwardedCheck checks events edges forwarded against the cell's
// idempotency records. It shares the IDEMPOTENCY bucket with the
// gateway (and creates it if the gateway has not yet).
type ForwardedCheck struct {
	claims    *claims
	originals *originals
}

// NewForwardedCheck opens the IDEMPOTENCY bucket as the gateway does
// (window: the dedup window).
func NewForwardedCheck(ctx context.Context, js jetstream.JetStream, window time.Duration, replicas int) (*ForwardedCheck, error) {
	if window <= 0 {
		window = DefaultDedupWindow
	}
	c, err := newClaims(ctx, js, IdempotencyBucket, window, replicas)
	if err != nil {
		return nil, err
	}
	return &ForwardedCheck{claims: c, originals: newOriginals(js, c, replicas)}, nil
}

// CheckForwarded answers, per event, "" when it may be stored as the
// cell's event, else why it may not (ForwardedConflict). An error means
// the records could not be read or written: nothing is decided, check
// again.
func (f *ForwardedCheck) CheckForwarded(ctx context.Context, events []edge.Forwarded) ([]string, error) {
	conflicts := make([]string, len(events))
	originals, err := f.originalsOf(ctx, events)
	if err != nil {
		return nil, err
	}
	var direct []recordWrite
	for i, fw := range events {
		ev := fw.Event
		if ev.GetSubscriptionId() != "" {
			conflict, err := f.claims.checkRoutedCopy(ctx, fw)
			if err != nil {
				return nil, err
			}
			if conflict {
				conflicts[i] = ForwardedConflict(fw)
			}
			continue
		}
		if !validRecordKey(ev.GetEventId()) {
			continue // never an id a gateway gives (UUIDs): nothing to look up
		}
		fp := fingerprint.Of(ev)
		record := fp
		if orig, ok := originals[i]; ok {
			// The cell's copy is stored: it is the original, and what the
			// record keeps.
			record = orig
			if !bytes.Equal(orig, fp) {
				conflicts[i] = ForwardedConflict(fw)
			}
		}
		direct = append(direct, recordWrite{index: i, key: ev.GetEventId(), value: record, same: func(existing []byte) error {
			if bytes.Equal(existing, fp) {
				return nil
			}
			return errConflict
		}})
	}
	conflicted, err := f.claims.recordEach(ctx, direct)
	if err != nil {
		return nil, err
	}
	for _, i := range conflicted {
		conflicts[i] = ForwardedConflict(events[i])
	}
	return conflicts, nil
}

// originalsOf finds, for each direct copy (by index in events), the
// fingerprint of the cell's own copy of its event, when the cell stored
// one: in INGEST (not moved yet) or in the lanes of its partition. A
// key's record alone would not tell: the cell's gateway records no direct
// event (direct_idempotency.go).
func (f *ForwardedCheck) originalsOf(ctx context.Context, events []edge.Forwarded) (map[int][]byte, error) {
	var probes []probe
	var of []int
	for i, fw := range events {
		ev := fw.Event
		if ev.GetSubscriptionId() != "" || !validRecordKey(ev.GetEventId()) {
			continue
		}
		probes = append(probes, lanesProbe(fw.Partition, ev, ev.GetEventId()), ingestProbe(fw.Partition, ev, ev.GetEventId()))
		of = append(of, i, i)
	}
	if len(probes) == 0 {
		return nil, nil
	}
	got, err := f.originals.probeAll(ctx, probes)
	if err != nil {
		return nil, err
	}
	var found map[int][]byte
	for k, at := range got {
		i := of[k]
		if _, done := found[i]; done || !at.Duplicate {
			continue
		}
		fp, ok, err := f.originals.fingerprintOf(ctx, at, events[i].Partition, events[i].Event, nil)
		if err != nil {
			return nil, err
		}
		if ok {
			if found == nil {
				found = make(map[int][]byte)
			}
			found[i] = fp
		}
	}
	return found, nil
}

// DuplicateConflict tells why copy (fingerprint fp), which the lanes of
// its partition answered as a duplicate of the event at seq of stream, is
// not delivered: "" when it is that event (the partition owner's mover
// asks: owner.ForwardedCheck). copy.Edge is the edge that accepted it, ""
// for a copy accepted at the cell. An original found nowhere to compare
// counts as the same (originals.go).
func (f *ForwardedCheck) DuplicateConflict(ctx context.Context, copy edge.Forwarded, fp []byte, stream string, seq uint64) (string, error) {
	same, err := f.originals.same(ctx, Stored{Stream: stream, Seq: seq, Duplicate: true}, copy.Partition, copy.Event, fp, nil)
	switch {
	case err != nil:
		return "", err
	case same:
		return "", nil
	case copy.Edge != "":
		return ForwardedConflict(copy), nil
	}
	ev := copy.Event
	return fmt.Sprintf("the idempotency key of event %s was used for another event (a different payload, type, lane or content type) stored first in its lane; this copy (customer %s, destination %s), accepted through another agent at %s while the first was stored, was not delivered",
		ev.GetEventId(), ev.GetCustomerId(), ev.GetDestinationId(), acceptedAt(ev)), nil
}

// recordEach makes each create-only record of writes, or reads the one
// there, all in flight at once; it returns the index (recordWrite.index)
// of each write whose key holds another event's record. Nothing is ever
// released: an edge's copy is checked once it is durable at the edge.
func (c *claims) recordEach(ctx context.Context, writes []recordWrite) ([]int, error) {
	futures := make([]jetstream.PubAckFuture, len(writes))
	for i := range writes {
		msg := nats.NewMsg(c.subject + writes[i].key)
		msg.Data = writes[i].value
		f, err := c.js.PublishMsgAsync(msg, jetstream.WithExpectLastSequencePerSubject(0))
		if err != nil {
			return nil, fmt.Errorf("record idempotency key: %w", err)
		}
		futures[i] = f
	}
	var conflicted []int
	var firstErr error
	for i, f := range futures {
		var err error
		select {
		case <-f.Ok():
			continue
		case err = <-f.Err():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if firstErr != nil {
			continue // every answer is awaited before returning
		}
		if !isWrongLastSequence(err) {
			firstErr = fmt.Errorf("record idempotency key: %w", err)
			continue
		}
		switch _, err := c.recordOver(ctx, &writes[i]); {
		case errors.Is(err, errConflict):
			conflicted = append(conflicted, writes[i].index)
		case err != nil:
			firstErr = err
		}
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return conflicted, nil
}

// checkRoutedCopy tells whether an edge's copy of a delivery of a routed
// publish conflicts with the record of its key at the cell: only when
// its key is known and the record there has another fingerprint, as a
// fan-out and as a test event to its subscription.
func (c *claims) checkRoutedCopy(ctx context.Context, fw edge.Forwarded) (bool, error) {
	if fw.Key == "" {
		return false, nil
	}
	ev := fw.Event
	entry, err := c.kv.Get(ctx, fanoutRecordKey(ev.GetCustomerId(), fw.Key))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read idempotency key: %w", err)
	}
	var rec fanoutRecord
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		// Not a record this gateway wrote: nothing to hold the copy to.
		return false, nil
	}
	for _, test := range []string{"", ev.GetSubscriptionId()} {
		if bytes.Equal(rec.Fingerprint, routedFingerprint(&routed{base: ev, test: test})) {
			return false, nil
		}
	}
	return true, nil
}

// ForwardedConflict is why an edge's copy is not delivered: its key was
// used at the cell for another event. It is the dead letter's last error
// (rivoractl dlq list/show) and the event's in its history.
func ForwardedConflict(fw edge.Forwarded) string {
	ev := fw.Event
	key := "the idempotency key of event " + ev.GetEventId()
	if fw.Key != "" {
		key = fmt.Sprintf("idempotency key %q", fw.Key)
	}
	target := "destination " + ev.GetDestinationId()
	if sub := ev.GetSubscriptionId(); sub != "" {
		target += ", subscription " + sub
	}
	return fmt.Sprintf("%s was used at the cell for another event (a different payload, type, lane or content type) while edge %s held this copy; this copy of event %s (customer %s, %s), accepted by edge %s at %s, was not delivered",
		key, fw.Edge, ev.GetEventId(), ev.GetCustomerId(), target, fw.Edge, acceptedAt(ev))
}

func acceptedAt(ev *rivorav1.Event) string {
	if ev.GetAcceptedAt() == nil {
		return "an unknown time"
	}
	return ev.GetAcceptedAt().AsTime().UTC().Format(time.RFC3339Nano)
}

// validRecordKey tells whether id can be a key of the bucket (NATS KV
// keys: letters, digits and -/_=.).
func validRecordKey(id string) bool {
	if id == "" || id[0] == '.' || id[len(id)-1] == '.' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '/' || c == '_' || c == '=' || c == '.') {
			return false
		}
	}
	return true
}
