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

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
// another fingerprint is refused with AlreadyExists.
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

// check records the fingerprints of the keyed events of batch, or checks
// them against those recorded. It answers AlreadyExists, naming the first
// event whose key was used for something else.
func (c *claims) check(ctx context.Context, batch []*prepared) error {
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
			return fmt.Errorf("record idempotency key: %w", err)
		}
		inAir = append(inAir, pending{i, f})
	}
	var conflict error
	for _, pa := range inAir {
		var err error
		select {
		case <-pa.future.Ok():
			continue
		case err = <-pa.future.Err():
		case <-ctx.Done():
			return ctx.Err()
		}
		if !isWrongLastSequence(err) {
			return fmt.Errorf("record idempotency key: %w", err)
		}
		// The key was used before: the same event again, or another one.
		p := batch[pa.i]
		entry, err := c.kv.Get(ctx, p.event.GetEventId())
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			continue // expired between the two calls: the stream dedupes
		case err != nil:
			return fmt.Errorf("read idempotency key: %w", err)
		}
		if !bytes.Equal(entry.Value(), p.fingerprint) && conflict == nil {
			conflict = conflictError(p, pa.i, len(batch) > 1)
		}
	}
	return conflict
}

func conflictError(p *prepared, i int, inBatch bool) error {
	msg := fmt.Sprintf("idempotency key %q was already used by customer %s on destination %s for another event (event %s: a different payload, type, lane or content type); a key names one event — use a new key for a new event",
		p.key, p.event.GetCustomerId(), p.event.GetDestinationId(), p.event.GetEventId())
	if inBatch {
		msg = fmt.Sprintf("events[%d]: %s (nothing in this batch was stored)", i, msg)
	}
	return connect.NewError(connect.CodeAlreadyExists, errors.New(msg))
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
