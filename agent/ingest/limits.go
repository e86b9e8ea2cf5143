package ingest

import (
	"encoding/base64"

	"github.com/rivora/rivora/internal/errkind"
)

// eventOverhead bounds what an event carries besides its payload (ids,
// type, content type, idempotency key, encoding): it sizes the largest
// Publish request and INGEST's largest message.
const eventOverhead = 64 << 10

// dataGrowth bounds how much larger binary protobuf encodes a
// google.protobuf.Value than its compact JSON: 11 bytes (a list element:
// tag, length, tag, 8-byte double) for 2 ("0,").
const dataGrowth = 6

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
// A request's size is that of its encoding: JSON carries payload in
// base64 (4 bytes for every 3), and binary protobuf carries data (a
// google.protobuf.Value) in up to dataGrowth times the bytes of its
// compact JSON (a list of small numbers: 11 bytes for each "0,"). The
// bound is the largest of those, so that what is accepted — a payload,
// or data whose compact JSON is, of at most MaxPayload — fits in any
// encoding.
func (g *Gateway) RequestLimits() (publish, batch int) {
	publish = max(base64.StdEncoding.EncodedLen(g.cfg.MaxPayload), dataGrowth*g.cfg.MaxPayload) + eventOverhead
	batch = min(g.cfg.MaxBatch*publish, max(g.cfg.MaxBatchBytes, publish))
	return publish, batch
}

// storedBytesFactor bounds what one request stores in all, fan-outs'
// deliveries included, as a multiple of MaxBatchBytes: a fan-out
// multiplies its event, and the gateway holds every delivery's encoding
// until it is stored.
const storedBytesFactor = 4

// routeOverhead estimates what a delivery's encoding adds to its payload
// (ids, type, lane, timestamps).
const routeOverhead = 512

// RequestTooLargeReason is the ErrorInfo reason (errkind.Domain) of a
// request refused for its size by the gateway itself: resource_exhausted,
// as connect's own read limit answers, but sent again it is refused
// again, so the SDKs do not retry it. The other resource_exhausted
// answers (an edge's full buffer, --max-inflight-requests) are
// back-pressure, which a retry after a wait may get through.
const RequestTooLargeReason = "REQUEST_TOO_LARGE"

// checkStoredSize refuses a request whose deliveries would take more than
// storedBytesFactor × MaxBatchBytes (never less than one full Publish),
// before any is encoded or any key recorded.
func (g *Gateway) checkStoredSize(pubs []publication) error {
	publish, _ := g.RequestLimits()
	limit := max(storedBytesFactor*g.cfg.MaxBatchBytes, publish)
	total, deliveries := 0, 0
	for _, pub := range pubs {
		if pub.direct != nil {
			total += len(pub.direct.data)
			deliveries++
			continue
		}
		n := len(pub.routed.routes)
		total += n * (len(pub.routed.base.GetPayload()) + routeOverhead)
		deliveries += n
	}
	if total > limit {
		err := errkind.Errorf(errkind.Exhausted, "this request would store %d deliveries, about %d bytes in all (its events fan out to their subscriptions); the limit is %d bytes: publish fewer or smaller events at once", deliveries, total, limit)
		return errkind.WithInfo(err, RequestTooLargeReason, nil)
	}
	return nil
}
