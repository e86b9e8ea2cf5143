// Package ingest is the agent's ingest gateway: it validates an event
// (checking it against the event-type catalogue), routes it — to the
// destination it names, or, without one, to each of its customer's
// matching subscriptions (a fan-out) — stores each delivery straight into
// its lane when this agent owns the destination's partition, else in the
// INGEST stream (tier 1) for the owner to move, and answers only after
// JetStream acknowledged every write. Accepting never depends on any
// destination being up.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/net/http/httpguts"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/diskroom"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/subscriptions"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/internal/fingerprint"
	"github.com/rivora/rivora/internal/tracing"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/routing"
	"github.com/rivora/rivora/sdk/eventid"
)

// Config configures the gateway.
type Config struct {
	// MaxPayload bounds one event's payload in bytes (256 KiB).
	MaxPayload int
	// MaxBatch bounds the events of one PublishBatch (1,000).
	MaxBatch int
	// MaxBatchBytes bounds one PublishBatch request (DefaultMaxBatchBytes).
	MaxBatchBytes int
	// DedupWindow is how long an event id (idempotency key) is remembered.
	DedupWindow time.Duration
	// Replicas is INGEST's replica count in a cell (0 means 1).
	Replicas int
	// Local, when set, is the pending store of the partitions this agent
	// owns: events of those partitions go straight into their lanes, one
	// write instead of INGEST then a move (nil: everything into INGEST).
	Local LocalStore
	// Partitions (nil: none known yet, every publish refused Unavailable)
	// is the cell's partition count, which the agent's partition set owns:
	// 0 until the control plane's first config.
	Partitions PartitionCount
	// Subscriptions are the cell's subscriptions, by which a publish
	// without destination_id fans out (nil: such a publish is refused).
	Subscriptions *subscriptions.Table
	// Catalogue is the cell's event types: every publish is checked
	// against it (nil: none is).
	Catalogue *subscriptions.Catalogue
	// Applied is the config version this agent has applied (nil: 0),
	// stamped on every event: an owner behind it waits for it before
	// taking the event's destination or subscription for deleted.
	Applied func() uint64
	// Edge, when set, makes this an edge's gateway (EdgeTarget): events
	// go into the edge's buffer, not INGEST (Local and Replicas unused).
	Edge *EdgeTarget
	// Delivered finds a delivered event by id (the history): where the
	// idempotency check finds an original that left its lane (nil: it
	// is not looked for there; originals.go).
	Delivered Bodies
	// Durable is the store's group commit (--fsync): every answer waits
	// for a sync begun after its writes. Nil: an answer means the writes
	// reached the OS.
	Durable *natsd.Syncer
	// Reach, when set, judges whether this agent can reach a quorum of
	// the streams a publish writes: a publish that cannot be stored here
	// is refused Unavailable instead of waiting out its deadline: about
	// 3 s after the agent was cut off (three seconds without its streams'
	// heartbeats), at once after that (reach.go). Nil: a publish waits.
	Reach *natsd.Reach
	// StoreDown, when set, is non-nil once this agent's store is gone
	// (natsd.Server.LostErr: JetStream disabled on a full disk): every
	// publish is then refused as unavailable at once, so the publisher
	// goes to another agent instead of waiting out a timeout.
	StoreDown func() error
	// Room, when set, refuses events the data directory's disk has no
	// room for (diskroom: every event when it is full, the customers
	// holding most pending events' when it is low). Nil: not watched (an
	// edge, whose buffer has its own bound).
	Room *diskroom.Watch
	// ConcurrentEvents is how many Publish and PublishBatch calls are
	// accepted at once; the others wait their customer's turn (turns.go;
	// 0: DefaultConcurrentEvents).
	ConcurrentEvents int
}

// Defaults.
const (
	DefaultMaxPayload  = 256 << 10
	DefaultMaxBatch    = 1_000
	DefaultDedupWindow = 2 * time.Minute
	defaultContentType = "application/json"
)

// Collectors are the gateway's metrics, registered in the default
// registry as well: for a process with a registry of its own (an edge).
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{unverified, accepted, unreachableRefusals, unrouted, waitingPublishes}
}

var unverified = promauto.NewCounter(prometheus.CounterOpts{
	Name: "rivora_ingest_idempotency_unverified_total",
	Help: "Publishes a stream answered as duplicates of an original that was found nowhere to compare (dead-lettered, or its history record lost): answered as the original's duplicate.",
})

var accepted = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "rivora_ingest_events_total",
	Help: "Events answered by the ingest gateway, by result (accepted, duplicate, invalid, conflict (an idempotency key reused for another event), failed; replayed and resent for operators' re-ingests).",
}, []string{"result"})

// storedCounter and duplicateCounter are accepted's two per-event series,
// looked up once (a label lookup hashes and locks) and only when first
// counted, so that a series appears on /metrics as before: once it counts.
var (
	storedCounter    = sync.OnceValue(func() prometheus.Counter { return accepted.WithLabelValues("accepted") })
	duplicateCounter = sync.OnceValue(func() prometheus.Counter { return accepted.WithLabelValues("duplicate") })
)

// Gateway implements rivora.v1.IngestService.
type Gateway struct {
	js    jetstream.JetStream
	reg   *destinations.Registry
	cfg   Config
	now   func() time.Time
	newID func() (string, error)
	// partitions is the cell's partition count (Config.Partitions), known once the control
	// plane's first config arrived (0 before: ingest answers Unavailable).
	partitions PartitionCount
	local      LocalStore
	claims     *claims
	originals  *originals
	delivered  Bodies
	subs       *subscriptions.Table
	catalogue  *subscriptions.Catalogue
	applied    func() uint64
	// edge is set at an edge (Config.Edge).
	edge *EdgeTarget
	// durable is the store's group commit (Config.Durable).
	durable *natsd.Syncer
	// bursts publishes a group of events into INGEST (or an edge's
	// buffer).
	bursts *natsd.Publisher
	// guard refuses a publish this agent cannot store now (reach.go).
	guard *storeGuard
	// turns lets publishes in, fairly by customer (turns.go).
	turns *turns
	// log tells of slow publishes (slow.go), a line a second at most.
	log      *slog.Logger
	slowLogs slowLogs
}

