package owner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Read-ahead of a deep backlog's events.
//
// An event the bounded cache (eventCache) does not keep is loaded from
// the lane store when its attempt starts. Loading them one direct get
// each costs a request and a reply per delivery, and a deep backlog is
// delivered almost entirely that way. Lanes fill and drain in acceptance
// order, so the events a partition delivers next are mostly just after
// the one it delivers now in the store: a miss at sequence s fetches the
// events from s on in one batched direct get (JetStream's "batch"), and
// keeps them, decoded, for the attempts that come next. An event nobody
// asked for leaves after readAheadKeep more were kept.
const (
	// readAheadBatch is how many events one miss fetches.
	readAheadBatch = 64
	// readAheadKeep bounds the events kept per partition (~1 KB each at a
	// few hundred bytes of payload).
	readAheadKeep = 2048
	// readAheadMaxBytes bounds the bytes one batch sends.
	readAheadMaxBytes = 1 << 20
	// readAheadTimeout bounds one batch (a load falls back to a single
	// get after it).
	readAheadTimeout = 5 * time.Second
)

// readAhead holds the events a partition fetched ahead of their attempts.
//
// Invariant: every sequence in events is in order (oldest first), and an
// event is at most readAheadKeep insertions old; a fetch under way covers
// [from, to) of fetching and closes done when its events are in.
type readAhead struct {
	conn    *nats.Conn
	subject string // the lane store's direct get subject

	mu       sync.Mutex
	events   map[uint64]*rivorav1.Event
	order    []uint64 // sequences in the order kept; a ring of readAheadKeep
	next     int      // where order's next sequence goes
	fetching []*fetch
}

type fetch struct {
	from, to uint64
	done     chan struct{}
}

func newReadAhead(js jetstream.JetStream, stream string) *readAhead {
	return &readAhead{
		conn:    js.Conn(),
		subject: apiPrefix(js.Options()) + "DIRECT.GET." + stream,
		events:  make(map[uint64]*rivorav1.Event),
		order:   make([]uint64, 0, readAheadKeep),
	}
}

// apiPrefix is the JetStream API prefix of a client's options.
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}

// load returns the event at seq: kept from an earlier batch, or from a
// batch fetched now (or under way). ok is false when no batch brought
// it (deleted, not yet on a replica, or the batch failed): the caller
// then gets it on its own.
func (r *readAhead) load(ctx context.Context, seq uint64) (ev *rivorav1.Event, ok bool) {
	r.mu.Lock()
	if ev, ok := r.take(seq); ok {
		r.mu.Unlock()
		return ev, true
	}
	if f := r.covering(seq); f != nil {
		r.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, false
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.take(seq)
	}
	f := &fetch{from: seq, to: seq + readAheadBatch, done: make(chan struct{})}
	r.fetching = append(r.fetching, f)
	r.mu.Unlock()

	got, _ := r.get(ctx, seq) // a failed batch is a miss: the caller gets seq alone

	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range got {
		if g.seq == seq {
			ev, ok = g.ev, true
			continue
		}
		r.keep(g.seq, g.ev)
	}
	for i, x := range r.fetching {
		if x == f {
			r.fetching = append(r.fetching[:i], r.fetching[i+1:]...)
			break
		}
	}
	close(f.done)
	return ev, ok
}

// take removes and returns the kept event at seq. r.mu held.
func (r *readAhead) take(seq uint64) (*rivorav1.Event, bool) {
	ev, ok := r.events[seq]
	if ok {
		delete(r.events, seq)
	}
	return ev, ok
}

// covering is the fetch under way that brings seq (nil: none). r.mu held.
func (r *readAhead) covering(seq uint64) *fetch {
	for _, f := range r.fetching {
		if seq >= f.from && seq < f.to {
			return f
		}
	}
	return nil
}

// keep adds an event, dropping the oldest kept when full. r.mu held.
func (r *readAhead) keep(seq uint64, ev *rivorav1.Event) {
	if _, ok := r.events[seq]; ok {
		return
	}
	if len(r.order) < readAheadKeep {
		r.order = append(r.order, seq)
	} else {
		delete(r.events, r.order[r.next])
		r.order[r.next] = seq
		r.next = (r.next + 1) % readAheadKeep
	}
	r.events[seq] = ev
}

// forget drops everything kept (the partition closes).
func (r *readAhead) forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.events)
	r.order, r.next = r.order[:0], 0
}

type fetched struct {
	seq uint64
	ev  *rivorav1.Event
}

// get fetches up to readAheadBatch events from seq on with one batched
// direct get: the stream sends each message with its sequence in a
// header, then an empty end-of-batch message (status 204).
func (r *readAhead) get(ctx context.Context, seq uint64) ([]fetched, error) {
	ctx, cancel := context.WithTimeout(ctx, readAheadTimeout)
	defer cancel()
	req, err := json.Marshal(struct {
		Seq      uint64 `json:"seq"`
		Batch    int    `json:"batch"`
		MaxBytes int    `json:"max_bytes"`
	}{seq, readAheadBatch, readAheadMaxBytes})
	if err != nil {
		return nil, err
	}
	inbox := r.conn.NewRespInbox()
	sub, err := r.conn.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := r.conn.PublishRequest(r.subject, inbox, req); err != nil {
		return nil, err
	}
	out := make([]fetched, 0, readAheadBatch)
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return out, err
		}
		if len(msg.Data) == 0 && msg.Header.Get("Status") != "" {
			if status := msg.Header.Get("Status"); status != "204" {
				return out, fmt.Errorf("direct get batch from %d: status %s %s", seq, status, msg.Header.Get("Description"))
			}
			return out, nil // end of batch
		}
		s, err := strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return out, errors.New("direct get batch: a message without its sequence")
		}
		ev := &rivorav1.Event{}
		if err := proto.Unmarshal(msg.Data, ev); err != nil {
			continue // Load reports it when the event is asked for on its own
		}
		out = append(out, fetched{seq: s, ev: ev})
	}
}
