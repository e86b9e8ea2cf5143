package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/internal/errkind"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// IdempotencyBucket is the key-value bucket that remembers, for the dedup
// window, what each idempotency key was first used for.
const IdempotencyBucket = "IDEMPOTENCY"

// reservedKeyPrefixes start the dedup ids Rivora gives its own re-ingests
// (replays, resends); a client key may not look like one.
var reservedKeyPrefixes = []string{"replay:", "resend:"}

// claims enforces Stripe's rule for idempotency keys: within the dedup
// window a key names one event. The first publish with a key records the
// event's fingerprint under the event id (derived from the key and its
// scope); a later publish with the key and the same fingerprint is the
// same event (stored once: the streams dedupe on the event id), one with
// another fingerprint is refused (errkind.Exists: AlreadyExists).
//
// The record is written before the event is stored, so of two racing
// publishes with one key and different payloads exactly one can win. A
// record whose event was never stored (the store failed after it) is
// harmless: a retry with the same fingerprint stores the event then.
type claims struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
}

func newClaims(ctx context.Context, js jetstream.JetStream, window time.Duration, replicas int) (*claims, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:       IdempotencyBucket,
		Description:  "What each idempotency key was first used for, for the dedup window.",
		TTL:          window,
		History:      1,
		MaxValueSize: 1024, // a fingerprint, with room for the headers NATS counts
		Storage:      jetstream.FileStorage,
		Replicas:     max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("create %s bucket: %w", IdempotencyBucket, err)
	}
	return &claims{js: js, kv: kv}, nil
}

// fingerprint is what must match for a repeated key to be the same
// event: its type, lane, content type and payload (the destination and
// customer are in the id).
func fingerprint(ev *rivorav1.Event) []byte {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(ev.GetType()), []byte(ev.GetLaneKey()), []byte(ev.GetContentType()), ev.GetPayload()} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return h.Sum(nil)
}

// claimed are the records one check wrote (event id and revision):
// released when the events they are for could not be stored.
type claimed []claim

type claim struct {
	key      string
	revision uint64
}

// check records the fingerprints of the keyed events of batch, or checks
// them against those recorded. It answers errkind.Exists, naming the first
// event whose key was used for something else; what it recorded is then
// released, and so it is when the caller's store fails (release).
func (c *claims) check(ctx context.Context, batch []*prepared) (claimed, error) {
	made, err := c.record(ctx, batch)
	if err != nil {
		c.release(made)
		return nil, err
	}
	return made, nil
}

func (c *claims) record(ctx context.Context, batch []*prepared) (claimed, error) {
	type pending struct {
		i      int
		future jetstream.PubAckFuture
	}
	var inAir []pending
	for i, p := range batch {
		if p.fingerprint == nil {
			continue
		}
		msg := nats.NewMsg("$KV." + IdempotencyBucket + "." + p.event.GetEventId())
		msg.Data = p.fingerprint
		f, err := c.js.PublishMsgAsync(msg, jetstream.WithExpectLastSequencePerSubject(0))
		if err != nil {
			return nil, fmt.Errorf("record idempotency key: %w", err)
		}
		inAir = append(inAir, pending{i, f})
	}
	// Every answer is awaited, so that made lists all this call wrote.
	var made claimed
	var firstErr error
	for _, pa := range inAir {
		var err error
		select {
		case ack := <-pa.future.Ok():
			made = append(made, claim{batch[pa.i].event.GetEventId(), ack.Sequence})
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
		p := batch[pa.i]
		cl, err := c.recordOver(ctx, p)
		switch {
		case errors.Is(err, errConflict):
			firstErr = conflictError(p, pa.i, len(batch) > 1)
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
func (c *claims) recordOver(ctx context.Context, p *prepared) (claim, error) {
	key := p.event.GetEventId()
	for range 3 {
		entry, err := c.kv.Get(ctx, key)
		switch {
		case err == nil && bytes.Equal(entry.Value(), p.fingerprint):
			return claim{}, nil
		case err == nil:
			return claim{}, errConflict
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return claim{}, fmt.Errorf("read idempotency key: %w", err)
		}
		rev, err := c.kv.Create(ctx, key, p.fingerprint)
		switch {
		case err == nil:
			return claim{key, rev}, nil
		case !errors.Is(err, jetstream.ErrKeyExists):
			return claim{}, fmt.Errorf("record idempotency key: %w", err)
		}
		// Another publish recorded it in between: read it again.
	}
	return claim{}, fmt.Errorf("record idempotency key %s: it keeps changing; retry", key)
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

func conflictError(p *prepared, i int, inBatch bool) error {
	msg := fmt.Sprintf("idempotency key %q was already used by customer %s on destination %s for another event (event %s: a different payload, type, lane or content type); a key names one event — use a new key for a new event",
		p.key, p.event.GetCustomerId(), p.event.GetDestinationId(), p.event.GetEventId())
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