// configVersion is the config version this agent has applied (0 unknown).
func (g *Gateway) configVersion() uint64 {
	if g.applied == nil {
		return 0
	}
	return g.applied()
}

// versionFor is the config version an event for destination dest is
// accepted under: applied (this agent's), or the version that created
// dest when that is newer — the registry has a destination before the
// config that made it is recorded applied. An owner takes an event
// accepted under a version older than its destination's creation for
// one accepted for an earlier destination of that id (deleted since),
// so the version must never understate it.
func (g *Gateway) versionFor(applied uint64, dest string) uint64 {
	if d, ok := g.reg.Get(dest); ok {
		return max(applied, d.CreatedVersion)
	}
	return applied
}

// PartitionCount tells the cell's partition count: 0 until it is known.
type PartitionCount interface{ Count() int }

// FixedCount is a partition count known from the start (tests, tools).
type FixedCount int

// Count is n.
func (n FixedCount) Count() int { return int(n) }

// count is the cell's partition count, 0 while unknown.
func (g *Gateway) count() int {
	if g.partitions == nil {
		return 0
	}
	return g.partitions.Count()
}

// storeDown refuses a publish once this agent's store is gone
// (Config.StoreDown).
func (g *Gateway) storeDown() error {
	if g.cfg.StoreDown == nil {
		return nil
	}
	if err := g.cfg.StoreDown(); err != nil {
		return errkind.Errorf(errkind.Unavailable, "this agent cannot store events (%v); it is restarting: publish through another agent", err)
	}
	return nil
}

var errNoConfig = errkind.Errorf(errkind.Unavailable, "this agent (or edge) has no configuration from the control plane yet; retry shortly")

// New creates (or updates) the INGEST stream and returns the gateway; at
// an edge (Config.Edge) it creates no stream: the edge's buffer is open
// already (edge.Open).
func New(ctx context.Context, js jetstream.JetStream, reg *destinations.Registry, cfg Config, log *slog.Logger) (*Gateway, error) {
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = DefaultMaxPayload
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if cfg.DedupWindow <= 0 {
		cfg.DedupWindow = DefaultDedupWindow
	}
	if err := cfg.Edge.validate(); err != nil {
		return nil, err
	}
	if cfg.Edge != nil {
		cfg.Local, cfg.Replicas = nil, 1
	} else if err := createIngest(ctx, js, cfg); err != nil {
		return nil, err
	}
	claims, err := newClaims(ctx, js, cfg.Edge.bucket(), cfg.DedupWindow, cfg.Replicas)
	if err != nil {
		return nil, err
	}
	bursts, err := natsd.NewPublisher(js.Conn())
	if err != nil {
		return nil, err
	}
	if cfg.Edge == nil {
		// A publish INGEST's old leader dropped (a rolling restart steps
		// leaders down) is answered Unavailable soon after the election,
		// and the caller's retry with its key is told it was stored or
		// stores it, rather than waiting for its deadline.
		if err := bursts.FailOnLeaderChange(lanes.IngestStream); err != nil {
			bursts.Close()
			return nil, err
		}
	}
	if cfg.Edge != nil {
		log.Info("ingest ready at the edge", "edge", cfg.Edge.Name, "bucket", cfg.Edge.bucket(), "dedup_window", cfg.DedupWindow, "max_payload", cfg.MaxPayload)
	} else {
		log.Info("ingest ready", "stream", lanes.IngestStream, "dedup_window", cfg.DedupWindow, "max_payload", cfg.MaxPayload)
	}
	return &Gateway{
		js: js, reg: reg, cfg: cfg, now: time.Now, newID: newEventID, local: cfg.Local, partitions: cfg.Partitions, claims: claims,
		originals: newOriginals(js, claims, cfg.Replicas), delivered: cfg.Delivered, subs: cfg.Subscriptions, catalogue: cfg.Catalogue, applied: cfg.Applied, edge: cfg.Edge,
		durable: cfg.Durable, bursts: bursts, guard: newStoreGuard(cfg, log), turns: newTurns(cfg.ConcurrentEvents), log: log,
	}, nil
}

// Close answers the publishes still waiting for their streams'
// acknowledgements (they fail: the agent is stopping) and stops listening
// for acknowledgements. The agent closes its gateway when it stops,
// before its NATS server stops; its API may still be answering then, so
// a publish in flight can fail although its event was stored (a retry
// with its idempotency key gets the same id).
func (g *Gateway) Close() { g.bursts.Close() }

// createIngest creates (or updates) the INGEST stream, keeping its
// sources.
func createIngest(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	sources, err := ingestSources(ctx, js)
	if err != nil {
		return err
	}
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        lanes.IngestStream,
		Description: "Tier 1: accepted events waiting to move into their partition's lanes.",
		Subjects:    []string{"ingest.>"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    max(cfg.Replicas, 1),
		Duplicates:  cfg.DedupWindow,
		MaxMsgSize:  int32(cfg.MaxPayload + eventOverhead),
		Sources:     sources,
		// With one replica a direct get reads the one copy there is, so
		// it sees every acknowledged write, as an API get from the
		// leader does, at about half the CPU (no JSON, no API queue):
		// the lane writer's look at INGEST before each direct append
		// (owner.laneWriter.lookIngest) is one per Publish. Replicated,
		// a follower could answer a direct get before it has the latest
		// write, so only the leader's API answers.
		AllowDirect: max(cfg.Replicas, 1) == 1,
	})
	if err != nil {
		return fmt.Errorf("create %s stream: %w", lanes.IngestStream, err)
	}
	return nil
}

