// Package edge holds what an edge keeps and how the cell takes it: an
// edge's buffer of accepted events not yet forwarded (a work-queue stream
// in the edge's own JetStream domain, read by one durable consumer), and
// the source on the cell's INGEST stream that forwards it across the leaf
// connection. docs/architecture.md ("Edges") gives the design and its
// reasons. The `rivora edge` process runs on it (package edge/edged); the
// gateway in edge mode (agent/ingest) stores under Subject, Header and
// MsgID. It stays a leaf: agent packages import it.
package edge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/internal/ids"
	"github.com/rivora/rivora/lanes"
)

// Names in an edge's domain. Each edge has its own domain, so they need
// not differ between edges; its subjects do (Subject).
const (
	// StreamName is the edge's buffer.
	StreamName = "EDGE_BUFFER"
	// ConsumerName is the durable consumer the cell's source reads.
	ConsumerName = "TO_CELL"
)

// Config shapes an edge's buffer.
type Config struct {
	// Name is the edge's name: its JetStream domain and its subject
	// prefix (an id: letters, digits, '_', '-').
	Name string
	// MaxBytes bounds the unforwarded events (--max-buffer): a request
	// that would take the buffer past it is refused whole (Reserve),
	// nothing stored is dropped. The stream's own MaxBytes is
	// StreamMaxBytes(MaxBytes), past which JetStream refuses a store
	// (IsFull). There is no age limit on the stream: --buffer-max-age
	// refuses new events once the oldest unforwarded one is older (the
	// edge's gateway), for an age limit would discard events the edge
	// acknowledged.
	MaxBytes int64
	// DedupWindow is how long an event id is remembered at the edge.
	DedupWindow time.Duration
	// Replicas is the buffer's replica count (0 means 1).
	Replicas int
}

// Header names the edge that stored an event, on every message of its
// buffer (and so in INGEST once forwarded): the partition owner's mover
// treats such an event as forwarded (it strips MsgIDPrefix and checks the
// cell's idempotency record).
const Header = "Rivora-Edge"

// MsgIDPrefix starts the dedup id (Nats-Msg-Id) of every event an edge
// stores: "edge:<event id>". INGEST's duplicate window would otherwise
// drop an edge's copy of an event id the cell holds already, silently,
// even when it is another event (a key reused with another payload);
// the mover strips it, so that the lanes' dedup by event id still makes
// an event published through an edge and through the cell one event.
const MsgIDPrefix = "edge:"

// MsgID is the dedup id an edge stores an event under.
func MsgID(id string) string { return MsgIDPrefix + id }

// IdempotencyBucket is the key-value bucket of an edge's idempotency
// records: of the edge's own name, never the cell's IDEMPOTENCY, whose
// subjects a record written at the edge would reach across the leaf.
func IdempotencyBucket(name string) string { return "EDGE_" + name + "_IDEMPOTENCY" }

// Domain is an edge's JetStream domain.
func Domain(name string) string { return name }

// prefix is the subject prefix of an edge: no cell stream listens under
// it, so a publish at the edge is never captured across the leaf by the
// cell's INGEST (a false ack), nor by another edge's buffer.
func prefix(name string) string { return "edge." + name + "." }

// Subject is where an edge stores an event for destination d in partition
// p: the cell's INGEST subject under the edge's prefix.
func Subject(name string, p int, destination string) string {
	return prefix(name) + lanes.IngestSubject(p, destination)
}

// ForwardSubject is where the durable consumer of a buffer of the given
// incarnation delivers to the cell: "edge.<name>.forward.<incarnation>"
// ("edge.<name>.forward" for a buffer made before incarnations were in
// it, whose consumer keeps it). A buffer made anew under an old name (a
// lost data dir) so delivers where the cell's source for the old one
// does not listen: nothing reaches that source, whose position is the old
// buffer's (it would take the new buffer's first events for ones it
// already has, and drop them), until the cell's keeper of sources reads
// the new consumer's subject and points the source at it (SetSources),
// which NATS then sets up afresh.
func ForwardSubject(name, incarnation string) string {
	if incarnation == "" {
		return prefix(name) + "forward"
	}
	return prefix(name) + "forward." + incarnation
}

