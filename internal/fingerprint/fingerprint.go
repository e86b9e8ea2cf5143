// Package fingerprint is the idempotency rule's one notion of "the same
// event": a hash of what a publisher sent (type, lane, content type,
// payload; the destination and customer are in the event id), and the
// header that carries it with the stored event, so that a duplicate can be
// compared with the original the stream holds. The ingest gateway stamps
// it; the partition owner keeps it when it moves an event into its lane.
// It imports nothing of Rivora's but the event type.
package fingerprint

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"

	"github.com/nats-io/nats.go"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Header carries a keyed event's fingerprint (base64, unpadded) on its
// INGEST and lane copies. An event without it (no key, a replay, a
// resend, an edge's copy, one stored before the header existed) is
// compared by the fingerprint of its decoded fields.
const Header = "Rivora-Fingerprint"

// Of is what must match for a repeated key to be the same event: ev's
// type, lane, content type and payload, then any further parts the
// caller's scope needs (a fan-out's target).
func Of(ev *rivorav1.Event, more ...[]byte) []byte {
	h := sha256.New()
	var n [8]byte
	write := func(part []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	write([]byte(ev.GetType()))
	write([]byte(ev.GetLaneKey()))
	write([]byte(ev.GetContentType()))
	write(ev.GetPayload())
	for _, part := range more {
		write(part)
	}
	return h.Sum(nil)
}

// Encode is fp as Header's value.
func Encode(fp []byte) string { return base64.RawStdEncoding.EncodeToString(fp) }

// Set stamps fp on msg (nothing when fp is empty).
func Set(msg *nats.Msg, fp []byte) {
	if len(fp) == 0 {
		return
	}
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	msg.Header.Set(Header, Encode(fp))
}

// FromHeader is the fingerprint a stored message carries (nil: none, or
// not one this package wrote).
func FromHeader(h nats.Header) []byte {
	v := h.Get(Header)
	if v == "" {
		return nil
	}
	fp, err := base64.RawStdEncoding.DecodeString(v)
	if err != nil || len(fp) != sha256.Size {
		return nil
	}
	return fp
}
