package edge

import (
	"sync"

	"github.com/nats-io/nats.go"
)

// A buffer refuses a request whole or takes it whole. JetStream cannot do
// that by itself: with DiscardNew it refuses a message once the stream
// holds MaxBytes, one message at a time, so a batch that reached the limit
// was stored up to there and refused after (a probe: 116 of a refused
// batch's 130 events stored, then delivered). So the edge admits each
// request by its bytes before it stores anything (Buffer.Reserve), against
// --max-buffer, and the stream's own limit (StreamMaxBytes) sits above
// --max-buffer: JetStream never refuses part of an admitted request.

// BufferFullReason is the ErrorInfo reason (errkind.Domain) of a publish
// an edge refused because its buffer has no room for it: its metadata's
// "edge" names the edge, "max_buffer_bytes" is --max-buffer. A client
// tells it from ordinary overload (resource_exhausted too) by it: the
// edge takes events again only once the cell takes some, which needs the
// link to the cell, so a publisher should rather fail over to the cell or
// hold the event.
const BufferFullReason = "EDGE_BUFFER_FULL"

// BufferTooOldReason is the ErrorInfo reason (errkind.Domain) of a
// publish an edge refused because the oldest event its buffer has not
// forwarded is older than --buffer-max-age: its metadata's "edge" names
// the edge, "buffer_max_age_seconds" is --buffer-max-age and
// "oldest_unforwarded_seconds" the oldest event's age, in whole seconds.
// Like BufferFullReason it lasts until the cell takes the buffer's oldest
// events, which needs the link to the cell: a publisher should rather
// fail over to the cell or hold the event. Nothing of the request was
// stored.
const BufferTooOldReason = "EDGE_BUFFER_TOO_OLD"

// StreamMaxBytes is the buffer stream's own MaxBytes for --max-buffer
// maxBytes: maxBytes plus a headroom (a 64th, at least 1 MiB). The edge
// admits requests against maxBytes by its own count of the stream's bytes
// (StoredSize, the file store's); the headroom only covers a count that
// came out short (a nats-server that counts otherwise), so that JetStream
// still never refuses part of an admitted request. JetStream reserves
// this much of its store for the stream.
func StreamMaxBytes(maxBytes int64) int64 { return maxBytes + max(maxBytes/64, 1<<20) }

// MaxBytesWithin is the largest maxBytes whose StreamMaxBytes is at most
// capacity (0 when none is).
func MaxBytesWithin(capacity int64) int64 {
	lo, hi := int64(0), capacity // StreamMaxBytes(lo) <= capacity is kept true, or lo == 0
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if StreamMaxBytes(mid) <= capacity {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if StreamMaxBytes(lo) > capacity {
		return 0
	}
	return lo
}

// hdrLine starts every NATS message header.
const hdrLine = "NATS/1.0\r\n"

// StoredSize is how many bytes a message takes of its stream's bytes (and
// MaxBytes) in JetStream's file store: its subject, its header as NATS
// sends it, its data, and the record's 34 bytes of framing (length,
// sequence, time, subject and header lengths, checksum).
func StoredSize(subject string, h nats.Header, data int) int64 {
	n := 22 + len(subject) + data + 8
	if len(h) > 0 {
		hdr := len(hdrLine) + 2 // the line that starts it, the blank line that ends it
		for k, vs := range h {
			for _, v := range vs {
				hdr += len(k) + 2 + len(v) + 2 // "Key: value\r\n"
			}
		}
		n += 4 + hdr
	}
	return int64(n)
}

// room counts what a buffer holds, for admission, never less than it
// does: its bytes at the last read of the stream's state, plus every
// store that returned since that read began (the read may or may not have
// counted it), plus what requests in flight reserved. It owns nothing
// else; the stream's state is JetStream's.
type room struct {
	limit int64

	// reads serializes reads of the stream's state (read).
	reads sync.Mutex

	mu sync.Mutex
	// held is the stream's bytes at the last read.
	held int64
	// since is what stores that returned since the last read began
	// wrote; next what those since the read under way began wrote.
	since, next int64
	reading     bool
	// reserved is what the requests in flight may write.
	reserved int64
}

// used is what the buffer holds, or may, now.
func (r *room) used() int64 { return r.held + r.since + r.reserved }

// reserve admits a store of n bytes when it fits under the limit with
// what the buffer holds or may; done must be called once the store
// returned, with whether it wrote anything (or may have).
func (r *room) reserve(n int64) (done func(wrote bool), ok bool) {
	done, _, ok = r.reserveCounted(n)
	return done, ok
}

// reserveCounted is reserve, which also says what it counted the buffer
// as holding when it decided.
func (r *room) reserveCounted(n int64) (done func(wrote bool), used int64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	used = r.used()
	if n > r.limit-used {
		return nil, used, false
	}
	r.reserved += n
	var once sync.Once
	return func(wrote bool) { once.Do(func() { r.release(n, wrote) }) }, used, true
}

func (r *room) release(n int64, wrote bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reserved -= n
	if !wrote {
		return
	}
	r.since += n
	if r.reading {
		r.next += n
	}
}

// read reads the stream's bytes (one read at a time) and bases the count
// on it.
func (r *room) read(bytes func() (int64, error)) error {
	r.reads.Lock()
	defer r.reads.Unlock()
	r.mu.Lock()
	r.reading, r.next = true, 0
	r.mu.Unlock()
	n, err := bytes()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reading = false
	if err == nil {
		// A store that returned before the read began is in n; one that
		// returned since may be, and stays counted (next) until the
		// next read.
		r.held, r.since = n, r.next
	}
	return err
}