// ingestSources are the sources INGEST has now (edges' buffers, package
// edge): an agent's start keeps them, for they are not its to drop.
func ingestSources(ctx context.Context, js jetstream.JetStream) ([]*jetstream.StreamSource, error) {
	s, err := js.Stream(ctx, lanes.IngestStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s stream: %w", lanes.IngestStream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read %s stream: %w", lanes.IngestStream, err)
	}
	return info.Config.Sources, nil
}

func newEventID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	return id.String(), nil
}

// Publish accepts one event: to the destination it names, or to each
// of its customer's matching subscriptions (routes), or, a test event, to
// the one subscription it names.
func (g *Gateway) Publish(ctx context.Context, req *connect.Request[rivorav1.PublishRequest]) (_ *connect.Response[rivorav1.PublishResponse], err error) {
	if err := g.storeDown(); err != nil {
		return nil, err
	}
	if g.count() == 0 {
		return nil, errNoConfig
	}
	ctx, tr := startIngest(ctx, req.Header())
	defer func() { tr.end(err) }()
	answers, err := g.accept(ctx, tr, []*rivorav1.PublishRequest{req.Msg}, false)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(answers[0]), nil
}

// PublishBatch accepts many events, direct and routed mixed, all or
// nothing: all are validated before any is stored. results[i] answers
// events[i]; event_ids[i] is its id when it named its destination.
func (g *Gateway) PublishBatch(ctx context.Context, req *connect.Request[rivorav1.PublishBatchRequest]) (_ *connect.Response[rivorav1.PublishBatchResponse], err error) {
	if err := g.storeDown(); err != nil {
		return nil, err
	}
	if g.count() == 0 {
		return nil, errNoConfig
	}
	ctx, tr := startIngest(ctx, req.Header())
	defer func() { tr.end(err) }()
	events := req.Msg.GetEvents()
	if len(events) == 0 {
		return nil, errkind.Errorf(errkind.Invalid, "events is empty")
	}
	if len(events) > g.cfg.MaxBatch {
		return nil, errkind.Errorf(errkind.Invalid, "batch has %d events; the limit is %d", len(events), g.cfg.MaxBatch)
	}
	answers, err := g.accept(ctx, tr, events, true)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(answers))
	for i, a := range answers {
		ids[i] = a.GetEventId()
	}
	return connect.NewResponse(&rivorav1.PublishBatchResponse{EventIds: ids, Results: answers}), nil
}

// accept validates the events of one request, records their idempotency
// keys, stores every delivery they make, all or nothing, and answers each
// event (in request order).
func (g *Gateway) accept(ctx context.Context, tr *ingestTrace, reqs []*rivorav1.PublishRequest, inBatch bool) (_ []*rivorav1.PublishResponse, err error) {
	steps := startPhases()
	defer func() { steps.logIfSlow(g.log, &g.slowLogs, len(reqs), err) }()
	// Before any validation: a refused customer's retries cost little.
	if err := g.roomFor(reqs, inBatch); err != nil {
		accepted.WithLabelValues("failed").Add(float64(len(reqs)))
		return nil, err
	}
	pubs := make([]publication, len(reqs))
	for i, req := range reqs {
		pub, err := g.prepare(ctx, req)
		if err != nil {
			return nil, refused(err, i, len(reqs), inBatch)
		}
		pubs[i] = pub
	}
	if err := g.checkStoredSize(pubs); err != nil {
		accepted.WithLabelValues("invalid").Add(float64(len(reqs)))
		return nil, err
	}
	if err := g.edge.admit(); err != nil {
		accepted.WithLabelValues("failed").Add(float64(len(reqs)))
		return nil, err
	}
	// Valid: it waits its turn to be stored (turns.go), as its first
	// event's customer's (a batch is usually one customer's).
	customer := reqs[0].GetCustomerId()
	if err := g.turns.enter(ctx, customer, len(reqs)); err != nil {
		accepted.WithLabelValues("failed").Add(float64(len(reqs)))
		return nil, turnError(ctx, err, g.turns.limit)
	}
	held := len(reqs)
	defer func() { g.turns.leave(held) }()
	steps.done(phaseAdmit)
	// At an edge a keyed direct event is recorded (the edge's buffer has
	// no owner to compare with); at the cell it is stored once and
	// compared only when a stream answers it is a duplicate
	// (direct_idempotency.go).
	writes, err := recordWrites(pubs, g.edge != nil)
	if err != nil {
		return nil, err
	}
	// From here on the request waits on streams: watched, it is refused
	// once one of them is out of this agent's reach (reach.go).
	w := g.guard.watch(ctx)
	defer w.stop()
	ctx = w.ctx
	if len(writes) > 0 {
		if err := w.need(g.claims.stream()); err != nil {
			accepted.WithLabelValues("failed").Add(float64(len(reqs)))
			return nil, err
		}
	}
	claimed, err := g.claims.check(ctx, writes, inBatch)
	if err != nil {
		return nil, w.explain(claimError(ctx, err))
	}
	events, err := g.deliveries(tr, pubs, inBatch)
	if err != nil {
		g.claims.release(claimed)
		return nil, err
	}
	if extra := len(events) - len(reqs); extra > 0 {
		g.turns.charge(customer, extra)
		held += extra
	}
	if w.active() {
		if err := w.need(g.storeStreams(events)...); err != nil {
			g.claims.release(claimed)
			accepted.WithLabelValues("failed").Add(float64(len(events)))
			return nil, err
		}
	}
	steps.done(phaseRecord)
	known, err := g.precheck(ctx, events, inBatch)
	if err != nil {
		g.claims.release(claimed)
		return nil, w.explain(claimError(ctx, err))
	}
	steps.done(phasePrecheck)
	// At an edge, the buffer must have room for every event, else none
	// is stored.
	done, err := g.edge.reserve(events, inBatch)
	if err != nil {
		g.claims.release(claimed)
		accepted.WithLabelValues("failed").Add(float64(len(events)))
		return nil, err
	}
	tr.annotate(pubs, events, inBatch)
	storeCtx, span := tr.startStore(ctx, len(events))
	at, err := g.storeNew(storeCtx, events, known)
	done(wrote(at, err))
	endSpan(span, err)
	steps.done(phaseStore)
	if err != nil {
		g.claims.releaseUnstored(claimed)
		accepted.WithLabelValues("failed").Add(float64(len(events)))
		return nil, w.explain(g.storeErrorOf(ctx, err, len(events)))
	}
	if err := g.verify(ctx, events, at, known, inBatch); err != nil {
		return nil, w.explain(claimError(ctx, err))
	}
	steps.done(phaseVerify)
	return answers(pubs, duplicates(at)), nil
}

