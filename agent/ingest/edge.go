package ingest

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/edge"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/internal/fingerprint"
	"github.com/rivora/rivora/lanes"
)

// EdgeTarget makes the gateway an edge's (`rivora edge`, package edge):
// every event is stored into the edge's buffer, at
// edge.Subject(Name, partition, destination), with the header
// edge.Header naming the edge, edge.KeyHeader its idempotency key (when
// it has one) and the dedup id edge.MsgID(event id). No
// INGEST is created and nothing goes into lanes: the cell's INGEST
// sources the buffer across the leaf connection. Idempotency records go
// to the edge's own bucket (edge.IdempotencyBucket). Everything else —
// validation, bounds, fan-out, the catalogue, idempotency conflicts, the
// config version stamped on each event — is the agent's.
type EdgeTarget struct {
	// Name is the edge's name (--name).
	Name string
	// Buffer is the buffer's incarnation (edge.Buffer.Incarnation),
	// stamped on every event (edge.BufferHeader): with the sequence the
	// cell's source stamps, the cell's movers know an event they took
	// already when the edge forwards it again.
	Buffer string
	// Admit, when set, is asked before a request records or stores
	// anything: an error refuses the request as it is (the edge answers
	// errkind.Exhausted, reason edge.BufferTooOldReason, once its oldest
	// unforwarded event is older than --buffer-max-age). Nil admits every
	// request.
	Admit func() error
	// Reserve, when set, admits a request by the bytes its events take
	// in the buffer (edge.StoredSize of each), once they are validated
	// and routed and before any is stored: an error refuses the request,
	// which stores nothing (the edge answers errkind.Exhausted, reason
	// edge.BufferFullReason, when the buffer has no room for it). Else
	// done is called once the store returned, with whether it wrote
	// anything (or may have). Nil admits every request.
	Reserve func(bytes int64) (done func(wrote bool), err error)
	// Full, when set, is the answer when JetStream refused a store for
	// lack of room (edge.IsFull; Reserve should have refused the request
	// before): an errkind.Exhausted error saying how much is unforwarded
	// and since when the cell is unreachable. Nil answers a shorter
	// errkind.Exhausted error naming the buffer.
	Full func() error
	// Stale, when set, says why the config this edge accepts by may lack
	// what was created lately ("" when it is fresh): since when the edge
	// has not heard from its control plane. While it is stale, a publish
	// to a destination the edge does not know, a test event to a
	// subscription it does not know and a fan-out that matches none of
	// the subscriptions it knows are refused errkind.Unavailable with
	// it, not answered as if they did not exist: each may have been
	// created since. Nil: never stale.
	Stale func() string
}

// stale is Stale's note ("" when fresh, or not an edge).
func (e *EdgeTarget) stale() string {
	if e == nil || e.Stale == nil {
		return ""
	}
	return e.Stale()
}

// reserve asks Reserve for the room events take in the buffer; the
// returned done (never nil when err is nil) is to be called once the
// store returned. A request that stores nothing (a fan-out that matched
// nothing) needs no room.
func (e *EdgeTarget) reserve(events []*prepared, inBatch bool) (done func(wrote bool), err error) {
	if e == nil || e.Reserve == nil || len(events) == 0 {
		return func(bool) {}, nil
	}
	var n int64
	for _, p := range events {
		subject, h := e.message(p)
		n += edge.StoredSize(subject, h, len(p.data))
	}
	if done, err = e.Reserve(n); err != nil {
		if inBatch {
			err = fmt.Errorf("%w (nothing in this batch was stored)", err)
		}
		return nil, err
	}
	return done, nil
}

// wrote tells whether a store that returned at (and err) wrote anything,
// or may have: a failure may have written part of it.
func wrote(at []Stored, err error) bool {
	if err != nil {
		return true
	}
	for _, a := range at {
		if !a.Duplicate {
			return true
		}
	}
	return false
}

// bucket is the idempotency bucket of a gateway with edge target e (nil:
// an agent's, IdempotencyBucket).
func (e *EdgeTarget) bucket() string {
	if e == nil {
		return IdempotencyBucket
	}
	return edge.IdempotencyBucket(e.Name)
}

// admit asks Admit whether the edge takes a request now.
func (e *EdgeTarget) admit() error {
	if e == nil || e.Admit == nil {
		return nil
	}
	return e.Admit()
}

// full is the answer to a store of events events that JetStream refused
// for lack of room in the edge's buffer; nil when err is not that (or
// this is not an edge). Its messages are stored one by one, so a request
// of several may have been stored in part, and the answer says so.
func (e *EdgeTarget) full(err error, events int) error {
	if e == nil || !edge.IsFull(err) {
		return nil
	}
	var full error
	if e.Full != nil {
		full = e.Full()
	} else {
		full = errkind.WithInfo(errkind.Errorf(errkind.Exhausted, "%s of edge %s is full: it holds as many unforwarded events as --max-buffer allows; they leave it once the cell takes them (is the link to the cell up?)", edge.StreamName, e.Name),
			edge.BufferFullReason, map[string]string{"edge": e.Name})
	}
	if events > 1 {
		return fmt.Errorf("%w; some of this request's %s may have been stored: retry with the same idempotency keys, which answer a stored event with its id (a retry without a key may store an event twice)", full, plural(events, "event"))
	}
	return full
}

// plural is "1 event" or "n events".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// message is the message storing p: into the edge's buffer for an edge
// (its header and prefixed dedup id), else into INGEST.
func (e *EdgeTarget) message(p *prepared) (subject string, h nats.Header) {
	if e == nil {
		h = nats.Header{jetstream.MsgIDHeader: []string{p.msgID}}
		if len(p.fingerprint) > 0 {
			h[fingerprint.Header] = []string{fingerprint.Encode(p.fingerprint)}
		}
		return lanes.IngestSubject(p.partition, p.event.GetDestinationId()), h
	}
	h = nats.Header{}
	h.Set(jetstream.MsgIDHeader, edge.MsgID(p.msgID))
	h.Set(edge.Header, e.Name)
	h.Set(edge.BufferHeader, e.Buffer)
	if p.key != "" {
		// The cell finds a fan-out's idempotency record by it.
		h.Set(edge.KeyHeader, p.key)
	}
	return edge.Subject(e.Name, p.partition, p.event.GetDestinationId()), h
}

// validate checks an edge target before the gateway starts.
func (e *EdgeTarget) validate() error {
	if e == nil {
		return nil
	}
	if e.Name == "" || e.Buffer == "" {
		return errors.New("ingest: an edge target needs the edge's name and its buffer's incarnation")
	}
	return nil
}

// storeErrorOf is the answer to a failed store of events events: the
// edge's full buffer's own (resource_exhausted), else eventsStoreError's.
func (g *Gateway) storeErrorOf(ctx context.Context, err error, events int) error {
	if full := g.edge.full(err, events); full != nil {
		return full
	}
	return eventsStoreError(ctx, err)
}