// Buffer is an edge's buffer.
type Buffer struct {
	name   string
	stream jetstream.Stream
	// room admits stores by their bytes (Reserve).
	room *room
}

// Incarnation tells this buffer from any other the edge's name had or
// will have: its stream's creation time, in nanoseconds (BufferHeader).
// It stays across restarts on the same data dir.
func (b *Buffer) Incarnation() string {
	return strconv.FormatInt(b.stream.CachedInfo().Created.UnixNano(), 10)
}

// Open creates the edge's buffer and its durable consumer, or opens them
// as they are. It never deletes or recreates the stream: the cell's
// source follows this stream's sequence, and a recreated stream would
// stall it silently.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Buffer, error) {
	if err := ids.Validate("edge name", cfg.Name); err != nil {
		return nil, err
	}
	if cfg.MaxBytes <= 0 {
		return nil, errors.New("edge buffer: MaxBytes must be positive (--max-buffer)")
	}
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        StreamName,
		Description: "Events this edge accepted and the cell has not yet taken.",
		Subjects:    []string{prefix(cfg.Name) + "ingest.>"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardNew,
		MaxBytes:    StreamMaxBytes(cfg.MaxBytes),
		Duplicates:  cfg.DedupWindow,
		Replicas:    max(cfg.Replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("create %s stream: %w", StreamName, err)
	}
	b := &Buffer{name: cfg.Name, stream: s, room: &room{limit: cfg.MaxBytes, held: int64(s.CachedInfo().State.Bytes)}}
	// The cell's source acks by flow control (durable sourcing): each
	// event leaves the buffer once the cell stored it. A consumer already
	// there keeps its deliver subject (the cell's source listens on it);
	// a new one delivers under this buffer's incarnation.
	deliver := ForwardSubject(cfg.Name, b.Incarnation())
	if c, err := s.PushConsumer(ctx, ConsumerName); err == nil {
		deliver = c.CachedInfo().Config.DeliverSubject
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("read the %s consumer: %w", ConsumerName, err)
	}
	if _, err := js.CreateOrUpdatePushConsumer(ctx, StreamName, jetstream.ConsumerConfig{
		Durable:        ConsumerName,
		DeliverSubject: deliver,
		AckPolicy:      jetstream.AckFlowControlPolicy,
		FlowControl:    true,
		IdleHeartbeat:  time.Second,
	}); err != nil {
		return nil, fmt.Errorf("create the %s consumer: %w", ConsumerName, err)
	}
	return b, nil
}

// Owner names the edge whose buffer js holds: "" when js has no buffer.
// The name an edge is started under must be its buffer's: Open under
// another name moves the stream to the new name's subjects and keeps the
// consumer's deliver subject, which names the old one, so the cell's
// source for the new name never reads it and the events acknowledged from
// then on never leave. The consumer's deliver subject (ForwardSubject)
// names the edge the cell forwards the buffer for, so Owner goes by it;
// by the stream's subjects (prefix) when there is no consumer.
func Owner(ctx context.Context, js jetstream.JetStream) (string, error) {
	s, err := js.Stream(ctx, StreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the %s stream: %w", StreamName, err)
	}
	c, err := s.PushConsumer(ctx, ConsumerName)
	switch {
	case err == nil:
		if name, ok := edgeIn(c.CachedInfo().Config.DeliverSubject, ".forward"); ok {
			return name, nil
		}
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return "", fmt.Errorf("read the %s consumer: %w", ConsumerName, err)
	}
	for _, subject := range s.CachedInfo().Config.Subjects {
		if name, ok := edgeIn(subject, ".ingest.>"); ok {
			return name, nil
		}
	}
	return "", fmt.Errorf("the %s stream's subjects %q name no edge", StreamName, s.CachedInfo().Config.Subjects)
}

// edgeIn is the edge name in subject "edge.<name><tail>" (or
// "edge.<name><tail>.<incarnation>").
func edgeIn(subject, tail string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, "edge.")
	if !ok {
		return "", false
	}
	name, after, _ := strings.Cut(rest, ".")
	if after = "." + after; after != tail && !strings.HasPrefix(after, tail+".") {
		return "", false
	}
	return name, ids.Validate("edge name", name) == nil
}