// roomFor refuses a request with an event the data directory's disk has
// no room for (Config.Room); in a batch it names the event.
func (g *Gateway) roomFor(reqs []*rivorav1.PublishRequest, inBatch bool) error {
	if g.cfg.Room == nil {
		return nil
	}
	for i, req := range reqs {
		if err := g.cfg.Room.Admit(req.GetCustomerId()); err != nil {
			if inBatch {
				return fmt.Errorf("events[%d]: %w (nothing in this batch was stored)", i, err)
			}
			return err
		}
	}
	return nil
}

// roomForAny refuses a re-ingest (a replay, a resend) while the data
// directory's disk is full (Config.Room).
func (g *Gateway) roomForAny() error {
	if g.cfg.Room == nil {
		return nil
	}
	return g.cfg.Room.AdmitAny()
}

// refused is the answer to a request refused before anything was stored
// (nothing was): err keeps its kind, else it is the request's fault
// (Invalid); in a batch it names the event (i) and says nothing was
// stored.
func refused(err error, i, events int, inBatch bool) error {
	result := "invalid"
	if errors.Is(err, errkind.Unavailable) {
		result = "failed"
	}
	accepted.WithLabelValues(result).Add(float64(events))
	if !errkind.Coded(err) {
		err = errkind.Tag(errkind.Invalid, err)
	}
	if inBatch {
		err = fmt.Errorf("events[%d]: %w (nothing in this batch was stored)", i, err)
		if errkind.CodeOf(err) == connect.CodeInvalidArgument {
			// A client reads which event without parsing the message.
			err = errkind.WithInfo(err, InvalidEventReason, map[string]string{"index": strconv.Itoa(i)})
		}
	}
	return err
}

// InvalidEventReason is the ErrorInfo reason (errkind.Domain) of a
// PublishBatch refused invalid_argument for one of its events: its
// metadata's "index" is the event's place in the batch.
const InvalidEventReason = "INVALID_EVENT"

// publication is one validated PublishRequest: a direct event (it named
// its destination) or a routed one (a fan-out or a test event).
type publication struct {
	direct *prepared
	routed *routed
}

// recordWrites are the idempotency records of a request's keyed events:
// its routed publishes', and, when direct is set (an edge), its direct
// events'.
func recordWrites(pubs []publication, direct bool) ([]recordWrite, error) {
	var writes []recordWrite
	for i, pub := range pubs {
		switch {
		case direct && pub.direct != nil && pub.direct.fingerprint != nil:
			writes = append(writes, directRecord(pub.direct, i))
		case pub.routed != nil && pub.routed.key != "":
			w, err := pub.routed.record(i)
			if err != nil {
				return nil, err
			}
			writes = append(writes, w)
		}
	}
	return writes, nil
}

// deliveries are the events a request stores, in request order: each
// direct event, and each routed one's deliveries on its settled routes;
// each carries the request's trace context. Its error is the request's
// answer (nothing stored).
func (g *Gateway) deliveries(tr *ingestTrace, pubs []publication, inBatch bool) ([]*prepared, error) {
	events := make([]*prepared, 0, len(pubs))
	for i, pub := range pubs {
		mine := []*prepared{pub.direct}
		if pub.routed != nil {
			if err := g.settle(pub.routed); err != nil {
				return nil, refused(err, i, len(pubs), inBatch)
			}
			mine = pub.routed.deliveries
		}
		for _, p := range mine {
			p.index = i
			if err := tr.stamp(p); err != nil {
				return nil, refused(err, i, len(pubs), inBatch)
			}
		}
		events = append(events, mine...)
	}
	return events, nil
}

// answers answers each publication, given the store's duplicate flag of
// each of its events (in deliveries' order), and counts them.
func answers(pubs []publication, dups []bool) []*rivorav1.PublishResponse {
	countStored(dups)
	out := make([]*rivorav1.PublishResponse, len(pubs))
	at := 0
	for i, pub := range pubs {
		if pub.direct != nil {
			out[i] = &rivorav1.PublishResponse{EventId: pub.direct.event.GetEventId(), Duplicate: dups[at]}
			at++
			continue
		}
		r := pub.routed
		out[i] = r.answer(dups[at : at+len(r.deliveries)])
		at += len(r.deliveries)
		if len(r.routes) == 0 && !r.retry {
			unrouted.Inc()
		}
	}
	return out
}

