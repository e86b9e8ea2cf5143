package natsd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publisher publishes groups of messages to JetStream streams as bursts of
// core NATS publishes, each with a reply subject under one subscription,
// and reads each stream's acknowledgement with a small parser. It answers
// what jetstream.PublishMsgAsync answers per message (the sequence, and
// whether the stream took the message for a duplicate of an earlier one),
// at a fraction of the cost: no future, channel pair, pending-map entry
// and reply inbox per message, no encoding/json per acknowledgement. A
// lane writer stores thousands of events per second this way.
//
// Invariants: every burst is answered once (Wait returns) when each of
// its messages was acknowledged or refused, when one could not be sent
// (Abandon), when the Publisher closed, or at Wait's timeout; a burst is
// in bursts exactly while some acknowledgement may still reach it.
type Publisher struct {
	nc  *nats.Conn
	sub *nats.Subscription
	// elected follows the leader elections of the stream every burst goes
	// to (FailOnLeaderChange); nil: not followed.
	elected *nats.Subscription
	// prefix is the reply subject of every burst's messages, followed by
	// "<burst>.<message>".
	prefix string

	mu     sync.Mutex
	next   uint64
	bursts map[uint64]*Burst
	closed bool
	// stream is the last stream name an acknowledgement named: the next
	// one most likely names it too, and shares the string (acks are read
	// on the subscription's one goroutine).
	stream string
}

// Ack is a stream's answer to one message of a burst.
type Ack struct {
	// Stream is the stream that stored the message.
	Stream    string
	Seq       uint64
	Duplicate bool
}

// ErrPublisherClosed answers the bursts still waiting when the Publisher
// closed.
var ErrPublisherClosed = errors.New("publisher closed")

// ErrLeaderChanged answers a burst with a message sent before its stream
// elected a new leader that was still unacknowledged a grace after that.
// No acknowledgement comes for it: a leader that steps down or exits
// drops the writes it had not committed, and the new one stores what the
// old one had committed without acknowledging it (nats-server acks only
// what it applies as leader, and applies what it inherited before it
// leads). So the message may or may not be stored; sent again with the
// same Nats-Msg-Id, the stream answers it as a duplicate or stores it.
var ErrLeaderChanged = errors.New("no acknowledgement after the stream elected a new leader: the old leader dropped the write or its acknowledgement; send it again with the same id")

// leaderChangeGrace is how long a message sent before its stream's
// election is still waited for once the election is known: the
// advisory may arrive after the new leader took (and answers) messages
// sent just before it.
const leaderChangeGrace = time.Second

// LeaderElectedSubject is the advisory a stream's new leader sends.
func LeaderElectedSubject(stream string) string {
	return "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED." + stream
}

// NewPublisher subscribes to the replies of the bursts it will send on nc.
func NewPublisher(nc *nats.Conn) (*Publisher, error) {
	p := &Publisher{nc: nc, prefix: nc.NewInbox() + ".", bursts: make(map[uint64]*Burst)}
	sub, err := nc.Subscribe(p.prefix+"*.*", p.acked)
	if err != nil {
		return nil, fmt.Errorf("subscribe to publish acknowledgements: %w", err)
	}
	// A burst is thousands of messages whose acknowledgements arrive at
	// once: never drop one for a slow consumer (a dropped one would leave
	// its burst to time out).
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("subscribe to publish acknowledgements: %w", err)
	}
	p.sub = sub
	return p, nil
}

// Close unsubscribes and answers every burst still waiting with
// ErrPublisherClosed.
func (p *Publisher) Close() {
	p.mu.Lock()
	p.closed = true
	waiting := p.bursts
	p.bursts = map[uint64]*Burst{}
	elected := p.elected
	p.mu.Unlock()
	_ = p.sub.Unsubscribe()
	if elected != nil {
		_ = elected.Unsubscribe()
	}
	for _, b := range waiting {
		b.finish(ErrPublisherClosed)
	}
}

