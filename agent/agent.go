// Package agent is Rivora's sidecar. Its data path, one package per step:
//
//	natsd        embedded NATS JetStream: the durable home of every event
//	ingest       accept: validate, store durably, ack after the PubAck
//	             (into an owned partition's lanes, else tier 1 INGEST)
//	owner        tier 2: per partition, the single writer of its lanes
//	             (LANES_p) and ledger (LEDGER_p): move, rebuild, record
//	             what is done, hand dead letters to the archive
//	scheduler    which lane head goes next (budgets, fairness, retries)
//	budget       per-destination adaptive token buckets and health
//	delivery     one signed HTTP POST per attempt
//	retry        backoff, max attempts and the window
//	archive      tier 3: dead letters as NDJSON objects (directory or S3)
//	deadletters  list and replay the archive
//	history      per-event attempt outcomes for "where is my event?"
//	destinations the control plane's destinations, as delivery uses them
//
// The Agent follows the control plane (follow.go), opens the partitions it
// is assigned, and runs the delivery workers.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/archive"
	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/deadletters"
	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/history"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/lanes"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/agent/scheduler"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// Config configures an agent.
type Config struct {
	Name    string
	DataDir string
	// ControlPlaneURL is where the agent watches its configuration.
	ControlPlaneURL string
	// AdvertiseURL is this agent's API base URL, as the control plane
	// should call it.
	AdvertiseURL string
	// Workers is the number of concurrent delivery attempts.
	Workers     int
	NATSListen  string
	SyncAlways  bool
	MaxPayload  int
	DedupWindow time.Duration
	// Archive is where dead letters go (tier 3); nil means a local
	// directory, ArchiveDir (default DataDir/archive).
	Archive    archive.Archive
	ArchiveDir string
	Version    string
}

// DefaultWorkers is the default number of delivery workers.
const DefaultWorkers = 64

// Agent is one running sidecar.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	nats     *natsd.Server
	registry *destinations.Registry
	sched    *scheduler.Scheduler
	gateway  *ingest.Gateway
	history  *history.History
	sender   *delivery.Sender
	deps     owner.Deps

	deadLetters *deadletters.Service
	ready       atomic.Bool

	// partitionCount is the cell's partition count (0 until the first
	// config); owned holds the partitions this agent runs.
	partitionCount atomic.Int32
	mu             sync.Mutex
	owned          map[int]*ownedPartition
	wanted         map[int]bool // partitions the control plane assigned here
	openMu         sync.Mutex   // one partition opens at a time
	applied        atomic.Uint64
	// runCtx lives as long as Run: what outlives one Watch stream uses it.
	runCtx context.Context
}

type ownedPartition struct {
	part   *owner.Partition
	cancel context.CancelFunc
	done   chan struct{}
}

// New starts the embedded NATS server and creates the shared streams.
// Partitions open when the control plane assigns them (see Run).
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Agent, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.DedupWindow <= 0 {
		cfg.DedupWindow = ingest.DefaultDedupWindow
	}
	if cfg.ArchiveDir == "" {
		cfg.ArchiveDir = filepath.Join(cfg.DataDir, "archive")
	}
	base := log
	log = base.With("component", "agent", "agent", cfg.Name)
	a := &Agent{cfg: cfg, log: log, registry: destinations.NewRegistry(), sched: scheduler.New(clock.Real{}), owned: make(map[int]*ownedPartition), wanted: make(map[int]bool)}
	var err error
	if a.nats, err = natsd.Start(natsd.Config{DataDir: cfg.DataDir, ClientListen: cfg.NATSListen, SyncAlways: cfg.SyncAlways, Name: cfg.Name}, base.With("component", "nats")); err != nil {
		return nil, err
	}
	fail := func(err error) (*Agent, error) {
		a.nats.Shutdown()
		return nil, err
	}
	js := a.nats.JetStream()
	if a.gateway, err = ingest.New(ctx, js, a.registry, ingest.Config{MaxPayload: cfg.MaxPayload, DedupWindow: cfg.DedupWindow}, base.With("component", "ingest")); err != nil {
		return fail(err)
	}
	a.gateway.SetLocalStore(a)
	if a.history, err = history.New(ctx, js, history.DefaultRetention); err != nil {
		return fail(err)
	}
	arch := cfg.Archive
	if arch == nil {
		if arch, err = archive.NewDir(cfg.ArchiveDir); err != nil {
			return fail(err)
		}
	}
	if a.deadLetters, err = deadletters.New(ctx, js, arch, a.gateway, base.With("component", "deadletters")); err != nil {
		return fail(err)
	}
	a.sender = delivery.NewSender(fmt.Sprintf("rivora/%s (%s)", cfg.Version, cfg.Name))
	a.deps = owner.Deps{
		JS: js, Scheduler: a.sched, Registry: a.registry, History: a.history, Archive: arch,
		Clock: clock.Real{}, Log: base.With("component", "owner"), DedupWindow: cfg.DedupWindow,
	}
	if err := registerMetrics(a.sched); err != nil {
		return fail(err)
	}
	return a, nil
}

