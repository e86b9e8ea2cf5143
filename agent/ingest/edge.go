package ingest

import (
	"context"
	"errors"

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
	// errkind.Exhausted once its oldest unforwarded event is older than
	// --buffer-max-age). Nil admits every request.
	Admit func() error
	// Full, when set, is the answer when the buffer refused a store for
	// lack of room (edge.IsFull): an errkind.Exhausted error saying how
	// much is unforwarded and since when the cell is unreachable. Nil
	// answers a shorter errkind.Exhausted error naming the buffer.
	Full func() error
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

// full is the answer to a store the edge's buffer refused for lack of
// room; nil when err is not that (or this is not an edge).
func (e *EdgeTarget) full(err error) error {
	if e == nil || !edge.IsFull(err) {
		return nil
	}
	if e.Full != nil {
		return e.Full()
	}
	return errkind.Errorf(errkind.Exhausted, "%s of edge %s is full: it holds as many unforwarded events as --max-buffer allows; they leave it once the cell takes them (is the link to the cell up?)", edge.StreamName, e.Name)
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

// storeErrorOf is the answer to a failed store: the edge's full buffer's
// own (resource_exhausted), else storeError's.
func (g *Gateway) storeErrorOf(ctx context.Context, err error) error {
	if full := g.edge.full(err); full != nil {
		return full
	}
	return storeError(ctx, err)
}
