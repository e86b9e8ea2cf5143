package ingest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/internal/errkind"
)

// IdempotencyBucket is the key-value bucket that remembers, for the dedup
// window, what each idempotency key was first used for.
const IdempotencyBucket = "IDEMPOTENCY"

// reservedKeyPrefixes start the dedup ids Rivora gives its own re-ingests
// (replays, resends); a client key may not look like one.
var reservedKeyPrefixes = []string{"replay:", "resend:"}

// claims enforces Stripe's rule for idempotency keys with create-only
// records in a key-value bucket: within the dedup window a key names one
// event. The first publish with a key records the event's fingerprint
// under the event id (derived from the key and its scope); a later
// publish with the key and the same fingerprint is the same event (stored
// once: the streams dedupe on the event id), one with another fingerprint
// is refused (errkind.Exists: AlreadyExists). It is the rule of a fan-out
// (fanout_idempotency.go), of an edge's gateway, and of the edges' copies
// at the cell (forwarded.go); the cell's gateway keeps a direct event's
// rule without a record, in one write (direct_idempotency.go).
//
// The record is written before the event is stored, so of two racing
// publishes with one key and different payloads exactly one can win. A
// record whose event was never stored (the store failed after it) is
// harmless: a retry with the same fingerprint stores the event then.
//
// A publish without destination_id records its fingerprint and its routes
// under a key of its own scope: fanout_idempotency.go holds that rule.
type claims struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
	// subject prefixes a record's key: "$KV.<bucket>.".
	subject string
}

// stream is the records' stream, which a claim writes.
func (c *claims) stream() string { return "KV_" + c.kv.Bucket() }

// idempotencyValueSize bounds one record: a fingerprint, or a fan-out's
// fingerprint and up to MaxFanout routes (fanoutRecordSize), with room
// for the headers NATS counts.
const idempotencyValueSize = 128 << 10

// newClaims opens the idempotency records in bucket: IdempotencyBucket in
// a cell, the edge's own at an edge (EdgeTarget).
func newClaims(ctx context.Context, js jetstream.JetStream, bucket string, window time.Duration, replicas int) (*claims, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:       bucket,
		Description:  "What each idempotency key was first used for, for the dedup window.",
		TTL:          window,
		History:      1,
		MaxValueSize: idempotencyValueSize,
		Storage:      jetstream.FileStorage,
		Replicas:     max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("create %s bucket: %w", bucket, err)
	}
	return &claims{js: js, kv: kv, subject: "$KV." + bucket + "."}, nil
}

// recordWrite is one idempotency record a publish makes, create-only.
type recordWrite struct {
	// index is the event's in its request, for errors.
	index int
	// key is the record's key in the bucket; value what it records.
	key   string
	value []byte
	// same reads the record another publish (or an earlier try of this
	// one) left under key: nil when it is this publish's (the same
	// event; it may take what the record holds), errConflict when it is
	// another's.
	same func(existing []byte) error
	// conflict is the answer when the key was used for another event.
	conflict func(inBatch bool) error
	// keep leaves the record when the store fails: a fan-out's, whose
	// deliveries may be stored in part (a retry must complete the same
	// routes, fanout_idempotency.go).
	keep bool
}

// directRecord is the record of a keyed event published to a destination
// by name: its fingerprint, under its event id.
func directRecord(p *prepared, i int) recordWrite {
	return recordWrite{
		index: i, key: p.event.GetEventId(), value: p.fingerprint,
		same: func(existing []byte) error {
			if bytes.Equal(existing, p.fingerprint) {
				return nil
			}
			return errConflict
		},
		conflict: func(inBatch bool) error { return conflictError(p, i, inBatch) },
	}
}

// claimed are the records one check wrote (key and revision): released
// when the events they are for could not be stored.
type claimed []claim

type claim struct {
	key      string
	revision uint64
	keep     bool
}

// check makes the records writes, or checks them against those recorded.
// It answers errkind.Exists, naming the first event whose key was used for
// something else; what it recorded is then released (nothing was stored
// yet), and so it is when the caller's store fails (releaseUnstored).
func (c *claims) check(ctx context.Context, writes []recordWrite, inBatch bool) (claimed, error) {
	made, err := c.record(ctx, writes, inBatch)
	if err != nil {
		c.release(made)
		return nil, err
	}
	return made, nil
}