// FailOnLeaderChange has the Publisher, whose bursts all go to stream,
// give up on what the stream's old leader left unanswered: when the
// stream elects a leader, every burst with a message sent before then
// and still unacknowledged leaderChangeGrace later is answered
// ErrLeaderChanged, instead of waiting for its timeout (a rolling
// restart's step-downs and exits would otherwise hold its callers until
// their deadlines). Call it once.
func (p *Publisher) FailOnLeaderChange(stream string) error {
	sub, err := p.nc.Subscribe(LeaderElectedSubject(stream), func(*nats.Msg) { p.leaderElected() })
	if err != nil {
		return fmt.Errorf("follow %s's leader elections: %w", stream, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.elected != nil {
		_ = sub.Unsubscribe()
		if p.closed {
			return ErrPublisherClosed
		}
		return fmt.Errorf("the publisher follows a stream's elections already, not %s too", stream)
	}
	p.elected = sub
	return nil
}

// leaderElected notes how many messages each waiting burst had sent, and
// after the grace fails those with one of them still unacknowledged.
// Messages sent after the election are not judged: the new leader
// answers them (or no leader does, at once: no responders).
func (p *Publisher) leaderElected() {
	p.mu.Lock()
	waiting := make([]*Burst, 0, len(p.bursts))
	for _, b := range p.bursts {
		waiting = append(waiting, b)
	}
	p.mu.Unlock()
	sent := make([]int, len(waiting))
	for i, b := range waiting {
		sent[i] = int(b.sent.Load())
	}
	time.AfterFunc(leaderChangeGrace, func() {
		// Every burst is judged before any is answered.
		var stalled []*Burst
		for i, b := range waiting {
			if b.unanswered(sent[i]) {
				stalled = append(stalled, b)
			}
		}
		for _, b := range stalled {
			b.finish(ErrLeaderChanged)
		}
	})
}

// unanswered reports whether one of the burst's first n messages has no
// answer yet.
func (b *Burst) unanswered(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.missing > 0 && slices.Contains(b.got[:min(n, len(b.got))], false)
}

// Burst is one group of messages published together (Publisher.Start).
type Burst struct {
	p     *Publisher
	id    uint64
	reply string // p.prefix + id + "."
	acks  []Ack
	// replyBuf and msg are Publish's scratch space.
	replyBuf []byte
	msg      nats.Msg
	// sent counts the messages published so far (Publish is called in
	// order): those a leader election may have left unanswered.
	sent atomic.Int64

	mu      sync.Mutex
	got     []bool // per message: its acknowledgement is in
	missing int    // acknowledgements not yet in
	// failed is the index of the first message a stream refused (-1:
	// none), err its refusal.
	failed int
	err    error
	done   chan struct{}
	once   sync.Once
}

// Start begins a burst of n messages, to be sent by Publish(0) to
// Publish(n-1) and awaited by Wait.
func (p *Publisher) Start(n int) (*Burst, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPublisherClosed
	}
	p.next++
	b := &Burst{p: p, id: p.next, acks: make([]Ack, n), got: make([]bool, n), missing: n, failed: -1, done: make(chan struct{})}
	b.reply = p.prefix + strconv.FormatUint(b.id, 10) + "."
	if n == 0 {
		close(b.done)
		return b, nil
	}
	p.bursts[b.id] = b
	return b, nil
}

// Publish sends message i of the burst to subject, with the headers h
// (nil: none). It does not wait for the stream, and keeps neither h nor
// data's slice header: h may be reused for the next message. A burst's
// messages are published by one goroutine, in order.
func (b *Burst) Publish(i int, subject string, h nats.Header, data []byte) error {
	// The reply subject is built in the burst's buffer (one string per
	// message, not two), and the message is the burst's own: PublishMsg
	// encodes it before it returns.
	b.replyBuf = strconv.AppendInt(append(b.replyBuf[:0], b.reply...), int64(i), 10)
	b.msg = nats.Msg{Subject: subject, Reply: string(b.replyBuf), Header: h, Data: data}
	if err := b.p.nc.PublishMsg(&b.msg); err != nil {
		return err
	}
	b.sent.Store(int64(i + 1))
	return nil
}

// Abandon ends a burst of which only the first sent messages were sent
// (the next Publish failed with err): Wait then answers err once those
// were acknowledged.
func (b *Burst) Abandon(sent int, err error) {
	b.mu.Lock()
	for i := sent; i < len(b.got); i++ {
		if !b.got[i] {
			b.got[i] = true
			b.missing--
		}
	}
	if b.failed < 0 || sent < b.failed {
		b.failed, b.err = sent, err
	}
	complete := b.missing <= 0
	b.mu.Unlock()
	if complete {
		b.p.forget(b.id)
		b.close()
	}
}

// Drop gives a burst up that nobody will Wait for (a Publish failed with
// err and the caller returns at once): it is forgotten now, its
// acknowledgements still to come ignored.
func (b *Burst) Drop(err error) { b.finish(err) }

// Wait returns every message's Ack once all are in. When a stream refused
// a message (or a Publish failed), it returns the Acks before the first
// refused message and the refusal, as a per-message future's first error
// would. When ctx ends, or after timeout, it gives up (the messages may
// still be stored).
func (b *Burst) Wait(ctx context.Context, timeout time.Duration) ([]Ack, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-b.done:
	case <-ctx.Done():
		b.finish(ctx.Err())
	case <-t.C:
		b.finish(fmt.Errorf("no acknowledgement from the stream within %s", timeout))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed >= 0 {
		return b.acks[:b.failed], b.err
	}
	return b.acks, nil
}

// finish answers the burst with err for every message not yet
// acknowledged.
func (b *Burst) finish(err error) {
	b.p.forget(b.id)
	b.mu.Lock()
	if b.missing <= 0 {
		b.mu.Unlock()
		return
	}
	b.missing = 0
	for i, got := range b.got {
		if !got {
			b.got[i] = true // a late acknowledgement is ignored
			if b.failed < 0 || i < b.failed {
				b.failed, b.err = i, err
			}
		}
	}
	b.mu.Unlock()
	b.close()
}

func (b *Burst) close() { b.once.Do(func() { close(b.done) }) }

func (p *Publisher) forget(id uint64) {
	p.mu.Lock()
	delete(p.bursts, id)
	p.mu.Unlock()
}

// acked takes one acknowledgement: its subject names the burst and the
// message.
func (p *Publisher) acked(m *nats.Msg) {
	rest := strings.TrimPrefix(m.Subject, p.prefix)
	dot := strings.IndexByte(rest, '.')
	if dot < 0 {
		return
	}
	id, err1 := strconv.ParseUint(rest[:dot], 10, 64)
	i, err2 := strconv.Atoi(rest[dot+1:])
	if err1 != nil || err2 != nil {
		return
	}
	p.mu.Lock()
	b := p.bursts[id]
	p.mu.Unlock()
	if b == nil || i < 0 || i >= len(b.acks) {
		return // a burst already answered (Wait timed out, or Close)
	}
	ack, refusal := parseAck(m, p.stream)
	if ack.Stream != "" {
		p.stream = ack.Stream
	}
	b.mu.Lock()
	if b.got[i] {
		b.mu.Unlock()
		return // answered already (a repeat, or the burst gave up)
	}
	b.got[i] = true
	b.acks[i] = ack
	if refusal != nil && (b.failed < 0 || i < b.failed) {
		b.failed, b.err = i, refusal
	}
	b.missing--
	complete := b.missing == 0
	b.mu.Unlock()
	if complete {
		p.forget(id)
		b.close()
	}
}

// ParseAck reads a JetStream publish acknowledgement:
// {"stream":"S","seq":N} (with ,"duplicate": true for a duplicate, maybe
// a domain), or {"error":{...}}, or a no-responders status (no stream
// listens on the subject). It reads seq and duplicate without
// encoding/json, which costs more than the rest of the acknowledgement's
// way; errors, rare, are decoded in full.
func ParseAck(m *nats.Msg) (Ack, error) { return parseAck(m, "") }

// parseAck is ParseAck, the stream's name shared with known when it is
// that one.
func parseAck(m *nats.Msg, known string) (Ack, error) {
	data := m.Data
	if len(data) == 0 {
		if status := m.Header.Get("Status"); status != "" {
			if status == "503" {
				return Ack{}, fmt.Errorf("%w: %w", jetstream.ErrNoStreamResponse, nats.ErrNoResponders)
			}
			return Ack{}, fmt.Errorf("publish answered status %s %s", status, m.Header.Get("Description"))
		}
		return Ack{}, errors.New("empty publish acknowledgement")
	}
	if bytes.Contains(data, []byte(`"error"`)) {
		return Ack{}, ackError(data)
	}
	seq, ok := jsonUint(data, `"seq":`)
	if !ok || seq == 0 {
		return Ack{}, fmt.Errorf("unreadable publish acknowledgement %q", data)
	}
	stream := ""
	if k := bytes.Index(data, []byte(`"stream":"`)); k >= 0 {
		v := data[k+len(`"stream":"`):]
		if end := bytes.IndexByte(v, '"'); end >= 0 {
			if string(v[:end]) == known {
				stream = known
			} else {
				stream = string(v[:end])
			}
		}
	}
	dup := false
	if k := bytes.Index(data, []byte(`"duplicate":`)); k >= 0 {
		v := bytes.TrimLeft(data[k+len(`"duplicate":`):], " ")
		dup = bytes.HasPrefix(v, []byte("true"))
	}
	return Ack{Stream: stream, Seq: seq, Duplicate: dup}, nil
}

// jsonUint reads the unsigned number after key in data.
func jsonUint(data []byte, key string) (uint64, bool) {
	k := bytes.Index(data, []byte(key))
	if k < 0 {
		return 0, false
	}
	v := bytes.TrimLeft(data[k+len(key):], " ")
	n, digits := uint64(0), 0
	for _, c := range v {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + uint64(c-'0')
		digits++
	}
	return n, digits > 0 && digits < 20
}

// ackError is a stream's refusal: a *jetstream.APIError, as a JetStream
// future answers it (errors.Is with jetstream's errors holds).
func ackError(data []byte) error {
	var resp struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(data, &resp); err != nil || resp.Error == nil {
		return fmt.Errorf("unreadable publish acknowledgement %q", data)
	}
	return resp.Error
}