// Stats is what a buffer holds: the events the cell has not confirmed.
//
// The cell confirms what its source took by flow control, which its
// consumer asks for only every MaxAckPending (1,000) events, past half
// its pending bytes, or after a second with nothing to send: under
// steady traffic, events the cell already stored stay here (Events,
// Oldest) for a while. Waiting and OldestWaiting are the events not yet
// even sent, the backlog while the link is up.
type Stats struct {
	Events uint64
	Bytes  uint64
	// Oldest is when the oldest of them was stored (zero when empty).
	Oldest time.Time
	// Waiting counts the events not yet sent to the cell; OldestWaiting
	// is when the oldest of them was stored (zero when none).
	Waiting       uint64
	OldestWaiting time.Time
	// Stored counts the events ever stored in the buffer (its last
	// sequence): Stored − Events have been forwarded to the cell.
	Stored uint64
}

// Forwarded is how many events the cell has taken from the buffer since
// it was created.
func (s Stats) Forwarded() uint64 { return s.Stored - s.Events }

// Reserve admits a store of n bytes (the StoredSize of its messages)
// when the buffer has room for it under MaxBytes, counting what requests
// in flight reserved: ok false refuses it, and then nothing may be
// stored. Else done must be called once the store returned, with whether
// it wrote anything (or may have: a failed store).
func (b *Buffer) Reserve(n int64) (done func(wrote bool), ok bool) { return b.room.reserve(n) }

// ReserveCounted is Reserve, which also says what it counted the buffer
// as holding when it decided: its bytes at the last read, what was
// stored since, and what the requests in flight may store.
func (b *Buffer) ReserveCounted(n int64) (done func(wrote bool), used int64, ok bool) {
	return b.room.reserveCounted(n)
}

// Stats reads the buffer's state (and bases Reserve's count on it).
func (b *Buffer) Stats(ctx context.Context) (Stats, error) {
	var info *jetstream.StreamInfo
	err := b.room.read(func() (int64, error) {
		var err error
		if info, err = b.stream.Info(ctx); err != nil {
			return 0, err
		}
		return int64(info.State.Bytes), nil
	})
	if err != nil {
		return Stats{}, err
	}
	st := Stats{Events: info.State.Msgs, Bytes: info.State.Bytes, Stored: info.State.LastSeq}
	if st.Events == 0 {
		return st, nil
	}
	st.Oldest = info.State.FirstTime
	consumer, err := b.stream.PushConsumer(ctx, ConsumerName)
	if err != nil {
		return Stats{}, fmt.Errorf("the %s consumer: %w", ConsumerName, err)
	}
	ci := consumer.CachedInfo()
	if st.Waiting = ci.NumPending; st.Waiting == 0 {
		return st, nil
	}
	sent := ci.Delivered.Stream
	next, err := b.stream.GetMsg(ctx, sent+1, jetstream.WithGetMsgSubject(prefix(b.name)+"ingest.>"))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		// Sent and taken since the consumer's state was read.
		st.Waiting = 0
	case err != nil:
		return Stats{}, fmt.Errorf("the oldest event not yet sent (after sequence %d): %w", sent, err)
	default:
		st.OldestWaiting = next.Time
	}
	return st, nil
}

// storeFailed is JetStream's error code for a message a stream could not
// store (JSStreamStoreFailedF): with DiscardNew, "maximum bytes exceeded".
const storeFailed jetstream.ErrorCode = 10077

// IsFull tells whether JetStream refused a store because the buffer's
// stream holds its own MaxBytes (StreamMaxBytes) of unforwarded events:
// past Reserve, which should have refused the request first.
func IsFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == storeFailed && strings.Contains(apiErr.Description, "maximum bytes")
}