// countStored counts stored events as accepted and duplicates as
// duplicate: one add per series and call, not a label lookup per event.
func countStored(dups []bool) {
	stored, duplicate := 0, 0
	for _, d := range dups {
		if d {
			duplicate++
		} else {
			stored++
		}
	}
	if stored > 0 {
		storedCounter().Add(float64(stored))
	}
	if duplicate > 0 {
		duplicateCounter().Add(float64(duplicate))
	}
}

// prepared is a validated event, encoded, with its partition and dedup id.
type prepared struct {
	partition int
	event     *rivorav1.Event
	data      []byte
	msgID     string
	// key is the publish's idempotency key ("": none): an edge sends it
	// to the cell (edge.KeyHeader). fingerprint is set for an event
	// published to a destination by name with a key: stamped on its
	// stored copies (fingerprint.Header), compared with a duplicate's.
	key         string
	fingerprint []byte
	// index is the event's publication's in its request, for errors.
	index int
}

// LocalEvent is one event for LocalStore.AppendLocal.
type LocalEvent struct {
	Event *rivorav1.Event
	// Data is the encoded Event; MsgID its dedup id.
	Data  []byte
	MsgID string
	// Fingerprint, when set, is stamped on the stored copy.
	Fingerprint []byte
}

// LocalStore is the pending store of the partitions this agent owns.
type LocalStore interface {
	// AppendLocal stores events straight into partition p's lanes when
	// this agent owns p (owned false: it does not, use INGEST). It answers
	// once they are durable, with where each is (a duplicate: where its
	// original is).
	AppendLocal(ctx context.Context, p int, events []LocalEvent) (stored []Stored, owned bool, err error)
	// Owns tells whether this agent owns partition p now.
	Owns(p int) bool
	// MayHold is false only when this agent owns partition p and
	// certainly did not store msgID within the dedup window: not in its
	// lanes, and nothing it forwarded into INGEST waits there for its
	// mover (with WaitsInIngest false, the idempotency check then needs
	// no probe).
	MayHold(p int, msgID string) bool
	// WaitsInIngest is false only when this agent owns partition p and
	// INGEST holds no event of p its mover has not moved: an event
	// another agent stored there is unknown to MayHold.
	WaitsInIngest(ctx context.Context, p int) (bool, error)
}

// duplicates is the duplicate flag of each stored event.
func duplicates(at []Stored) []bool {
	dups := make([]bool, len(at))
	for i, a := range at {
		dups[i] = a.Duplicate
	}
	return dups
}

// store makes a batch durable, partition by partition in parallel: into
// the lanes when this agent owns the partition, else into INGEST for its
// owner to move; with --fsync, one sync shared with concurrent requests
// then covers these writes and whatever was stored before them (the
// idempotency records, a duplicate's original). It returns where each
// event is.
func (g *Gateway) store(ctx context.Context, batch []*prepared) ([]Stored, error) {
	at, err := g.write(ctx, batch)
	if err != nil {
		return at, err
	}
	return at, g.durable.Commit(ctx)
}

// write stores a batch (see store), each partition's events in one go.
func (g *Gateway) write(ctx context.Context, batch []*prepared) ([]Stored, error) {
	groups := make(map[int][]int)
	var order []int
	for i, p := range batch {
		if _, ok := groups[p.partition]; !ok {
			order = append(order, p.partition)
		}
		groups[p.partition] = append(groups[p.partition], i)
	}
	at := make([]Stored, len(batch))
	if len(order) == 0 {
		return at, nil // nothing to store (a fan-out that matched nothing)
	}
	if len(order) == 1 {
		return at, g.storeGroup(ctx, batch, groups[order[0]], at)
	}
	// The first partition's group is stored on this goroutine: one
	// goroutine fewer per request.
	errs := make(chan error, len(order)-1)
	for _, part := range order[1:] {
		go func() { errs <- g.storeGroup(ctx, batch, groups[part], at) }()
	}
	firstErr := g.storeGroup(ctx, batch, groups[order[0]], at)
	for range order[1:] {
		if err := <-errs; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return at, firstErr
}

// storeGroup stores the events batch[idx] of one partition.
func (g *Gateway) storeGroup(ctx context.Context, batch []*prepared, idx []int, at []Stored) error {
	if g.local != nil {
		events := make([]LocalEvent, len(idx))
		for j, i := range idx {
			events[j] = LocalEvent{Event: batch[i].event, Data: batch[i].data, MsgID: batch[i].msgID, Fingerprint: batch[i].fingerprint}
		}
		stored, owned, err := g.local.AppendLocal(ctx, batch[idx[0]].partition, events)
		if owned {
			for j, i := range idx[:len(stored)] {
				at[i] = stored[j]
			}
			return err
		}
	}
	// One burst of core NATS publishes whose acks come back to one
	// subscription (natsd.Publisher), not a JetStream future per event.
	burst, err := g.bursts.Start(len(idx))
	if err != nil {
		return err
	}
	for j, i := range idx {
		subject, h := g.edge.message(batch[i])
		if err := burst.Publish(j, subject, h, batch[i].data); err != nil {
			// Nobody waits for the messages sent before: the burst is
			// dropped (else it would stay in the Publisher until their
			// acknowledgements came, which a closed connection never
			// brings).
			burst.Drop(err)
			return fmt.Errorf("events[%d]: %w", i, err)
		}
	}
	acks, err := burst.Wait(ctx, storeTimeout)
	for j, ack := range acks {
		at[idx[j]] = Stored{Stream: ack.Stream, Seq: ack.Seq, Duplicate: ack.Duplicate}
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("events[%d]: %w", idx[len(acks)], err)
	}
	return nil
}

// storeTimeout bounds the wait for a stream's acks when the caller set no
// deadline: the store is in this process (or this cell), so none for
// this long means the connection lost them.
const storeTimeout = time.Minute

// claimError is the answer when the idempotency check refused a batch
// (errkind.Exists) or could not run.
func claimError(ctx context.Context, err error) error {
	if errors.Is(err, errkind.Exists) {
		accepted.WithLabelValues("conflict").Inc()
		return err
	}
	accepted.WithLabelValues("failed").Inc()
	return storeError(ctx, err)
}

// storeError is the answer when a store failed: Deadline when the call
// ran out of time (or its caller left), else Unavailable (retry).
func storeError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errkind.Errorf(errkind.Deadline, "store event: %w", err)
	}
	return errkind.Tag(errkind.Unavailable, errkind.WithAdvice(fmt.Errorf("store event: %w", err), "retry with the same idempotency key"))
}