// Run follows the control plane and delivers until ctx ends, then drains:
// no new attempt starts, attempts in flight finish (bounded by their
// timeouts), the partitions flush, and the embedded server stops.
func (a *Agent) Run(ctx context.Context) error {
	a.runCtx = ctx
	var workWG sync.WaitGroup
	workWG.Add(1)
	go func() {
		defer workWG.Done()
		_ = a.sched.Run(ctx)
	}()
	for range a.cfg.Workers {
		workWG.Add(1)
		go func() {
			defer workWG.Done()
			a.work(ctx)
		}()
	}
	followDone := make(chan struct{})
	go func() {
		defer close(followDone)
		a.follow(ctx)
	}()
	a.log.Info("agent running", "workers", a.cfg.Workers, "controlplane", a.cfg.ControlPlaneURL)
	<-ctx.Done()
	a.ready.Store(false)
	a.log.Info("draining: waiting for attempts in flight")
	<-followDone
	workWG.Wait()
	a.mu.Lock()
	a.wanted = map[int]bool{}
	for p := range a.owned {
		a.releaseLocked(p)
	}
	a.mu.Unlock()
	// Wait for an open in progress (it sees nothing is wanted any more).
	a.openMu.Lock()
	a.nats.Shutdown()
	a.openMu.Unlock()
	a.log.Info("agent stopped")
	return nil
}

// own opens and starts a partition this agent was assigned, unless it
// runs already or is no longer assigned. Opens are serialised (openMu); the
// rebuild runs without holding a.mu, so delivery and ingest for other
// partitions go on meanwhile.
func (a *Agent) own(ctx context.Context, p int) error {
	a.openMu.Lock()
	defer a.openMu.Unlock()
	a.mu.Lock()
	_, running := a.owned[p]
	wanted := a.wanted[p]
	a.mu.Unlock()
	if running || !wanted {
		return nil
	}
	part, err := owner.Open(ctx, p, a.deps)
	if err != nil {
		a.sched.DropPartition(p)
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.wanted[p] {
		// Released while it was rebuilding.
		a.sched.DropPartition(p)
		return nil
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	op := &ownedPartition{part: part, cancel: cancel, done: make(chan struct{})}
	a.owned[p] = op
	go func() {
		err := part.Run(pctx)
		close(op.done)
		if err != nil && pctx.Err() == nil {
			// A write failed: rebuild the partition from its store.
			a.log.Error("partition failed; reopening it", "partition", p, "error", err)
			a.reopen(a.runCtx, p, op)
		}
	}()
	return nil
}

// reopen replaces a failed partition with a fresh one rebuilt from the
// store, unless it was released meanwhile.
func (a *Agent) reopen(ctx context.Context, p int, failed *ownedPartition) {
	a.mu.Lock()
	if a.owned[p] != failed {
		a.mu.Unlock()
		return
	}
	a.sched.DropPartition(p)
	failed.cancel()
	delete(a.owned, p)
	a.mu.Unlock()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := a.own(ctx, p)
		if err == nil {
			return
		}
		a.log.Error("reopen partition", "partition", p, "error", err, "retry_in", backoff)
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, 10*time.Second)
		case <-ctx.Done():
		}
	}
}

// releaseLocked stops a partition and forgets its lanes.
func (a *Agent) releaseLocked(p int) {
	op, ok := a.owned[p]
	if !ok {
		return
	}
	a.sched.DropPartition(p)
	op.cancel()
	<-op.done
	delete(a.owned, p)
}

func (a *Agent) partition(p int) *owner.Partition {
	a.mu.Lock()
	defer a.mu.Unlock()
	if op, ok := a.owned[p]; ok {
		return op.part
	}
	return nil
}

// work is one delivery worker.
func (a *Agent) work(ctx context.Context) {
	for {
		var att *scheduler.Attempt
		select {
		case att = <-a.sched.Attempts():
		case <-ctx.Done():
			return
		}
		// An attempt that started finishes even while draining.
		a.attempt(context.WithoutCancel(ctx), att)
	}
}

func (a *Agent) attempt(ctx context.Context, att *scheduler.Attempt) {
	part := a.partition(att.Lane.Partition)
	if part == nil {
		// Its partition is still opening (the rebuild registers lanes
		// before the partition is installed), or was just released: try
		// again shortly rather than spin.
		head := att.Head
		head.NotBefore = time.Now().Add(100 * time.Millisecond)
		a.sched.Retry(att, head)
		return
	}
	ev, err := part.Load(ctx, att)
	if err != nil {
		part.Skip(att, err)
		return
	}
	dest, ok := a.registry.Get(ev.GetDestinationId())
	if !ok {
		// Deleted (with --force) while this attempt was out: archive it like
		// the rest of the destination's pending events.
		part.Abandon(ctx, att, ev, rivorav1.DeadReason_DEAD_REASON_DELETED)
		return
	}
	if dest.Paused {
		// Picked just before the pause arrived: not sent. The lane waits,
		// unchanged, with the rest of the destination.
		a.sched.Release(att)
		return
	}
	endpoint, err := a.registry.Endpoint(dest.ID, ev.GetCustomerId())
	if err != nil {
		head := att.Head
		head.NotBefore = time.Now().Add(time.Second)
		a.sched.Retry(att, head)
		return
	}
	res := a.sender.Send(ctx, delivery.Request{Endpoint: endpoint, Event: ev, Attempt: att.Number, Timeout: dest.Timeout})
	part.Complete(ctx, att, ev, res)
}