// Source is the entry of the cell's INGEST stream that forwards edge
// name's buffer: through the edge's domain API, from its durable consumer
// delivering on deliver (ForwardSubject; DeliverSubject reads it from the
// edge), its subjects rewritten into INGEST's.
func Source(name, deliver string) *jetstream.StreamSource {
	return &jetstream.StreamSource{
		Name:              StreamName,
		External:          &jetstream.ExternalStream{APIPrefix: "$JS." + Domain(name) + ".API"},
		Consumer:          &jetstream.StreamConsumerSource{Name: ConsumerName, DeliverSubject: deliver},
		SubjectTransforms: []jetstream.SubjectTransformConfig{{Source: prefix(name) + "ingest.>", Destination: "ingest.>"}},
	}
}

// ErrOtherEdgesBuffer: an edge's buffer delivers under another edge's
// name. The edge was started on a data dir another name made (before
// edged refused that): nothing it acknowledged under its own name reaches
// the cell's source for it, which cannot be pointed at the buffer.
var ErrOtherEdgesBuffer = errors.New("the edge's buffer is another edge's")

// DeliverSubject reads, across the leaf connection, where edge name's
// buffer's consumer delivers (ForwardSubject): it names the buffer's
// incarnation. It fails when the edge is not reachable.
func DeliverSubject(ctx context.Context, js jetstream.JetStream, name string) (string, error) {
	at, err := jetstream.NewWithDomain(js.Conn(), Domain(name))
	if err != nil {
		return "", err
	}
	s, err := at.Stream(ctx, StreamName)
	if err != nil {
		return "", fmt.Errorf("edge %s's %s stream: %w", name, StreamName, err)
	}
	c, err := s.PushConsumer(ctx, ConsumerName)
	if err != nil {
		return "", fmt.Errorf("edge %s's %s consumer: %w", name, ConsumerName, err)
	}
	subject := c.CachedInfo().Config.DeliverSubject
	if bare := ForwardSubject(name, ""); subject != bare && !strings.HasPrefix(subject, bare+".") {
		return "", fmt.Errorf("%w: edge %s's %s consumer delivers to %q, not to %s[.<incarnation>]", ErrOtherEdgesBuffer, name, ConsumerName, subject, bare)
	}
	return subject, nil
}

// AddSource makes the cell's INGEST stream forward edge name's buffer
// (nothing to do when it does already), reading where its consumer
// delivers from the edge: it fails when the edge cannot be reached.
func AddSource(ctx context.Context, js jetstream.JetStream, name string) error {
	reach, cancel := context.WithTimeout(ctx, ReachTimeout)
	deliver, err := DeliverSubject(reach, js, name)
	cancel()
	if err != nil {
		return err
	}
	return updateSources(ctx, js, func(sources []*jetstream.StreamSource) []*jetstream.StreamSource {
		if slices.ContainsFunc(sources, func(s *jetstream.StreamSource) bool { return isSourceOf(s, name) }) {
			return nil
		}
		return append(sources, Source(name, deliver))
	})
}

// RemoveSource stops forwarding edge name's buffer.
func RemoveSource(ctx context.Context, js jetstream.JetStream, name string) error {
	return updateSources(ctx, js, func(sources []*jetstream.StreamSource) []*jetstream.StreamSource {
		kept := slices.DeleteFunc(slices.Clone(sources), func(s *jetstream.StreamSource) bool { return isSourceOf(s, name) })
		if len(kept) == len(sources) {
			return nil
		}
		return kept
	})
}

func isSourceOf(s *jetstream.StreamSource, name string) bool {
	return s.External != nil && s.External.APIPrefix == "$JS."+Domain(name)+".API"
}

// updateSources changes INGEST's sources with change (nil: no change).
func updateSources(ctx context.Context, js jetstream.JetStream, change func([]*jetstream.StreamSource) []*jetstream.StreamSource) error {
	s, err := js.Stream(ctx, lanes.IngestStream)
	if err != nil {
		return fmt.Errorf("%s stream: %w", lanes.IngestStream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("%s stream: %w", lanes.IngestStream, err)
	}
	cfg := info.Config
	next := change(cfg.Sources)
	if next == nil {
		return nil
	}
	cfg.Sources = next
	if len(cfg.Sources) == 0 {
		cfg.Sources = nil
	}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("update %s's sources: %w", lanes.IngestStream, err)
	}
	return nil
}
