package ingest

import "encoding/base64"

// eventOverhead bounds what an event carries besides its payload (ids,
// type, content type, idempotency key, encoding): it sizes the largest
// Publish request and INGEST's largest message.
const eventOverhead = 64 << 10

// DefaultMaxBatchBytes bounds one PublishBatch request message, after
// decompression: the server holds a batch about three times (decoded,
// encoded for the store, in flight), so this, not MaxBatch × MaxPayload
// (250 MiB with the defaults), is what one request may cost.
const DefaultMaxBatchBytes = 8 << 20

// RequestLimits are the largest Publish and PublishBatch request messages
// the gateway accepts, in bytes after decompression: one event of
// MaxPayload, and a batch of MaxBatch such events but no more than
// MaxBatchBytes (never less than one full event).
//
// A request's size is that of its encoding, and JSON carries the payload
// in base64 (4 bytes for every 3), so the bound is that of the larger,
// JSON, encoding: a payload of MaxPayload is accepted in either.
func (g *Gateway) RequestLimits() (publish, batch int) {
	publish = base64.StdEncoding.EncodedLen(g.cfg.MaxPayload) + eventOverhead
	batch = min(g.cfg.MaxBatch*publish, max(g.cfg.MaxBatchBytes, publish))
	return publish, batch
}