func (c *claims) record(ctx context.Context, writes []recordWrite, inBatch bool) (claimed, error) {
	type pending struct {
		w      *recordWrite
		future jetstream.PubAckFuture
	}
	var inAir []pending
	for i := range writes {
		w := &writes[i]
		msg := nats.NewMsg(c.subject + w.key)
		msg.Data = w.value
		f, err := c.js.PublishMsgAsync(msg, jetstream.WithExpectLastSequencePerSubject(0))
		if err != nil {
			return nil, fmt.Errorf("record idempotency key: %w", err)
		}
		inAir = append(inAir, pending{w, f})
	}
	// Every answer is awaited, so that made lists all this call wrote.
	var made claimed
	var firstErr error
	for _, pa := range inAir {
		var err error
		select {
		case ack := <-pa.future.Ok():
			made = append(made, claim{pa.w.key, ack.Sequence, pa.w.keep})
			continue
		case err = <-pa.future.Err():
		case <-ctx.Done():
			return made, ctx.Err()
		}
		if firstErr != nil {
			continue
		}
		if !isWrongLastSequence(err) {
			firstErr = fmt.Errorf("record idempotency key: %w", err)
			continue
		}
		cl, err := c.recordOver(ctx, pa.w)
		switch {
		case errors.Is(err, errConflict):
			firstErr = pa.w.conflict(inBatch)
		case err != nil:
			firstErr = err
		case cl.revision != 0:
			made = append(made, cl)
		}
	}
	return made, firstErr
}

var errConflict = errors.New("idempotency key used for another event")

// recordOver handles a key whose subject holds a record already: the
// same event again (nothing to write), another event (errConflict), or
// the marker a release left (the key is free: record it, through
// kv.Create, which writes over a delete marker).
func (c *claims) recordOver(ctx context.Context, w *recordWrite) (claim, error) {
	for range 3 {
		entry, err := c.kv.Get(ctx, w.key)
		switch {
		case err == nil:
			return claim{}, w.same(entry.Value())
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return claim{}, fmt.Errorf("read idempotency key: %w", err)
		}
		rev, err := c.kv.Create(ctx, w.key, w.value)
		switch {
		case err == nil:
			return claim{w.key, rev, w.keep}, nil
		case !errors.Is(err, jetstream.ErrKeyExists):
			return claim{}, fmt.Errorf("record idempotency key: %w", err)
		}
		// Another publish recorded it in between: read it again.
	}
	return claim{}, fmt.Errorf("record idempotency key %s: it keeps changing; retry", w.key)
}

// release deletes the records of a check whose events were not stored,
// so that a retry may send the event anew (a rebuilt payload, say)
// instead of being held to one that never was accepted. Best effort: a
// record left behind expires with the dedup window.
func (c *claims) release(made claimed) {
	if len(made) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, cl := range made {
		// Only the record this call wrote: a later one is another's.
		if err := c.kv.Delete(ctx, cl.key, jetstream.LastRevision(cl.revision)); err != nil && ctx.Err() != nil {
			return
		}
	}
}

// releaseUnstored releases, after a failed store, the records that may
// go: not those marked keep (a fan-out's, whose deliveries may be stored
// in part).
func (c *claims) releaseUnstored(made claimed) {
	var free claimed
	for _, cl := range made {
		if !cl.keep {
			free = append(free, cl)
		}
	}
	c.release(free)
}

// KeyReusedReason is the ErrorInfo reason of a conflict's already_exists:
// its metadata names the original event ("original_event_id"), the key
// ("idempotency_key") and, in a batch, the event's index ("index"), so a
// client reads them without parsing the message.
const KeyReusedReason = "IDEMPOTENCY_KEY_REUSED"

func conflictError(p *prepared, i int, inBatch bool) error {
	msg := fmt.Sprintf("idempotency key %q was already used by customer %s on destination %s for another event (event %s: a different payload, type, lane or content type); a key names one event — use a new key for a new event",
		p.key, p.event.GetCustomerId(), p.event.GetDestinationId(), p.event.GetEventId())
	meta := map[string]string{"original_event_id": p.event.GetEventId(), "idempotency_key": p.key}
	if inBatch {
		meta["index"] = strconv.Itoa(i)
	}
	return errkind.WithInfo(inBatchConflict(msg, i, inBatch), KeyReusedReason, meta)
}

func inBatchConflict(msg string, i int, inBatch bool) error {
	if inBatch {
		msg = fmt.Sprintf("events[%d]: %s (nothing in this batch was stored)", i, msg)
	}
	return errkind.Tag(errkind.Exists, errors.New(msg))
}

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// validateKey checks a client's idempotency key.
func validateKey(key string) error {
	for _, prefix := range reservedKeyPrefixes {
		if strings.HasPrefix(key, prefix) {
			return fmt.Errorf("idempotency_key %q starts with %q, which Rivora reserves for its own re-ingests; choose another key", key, prefix)
		}
	}
	return nil
}
