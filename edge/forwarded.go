package edge

import (
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// How an event an edge stored is told apart once its source forwarded it
// into the cell's INGEST: the edge's gateway sets these on every event it
// stores, and the cell's partition owner reads them (ReadForwarded).
const (
	// Header names the edge that accepted the event.
	Header = "Rivora-Edge"
	// KeyHeader carries the event's idempotency key, when it had one (the
	// cell needs it only to find a fan-out's record; a direct event's
	// record is under its event id).
	KeyHeader = "Rivora-Idempotency-Key"
	// MsgIDPrefix starts the dedup id (Nats-Msg-Id) of an edge's copy: the
	// usual dedup id (the event id) behind it. INGEST's duplicate window
	// therefore never drops an edge's copy for the cell's own copy of the
	// same event id: the partition owner strips the prefix, checks the
	// copy against the cell's idempotency record, and the lanes' dedup by
	// event id makes the two copies one event.
	MsgIDPrefix = "edge:"
)

// MsgID is the dedup id an edge gives an event whose usual dedup id is id.
func MsgID(id string) string { return MsgIDPrefix + id }

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
