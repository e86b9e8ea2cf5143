package edge

import (
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// KeyHeader carries the idempotency key of an event an edge stored, when
// it had one (beside Header and the dedup id MsgID): the cell needs it
// only to find a fan-out's record, a direct event's being under its
// event id.
const KeyHeader = "Rivora-Idempotency-Key"

// Forwarded is an event an edge accepted, as the cell's partition owner
// reads it from INGEST.
type Forwarded struct {
	Event *rivorav1.Event
	// Edge is the edge that accepted it.
	Edge string
	// Key is its idempotency key ("": none, or an edge that did not send
	// it).
	Key string
}

// ReadForwarded tells whether an INGEST message is an edge's copy (it
// carries Header), and returns the edge's name, its idempotency key and
// its dedup id without MsgIDPrefix: the id the cell's lanes dedupe on.
func ReadForwarded(h nats.Header) (edgeName, key, msgID string, ok bool) {
	msgID = h.Get(jetstream.MsgIDHeader)
	edgeName = h.Get(Header)
	if edgeName == "" {
		return "", "", msgID, false
	}
	return edgeName, h.Get(KeyHeader), strings.TrimPrefix(msgID, MsgIDPrefix), true
}