// eventsStoreError is storeError for a failed store of a request's
// events: the failure may have come after some of them were written (its
// messages are stored one by one, partition by partition), or after all
// were and before their acknowledgements came, so it says they may have
// been stored.
func eventsStoreError(ctx context.Context, err error) error {
	const mayBe = "the request's events may have been stored: retry with the same idempotency keys, which answer a stored event with its id (a retry without a key may store an event twice)"
	if ctx.Err() != nil {
		return errkind.Tag(errkind.Deadline, errkind.WithAdvice(fmt.Errorf("store event: %w", err), mayBe))
	}
	return errkind.Tag(errkind.Unavailable, errkind.WithAdvice(fmt.Errorf("store event: %w", err), mayBe))
}

// resendStoreError is storeError for a resend: retrying it is safe (its
// dedup id makes a second store a duplicate), so it says that instead.
func resendStoreError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errkind.Errorf(errkind.Deadline, "store the resent event: %w", err)
	}
	return errkind.Tag(errkind.Unavailable, errkind.WithAdvice(fmt.Errorf("store the resent event: %w", err), "resending again is safe (it is stored once)"))
}

// prepare validates one event and plans it: a direct event encoded, or
// a routed one with its routes.
func (g *Gateway) prepare(ctx context.Context, req *rivorav1.PublishRequest) (publication, error) {
	dest, test := req.GetDestinationId(), req.GetSubscriptionId()
	if dest != "" && test != "" {
		return publication{}, errors.New("set destination_id (an event to that destination) or subscription_id (a test event to that subscription), not both")
	}
	if dest != "" {
		if err := lanes.ValidateID("destination_id", dest); err != nil {
			return publication{}, err
		}
		if err := g.takes(ctx, dest, req.GetCustomerId()); err != nil {
			return publication{}, err
		}
	}
	base, key, err := g.content(req)
	if err != nil {
		return publication{}, err
	}
	if dest == "" {
		r, err := g.prepareRouted(ctx, base, key, test)
		return publication{routed: r}, err
	}
	p, err := g.prepareDirect(base, key, dest)
	return publication{direct: p}, err
}

// takes refuses an event for customer to destination dest that is not
// registered, or is another customer's own (Destination.TakesEventsOf):
// else any customer could send events, signed with its secret, to
// another customer's endpoint. To a caller limited to some customers that
// answer is word for word an absent destination's, so that it does not
// learn another customer's destination exists. At an edge whose config is
// stale (EdgeTarget.Stale) an absent destination is refused Unavailable:
// it may have been created since.
func (g *Gateway) takes(ctx context.Context, dest, customer string) error {
	d, ok := g.reg.Get(dest)
	if ok && !d.TakesEventsOf(customer) {
		if !auth.OwnerHidden(ctx, d.OwnerCustomer) {
			return fmt.Errorf("destination %q is customer %q's own: it takes that customer's events only, not customer %q's", dest, d.OwnerCustomer, customer)
		}
		ok = false
	}
	if !ok {
		if note := g.edge.stale(); note != "" {
			// Created while the edge was cut off, it may well exist.
			return errkind.Errorf(errkind.Unavailable, "destination %q is not in the config this edge has, but it may have been created since: %s; retry later, or publish to the cell", dest, note)
		}
		return fmt.Errorf("destination %q is not registered; create it with `rivoractl destinations create %s --url URL`", dest, dest)
	}
	return nil
}

// content validates what every event has — customer, lane, type, body,
// content type, idempotency key — and checks it against the catalogue.
// It returns the event as published (no id, destination or subscription)
// and its idempotency key.
func (g *Gateway) content(req *rivorav1.PublishRequest) (*rivorav1.Event, string, error) {
	if err := lanes.ValidateID("customer_id", req.GetCustomerId()); err != nil {
		return nil, "", err
	}
	if err := lanes.ValidateLaneKey(req.GetLaneKey()); err != nil {
		return nil, "", err
	}
	if err := routing.ValidateType(req.GetType()); err != nil {
		return nil, "", err
	}
	payload, contentType, err := body(req, g.cfg.MaxPayload)
	if err != nil {
		return nil, "", err
	}
	key := req.GetIdempotencyKey()
	if key != "" {
		if err := lanes.ValidateEventID("idempotency_key", key); err != nil {
			return nil, "", err
		}
		if err := validateKey(key); err != nil {
			return nil, "", err
		}
	}
	switch contentType {
	case "", defaultContentType:
		// The common case costs no parse per event.
		contentType = defaultContentType
	default:
		if err := validateContentType(contentType); err != nil {
			return nil, "", err
		}
	}
	if g.catalogue != nil {
		if err := g.catalogue.Check(req.GetType(), payload, isJSON(contentType)); err != nil {
			return nil, "", err
		}
	}
	return &rivorav1.Event{
		CustomerId:    req.GetCustomerId(),
		LaneKey:       req.GetLaneKey(),
		Type:          req.GetType(),
		Payload:       payload,
		ContentType:   contentType,
		AcceptedAt:    timestamppb.New(g.now()),
		ConfigVersion: g.configVersion(),
	}, key, nil
}