// Ready reports whether the agent is serving.
func (a *Agent) Ready() bool { return a.ready.Load() }

// Handle registers the agent's Connect services (ingest, events,
// partitions) on mux.
func (a *Agent) Handle(mux *http.ServeMux, opts ...connect.HandlerOption) {
	// Ingest answers are event ids: compressing them costs more than it
	// saves on the networks agents sit on.
	ingestOpts := append([]connect.HandlerOption{connect.WithCompressMinBytes(1 << 20)}, opts...)
	mux.Handle(rivorav1connect.NewIngestServiceHandler(a.gateway, ingestOpts...))
	mux.Handle(rivorav1connect.NewEventServiceHandler(&eventService{a: a}, opts...))
	mux.Handle(rivorav1connect.NewPartitionServiceHandler(&partitionService{a: a}, opts...))
	mux.Handle(rivorav1connect.NewArchiveServiceHandler(a.deadLetters, opts...))
}

// applyDestinations installs changed destinations in the registry and the
// scheduler, in place: nothing pending moves.
func (a *Agent) applyDestinations(changed []*rivorav1.Destination, removed []string, snapshot bool) error {
	var dests []*destinations.Destination
	var err error
	if snapshot {
		dests, err = a.registry.Replace(changed)
	} else {
		dests, err = a.registry.Update(changed, removed)
	}
	if err != nil {
		return err
	}
	n := int(a.partitionCount.Load())
	for _, d := range dests {
		p := lanes.Partition(d.ID, n)
		a.sched.SetLimits(d.ID, p, d.Limits)
		a.sched.SetClass(d.ID, p, d.Class)
		a.sched.SetWeights(d.ID, p, d.Weights)
		a.sched.SetPaused(d.ID, p, d.Paused)
	}
	return nil
}

// Pending is the number of events of a destination not yet delivered or
// dead-lettered.
func (a *Agent) Pending(_ context.Context, destinationID string) (int64, error) {
	return int64(a.sched.Pending(destinationID)), nil
}

// ArchivePending dead-letters a destination's pending events (reason
// "deleted") and returns how many.
func (a *Agent) ArchivePending(ctx context.Context, destinationID string) (int64, error) {
	n := int(a.partitionCount.Load())
	if n == 0 {
		return 0, nil
	}
	part := a.partition(lanes.Partition(destinationID, n))
	if part == nil {
		return 0, nil
	}
	archived, err := part.ArchiveDestination(ctx, destinationID)
	return int64(archived), err
}

// Health reports destinations' budgets and backlogs ("" = all).
func (a *Agent) Health(_ context.Context, destinationID string) ([]*rivorav1.DestinationHealth, error) {
	var out []*rivorav1.DestinationHealth
	for _, snap := range a.sched.Snapshot(destinationID) {
		if !snap.Configured && snap.Pending == 0 {
			continue
		}
		h := healthToProto(snap)
		n := int(a.partitionCount.Load())
		if n > 0 {
			if part := a.partition(lanes.Partition(snap.ID, n)); part != nil {
				h.UnarchivedDeadLetters = int64(part.Unarchived(snap.ID))
			}
		}
		out = append(out, h)
	}
	return out, nil
}

func healthToProto(s scheduler.DestinationSnapshot) *rivorav1.DestinationHealth {
	h := &rivorav1.DestinationHealth{
		DestinationId:  s.ID,
		State:          s.State.String(),
		ConfiguredRate: s.ConfiguredRate,
		CurrentRate:    s.CurrentRate,
		Tokens:         s.Tokens,
		InFlight:       int32(s.InFlight),
		MaxInFlight:    int32(s.MaxInFlight),
		PendingEvents:  int64(s.Pending),
		PriorityClass:  destinations.ClassToProto(s.Class),
	}
	if !s.Configured {
		h.State = "unconfigured"
	}
	for _, c := range s.Customers {
		h.Customers = append(h.Customers, &rivorav1.CustomerBacklog{
			CustomerId: c.ID, Weight: c.Weight, DueLanes: int64(c.DueLanes), WaitingLanes: int64(c.WaitingLanes),
			InFlight: int64(c.InFlight), PendingEvents: int64(c.Pending),
		})
	}
	for _, st := range s.LastStatuses {
		h.LastStatuses = append(h.LastStatuses, int32(st))
	}
	if t := s.LastTransition; t != nil {
		h.LastTransition = &rivorav1.HealthTransition{At: timestamppb.New(t.At), From: t.From.String(), To: t.To.String(), Cause: t.Cause}
	}
	if !s.HoldUntil.IsZero() && s.HoldUntil.After(time.Now()) {
		h.HoldUntil = timestamppb.New(s.HoldUntil)
	}
	return h
}

var errNotFound = errors.New("not found")
