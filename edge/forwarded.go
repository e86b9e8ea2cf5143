package edge

import (
	"strconv"
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
	// Partition is the cell partition it is moved into: the cell's copy
	// of the same event may be in that partition's lanes.
	Partition int
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

// BufferHeader carries the incarnation of the buffer that stored an
// event (Buffer.Incarnation): with the sequence the cell's source stamps
// on each message it took (Nats-Stream-Source), it places the event in
// its edge's buffer for good — a buffer recreated under the same name (a
// lost data dir) starts another incarnation, its sequences anew.
const BufferHeader = "Rivora-Edge-Buffer"

// sourceHeader is the header a stream's source stamps on each message it
// stores: "<source id> <origin stream sequence> …".
const sourceHeader = "Nats-Stream-Source"

// Origin is where in which edge's buffer a forwarded event was stored.
type Origin struct {
	// Edge and Buffer (its incarnation) name the buffer.
	Edge, Buffer string
	// Seq is the event's sequence in that buffer.
	Seq uint64
}

// Mark is the name of the buffer an Origin is in: the key of how far the
// cell has taken it.
func (o Origin) Mark() string { return o.Edge + "." + o.Buffer }

// ReadOrigin reads an INGEST message's Origin: ok when an edge stored it
// (Header, BufferHeader) and the cell's source took it (the origin
// sequence in Nats-Stream-Source).
func ReadOrigin(h nats.Header) (o Origin, ok bool) {
	o.Edge, o.Buffer = h.Get(Header), h.Get(BufferHeader)
	fields := strings.Fields(h.Get(sourceHeader))
	if o.Edge == "" || o.Buffer == "" || len(fields) < 2 {
		return Origin{}, false
	}
	seq, err := strconv.ParseUint(fields[1], 10, 64)
	if err != nil || seq == 0 {
		return Origin{}, false
	}
	o.Seq = seq
	return o, true
}