// prepareDirect encodes an event published to the destination it names.
func (g *Gateway) prepareDirect(base *rivorav1.Event, key, dest string) (*prepared, error) {
	// A key names one event of its customer on its destination: the id
	// is derived from the three, so another customer's same key is
	// another event.
	var id string
	if key != "" {
		id = eventid.FromKey(dest, base.GetCustomerId(), key)
	} else {
		var err error
		if id, err = g.newID(); err != nil {
			return nil, fmt.Errorf("assign event id: %w", err)
		}
	}
	// base is this publish's own (content made it): it becomes the
	// stored event as it is, without withRoute's copy (a fan-out's base
	// is shared by its deliveries; a direct event's is not).
	ev := base
	ev.EventId, ev.DestinationId = id, dest
	ev.ConfigVersion = g.versionFor(ev.GetConfigVersion(), dest)
	data, err := proto.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("encode event: %w", err)
	}
	p := &prepared{partition: lanes.Partition(dest, g.count()), event: ev, data: data, msgID: id}
	if key != "" {
		p.key, p.fingerprint = key, fingerprint.Of(ev)
	}
	return p, nil
}

// replayTurns prefixes the turns of a replay's chunks (a destination's
// id): no customer's id starts with a NUL.
const replayTurns = "\x00replay "

// Reingest accepts dead letters again through the normal ingest path: each
// keeps its event id (receivers dedupe on it), is marked replayed and
// starts a new window now. Its dedup id is the event id and the time it
// died, so replaying the same dead letter twice stores it once (within
// the dedup window) while a replay is never mistaken for the original.
// It returns how many were stored and how many were already there.
func (g *Gateway) Reingest(ctx context.Context, dls []*rivorav1.DeadLetter) (stored, duplicates int, err error) {
	n := g.count()
	if n == 0 {
		return 0, 0, errNoConfig
	}
	if err := g.roomForAny(); err != nil {
		return 0, 0, err
	}
	now := timestamppb.New(g.now())
	batch := make([]*prepared, 0, len(dls))
	for _, dl := range dls {
		if err := g.Replayable(ctx, dl); err != nil {
			return 0, 0, err
		}
		ev := proto.Clone(dl.GetEvent()).(*rivorav1.Event)
		ev.Replayed = true
		ev.AcceptedAt = now
		// Accepted again, under this config: a dead letter of a
		// destination deleted and made again goes to the new one.
		ev.ConfigVersion = g.versionFor(max(ev.GetConfigVersion(), g.configVersion()), ev.GetDestinationId())
		// The archive is outside Rivora's hands: its trace context is
		// checked again, as a publisher's is, so a bad one cannot break
		// every attempt.
		ev.Traceparent, ev.Tracestate = tracing.Normalize(ev.GetTraceparent(), ev.GetTracestate())
		data, err := proto.Marshal(ev)
		if err != nil {
			return 0, 0, fmt.Errorf("encode event %s: %w", ev.GetEventId(), err)
		}
		batch = append(batch, &prepared{
			partition: lanes.Partition(ev.GetDestinationId(), n), event: ev, data: data,
			msgID: ReplayDedupID(dl),
		})
	}
	if len(batch) == 0 {
		return 0, 0, nil
	}
	// A replay takes turns as one more customer (its chunks mix the
	// destination's customers): a replay of a million dead letters goes
	// in beside the customers' publishes, not ahead of them, and charges
	// none of them.
	if err := g.turns.enter(ctx, replayTurns+batch[0].event.GetDestinationId(), len(batch)); err != nil {
		return 0, 0, turnError(ctx, err, g.turns.limit)
	}
	defer g.turns.leave(len(batch))
	at, err := g.store(ctx, batch)
	if err != nil {
		return 0, 0, storeError(ctx, err)
	}
	for _, a := range at {
		if a.Duplicate {
			duplicates++
		} else {
			stored++
		}
	}
	accepted.WithLabelValues("replayed").Add(float64(stored))
	return stored, duplicates, nil
}

// Replayable says why a dead letter cannot be re-ingested now
// (errkind.Precondition), nil when it can: its destination is not
// registered or is another customer's own (sendableTo), or the
// subscription that routed it was deleted — its URL, path, secret and
// headers went with it, and re-ingested it would only die again. ctx is
// the replay's call: whom the answer may tell whose a destination is.
func (g *Gateway) Replayable(ctx context.Context, dl *rivorav1.DeadLetter) error {
	ev := dl.GetEvent()
	if err := g.sendableTo(ctx, ev, "create it before replaying its dead letters"); err != nil {
		return err
	}
	if sub := g.deletedSubscription(ev); sub != "" {
		return errkind.Errorf(errkind.Precondition, "subscription %q, which routed event %s, was deleted: its dead letters cannot be delivered as it would have (its URL, secret and headers went with it), so nothing is replayed; narrow the replay (--customer, --lane, --subscription of one that exists), or leave them in the archive and replay the others (`rivoractl replay --skip-deleted-subscriptions`)", sub, ev.GetEventId())
	}
	return nil
}

// Resendable says why ev cannot be resent now (errkind.Precondition),
// nil when it can: as Replayable, for the caller of ctx's call. Resend
// checks it too; ResendEvent asks first, so that its answer for an
// absent destination is this one, whichever agent answers.
func (g *Gateway) Resendable(ctx context.Context, ev *rivorav1.Event) error {
	if err := g.sendableTo(ctx, ev, "create it before resending its events"); err != nil {
		return err
	}
	// Resent, it would only die again at once, reason deleted: a second
	// dead letter, and a resend that answered success.
	if sub := g.deletedSubscription(ev); sub != "" {
		return errkind.Errorf(errkind.Precondition, "subscription %q, which routed event %s, was deleted: the event cannot be delivered as it would have been (its URL, secret and headers went with it), so it is not resent; it stays as it ended (`rivoractl events get %s`)", sub, ev.GetEventId(), ev.GetEventId())
	}
	return nil
}

// sendableTo refuses to send ev again to its destination when that is not
// registered (hint says what to do), or is another customer's own
// (Destination.TakesEventsOf): an event stored there before publishing to
// one was checked is never sent again. As for a publish (takes), a caller
// limited to customers other than the owner (auth.OwnerHidden) is
// answered word for word as for a destination that is not registered,
// and learns neither that it exists nor whose it is. An event of no
// customer (a replay's probe of a destination, its filter naming none)
// is any customer's.
func (g *Gateway) sendableTo(ctx context.Context, ev *rivorav1.Event, hint string) error {
	id := ev.GetDestinationId()
	d, ok := g.reg.Get(id)
	if customer := ev.GetCustomerId(); ok && customer != "" && !d.TakesEventsOf(customer) {
		if !auth.OwnerHidden(ctx, d.OwnerCustomer) {
			return errkind.Errorf(errkind.Precondition, "destination %q is customer %q's own: it takes that customer's events only, not customer %q's, so they are not sent to it again", id, d.OwnerCustomer, customer)
		}
		ok = false
	}
	if !ok {
		return errkind.Errorf(errkind.Precondition, "destination %q is not registered; %s", id, hint)
	}
	return nil
}

// DeletedSubscription is the subscription that routed dl's event when it
// was deleted since ("" when it was not): Replayable's reason to refuse
// it, which a replay may choose to leave in the archive instead
// (deadletters: skip_deleted_subscriptions).
func (g *Gateway) DeletedSubscription(dl *rivorav1.DeadLetter) string {
	return g.deletedSubscription(dl.GetEvent())
}

// deletedSubscription is the subscription that routed ev when it was
// deleted, "" when ev was published to its destination or its
// subscription still exists. An event accepted under a config this agent
// has not applied yet may name a subscription it has not heard of: not
// taken for deleted (as the owner does not).
func (g *Gateway) deletedSubscription(ev *rivorav1.Event) string {
	sub := ev.GetSubscriptionId()
	if sub == "" || g.subs == nil || ev.GetConfigVersion() > g.configVersion() {
		return ""
	}
	if _, ok := g.subs.Get(sub); ok {
		return ""
	}
	return sub
}

// Resend accepts a delivered or dead-lettered event again for an
// operator (ResendEvent): it keeps its event id (the webhook-id receivers
// dedupe on), is marked resent (delivered with rivora-resend: 1), is
// accepted now and goes to the tail of its lane. dedupID is the caller's
// name for this resend (never the event id alone, so a resend is never
// taken for the original); a resend whose dedupID was stored within the
// dedup window is not stored again, and duplicate says so. It is refused,
// storing nothing, when the event is not Resendable.
func (g *Gateway) Resend(ctx context.Context, original *rivorav1.Event, dedupID string) (ev *rivorav1.Event, duplicate bool, err error) {
	n := g.count()
	if n == 0 {
		return nil, false, errNoConfig
	}
	if err := g.Resendable(ctx, original); err != nil {
		return nil, false, err
	}
	if err := g.roomForAny(); err != nil {
		return nil, false, err
	}
	ev = proto.Clone(original).(*rivorav1.Event)
	ev.Resent, ev.Replayed = true, false
	ev.AcceptedAt = timestamppb.New(g.now())
	ev.ConfigVersion = g.versionFor(max(ev.GetConfigVersion(), g.configVersion()), ev.GetDestinationId()) // as Reingest
	data, err := proto.Marshal(ev)
	if err != nil {
		return nil, false, fmt.Errorf("encode event %s: %w", ev.GetEventId(), err)
	}
	p := &prepared{partition: lanes.Partition(ev.GetDestinationId(), n), event: ev, data: data, msgID: dedupID}
	at, err := g.store(ctx, []*prepared{p})
	if err != nil {
		return nil, false, resendStoreError(ctx, err)
	}
	if at[0].Duplicate {
		return ev, true, nil
	}
	accepted.WithLabelValues("resent").Inc()
	return ev, false, nil
}

// ReplayDedupID is the dedup id of a dead letter re-ingested by a replay,
// or by a resend of it: the event id and the time it died, so the same
// dead letter sent again twice (a replay and a resend, or two of either)
// within the dedup window is stored once, and never taken for the original.
func ReplayDedupID(dl *rivorav1.DeadLetter) string {
	return fmt.Sprintf("replay:%s:%d", dl.GetEvent().GetEventId(), dl.GetDeadAt().AsTime().UnixNano())
}

// maxContentTypeLen bounds content_type.
const maxContentTypeLen = 256

// validateContentType accepts a media type as a header can carry it: a
// bad one (a control character, no type/subtype) could never be sent.
// The rule is the one Go's HTTP transports apply to a header value
// (httpguts), checked before mime.ParseMediaType, which lets controls
// through inside a quoted parameter.
func validateContentType(ct string) error {
	if len(ct) > maxContentTypeLen {
		return fmt.Errorf("content_type is %d bytes; the limit is %d", len(ct), maxContentTypeLen)
	}
	if !httpguts.ValidHeaderFieldValue(ct) {
		return errors.New("content_type must not contain control characters (CR, LF, NUL, DEL or any other below 0x20 but tab)")
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || !strings.Contains(mt, "/") {
		return fmt.Errorf("content_type %q is not a media type such as application/json", ct)
	}
	return nil
}
