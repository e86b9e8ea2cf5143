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
	"strings"
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
	"github.com/rivora/rivora/agent/ownership"
	"github.com/rivora/rivora/agent/scheduler"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// Config configures an agent.
type Config struct {
	Name    string
	DataDir string
	// ControlPlaneURL is where the agent watches its configuration; with
	// several control planes, their URLs comma-separated (the agent
	// follows whichever leads).
	ControlPlaneURL string
	// AdvertiseURL is this agent's API base URL, as the control plane
	// should call it.
	AdvertiseURL string
	// Workers is the number of concurrent delivery attempts.
	Workers    int
	NATSListen string
	// NATSCluster (host:port) and NATSRoutes (nats://host:port, …) join
	// the embedded server to the cell's JetStream cluster.
	NATSCluster string
	NATSRoutes  []string
	// Replicas is the stream replica count; 0 means min(3, cell size),
	// the cell size being this agent plus its distinct routes.
	Replicas int
	// ConsulURL, when set, takes partition ownership from Consul sessions
	// and locks; otherwise ownership is in process (one agent).
	ConsulURL string
	// SessionTTL and LockDelay tune the Consul session (defaults 10s, 5s).
	SessionTTL  time.Duration
	LockDelay   time.Duration
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
	locker   ownership.Locker

	deadLetters *deadletters.Service
	ready       atomic.Bool

	// partitionCount is the cell's partition count (0 until the first
	// config); owned holds the partitions this agent runs.
	partitionCount atomic.Int32
	mu             sync.Mutex
	owned          map[int]*ownedPartition
	wanted         map[int]bool // partitions the control plane assigned here
	releasing      map[int]chan struct{}
	opening        map[int]*ownership.Lease // locked, still opening
	openMu         sync.Mutex               // one partition opens at a time
	applied        atomic.Uint64
	// controlPlaneIndex picks the followed control plane among several.
	controlPlaneIndex atomic.Uint32
	// wakeLock and wakeOpen ask lockLoop and openLoop to look again;
	// ownedChanged asks the reporter to tell the control plane.
	wakeLock     chan struct{}
	wakeOpen     chan struct{}
	ownedChanged chan struct{}
}

type ownedPartition struct {
	part   *owner.Partition
	lease  *ownership.Lease
	cancel context.CancelFunc
	done   chan struct{}

	// inFlight counts attempts between their last ownership check and
	// their recorded outcome; a graceful handoff waits for them.
	inFlight sync.WaitGroup
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
	if cfg.Replicas <= 0 {
		cfg.Replicas = natsd.Replicas(cellSize(cfg.NATSCluster, cfg.NATSRoutes))
	}
	a := &Agent{
		cfg: cfg, log: log, registry: destinations.NewRegistry(), sched: scheduler.New(clock.Real{}),
		owned: make(map[int]*ownedPartition), wanted: make(map[int]bool), releasing: make(map[int]chan struct{}), opening: make(map[int]*ownership.Lease),
		wakeLock: make(chan struct{}, 1), wakeOpen: make(chan struct{}, 1), ownedChanged: make(chan struct{}, 1),
	}
	var err error
	if a.nats, err = natsd.Start(natsd.Config{
		DataDir: cfg.DataDir, ClientListen: cfg.NATSListen, SyncAlways: cfg.SyncAlways, Name: cfg.Name,
		ClusterListen: cfg.NATSCluster, Routes: cfg.NATSRoutes,
	}, base.With("component", "nats")); err != nil {
		return nil, err
	}
	fail := func(err error) (*Agent, error) {
		if a.locker != nil {
			closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = a.locker.Close(closeCtx)
			cancel()
		}
		a.nats.Shutdown()
		return nil, err
	}
	if cfg.ConsulURL != "" {
		if a.locker, err = ownership.NewConsul(ctx, ownership.ConsulConfig{URL: cfg.ConsulURL, Agent: cfg.Name, TTL: cfg.SessionTTL, LockDelay: cfg.LockDelay}, base.With("component", "ownership")); err != nil {
			return fail(err)
		}
	} else {
		a.locker = ownership.NewLocal()
	}
	js := a.nats.JetStream()
	// In a fresh cell, creating a replicated stream can time out while its
	// peers catch up with the cluster: retry for a while.
	create := func(what string, fn func() error) error {
		if cfg.NATSCluster == "" {
			return fn()
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			err := fn()
			if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
				return err
			}
			log.Info("creating a replicated stream; retrying", "stream", what, "error", err)
			time.Sleep(500 * time.Millisecond)
		}
	}
	if err := create("INGEST", func() (err error) {
		a.gateway, err = ingest.New(ctx, js, a.registry, ingest.Config{MaxPayload: cfg.MaxPayload, DedupWindow: cfg.DedupWindow, Replicas: cfg.Replicas}, base.With("component", "ingest"))
		return err
	}); err != nil {
		return fail(err)
	}
	a.gateway.SetLocalStore(a)
	if err := create("EVENTS", func() (err error) {
		a.history, err = history.New(ctx, js, history.DefaultRetention, cfg.Replicas)
		return err
	}); err != nil {
		return fail(err)
	}
	arch := cfg.Archive
	if arch == nil {
		if arch, err = archive.NewDir(cfg.ArchiveDir); err != nil {
			return fail(err)
		}
	}
	if err := create(deadletters.CheckpointBucket, func() (err error) {
		a.deadLetters, err = deadletters.New(ctx, js, arch, a.gateway, cfg.Replicas, base.With("component", "deadletters"))
		return err
	}); err != nil {
		return fail(err)
	}
	a.sender = delivery.NewSender(fmt.Sprintf("rivora/%s (%s)", cfg.Version, cfg.Name))
	a.deps = owner.Deps{
		JS: js, Scheduler: a.sched, Registry: a.registry, History: a.history, Archive: arch,
		Clock: clock.Real{}, Log: base.With("component", "owner"), DedupWindow: cfg.DedupWindow, Replicas: cfg.Replicas,
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
	ownDone := make(chan struct{})
	go func() {
		defer close(ownDone)
		var wg sync.WaitGroup
		wg.Go(func() { a.lockLoop(ctx) })
		wg.Go(func() { a.openLoop(ctx) })
		wg.Wait()
	}()
	go a.reportOwned(ctx)
	a.log.Info("agent running", "workers", a.cfg.Workers, "controlplane", a.controlPlaneURL())
	<-ctx.Done()
	a.ready.Store(false)
	a.log.Info("draining: waiting for attempts in flight")
	<-followDone
	<-ownDone
	workWG.Wait()
	a.mu.Lock()
	a.wanted = map[int]bool{}
	var handoffs []<-chan struct{}
	for p := range a.owned {
		handoffs = append(handoffs, a.releaseLocked(p))
	}
	for _, done := range a.releasing {
		handoffs = append(handoffs, done)
	}
	a.mu.Unlock()
	for _, done := range handoffs {
		<-done
	}
	// Wait for an open in progress (it sees nothing is wanted any more).
	a.openMu.Lock()
	closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := a.locker.Close(closeCtx); err != nil {
		a.log.Warn("release ownership", "error", err)
	}
	cancel()
	a.nats.Shutdown()
	a.openMu.Unlock()
	a.log.Info("agent stopped")
	return nil
}

// open opens and starts partition p, whose lock this agent holds (taken
// by lockLoop, kept in a.opening), unless it runs already or is no longer
// assigned. It makes one attempt: in a cell that just lost an agent, the
// partition's streams answer only once their replicas have elected a new
// leader, and openLoop tries again shortly, still holding the lock. Opens
// are serialised (openMu); the rebuild runs without holding a.mu, so
// delivery and ingest for other partitions go on meanwhile.
func (a *Agent) open(ctx context.Context, p int) error {
	a.openMu.Lock()
	defer a.openMu.Unlock()
	a.mu.Lock()
	_, running := a.owned[p]
	lease := a.opening[p]
	a.mu.Unlock()
	if running || lease == nil {
		return nil
	}
	part, err := owner.Open(ctx, p, a.deps, lease)
	if err != nil {
		a.sched.DropPartition(p)
		a.mu.Lock()
		wanted := a.wanted[p]
		a.mu.Unlock()
		if !wanted || !lease.Valid() || errors.Is(err, owner.ErrFenced) {
			a.giveUp(p, lease)
		}
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.opening[p] == lease {
		delete(a.opening, p)
	}
	if !a.wanted[p] || !lease.Valid() {
		// Released or lost while it was rebuilding.
		part.Detach()
		go a.releaseLease(lease)
		a.signalOwned()
		return nil
	}
	a.configurePartition(p)
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	op := &ownedPartition{part: part, lease: lease, cancel: cancel, done: make(chan struct{})}
	a.owned[p] = op
	a.log.Info("partition owned", "partition", p, "epoch", lease.Epoch)
	a.signalOwned()
	go func() {
		err := part.Run(pctx)
		close(op.done)
		switch {
		case err == nil || pctx.Err() != nil:
		case errors.Is(err, owner.ErrFenced):
			// Lost: stop at once; nothing more is written or sent here.
			a.log.Warn("partition ownership lost; stopped", "partition", p, "error", err)
			a.drop(p, op)
		default:
			// A write failed: rebuild the partition from its store.
			a.log.Error("partition failed; reopening it", "partition", p, "error", err)
			a.reopen(p, op)
		}
	}()
	return nil
}

// giveUp releases the lock of a partition that will not open here.
func (a *Agent) giveUp(p int, lease *ownership.Lease) {
	a.mu.Lock()
	if a.opening[p] == lease {
		delete(a.opening, p)
	}
	a.mu.Unlock()
	a.releaseLease(lease)
	a.signalOwned()
}

// acquire takes partition p's lock, unless this agent holds it already
// (acquired, still opening: a.opening).
func (a *Agent) acquire(ctx context.Context, p int) (*ownership.Lease, error) {
	a.mu.Lock()
	if lease := a.opening[p]; lease != nil && lease.Valid() {
		a.mu.Unlock()
		return lease, nil
	}
	_, running := a.owned[p]
	a.mu.Unlock()
	if running {
		return nil, errRunning
	}
	// The locker refuses a second lease on a partition this agent holds
	// (running, or still handing off): ErrHeld.
	lease, err := a.locker.TryAcquire(ctx, p)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.opening[p] = lease
	a.mu.Unlock()
	a.signalOwned()
	return lease, nil
}

// releaseUnwanted gives back locks acquired for partitions that were
// unassigned before they opened.
func (a *Agent) releaseUnwanted() {
	a.mu.Lock()
	var stale []*ownership.Lease
	for p, lease := range a.opening {
		if !a.wanted[p] || !lease.Valid() {
			stale = append(stale, lease)
			delete(a.opening, p)
		}
	}
	a.mu.Unlock()
	for _, lease := range stale {
		a.releaseLease(lease)
	}
	if len(stale) > 0 {
		a.signalOwned()
	}
}

func (a *Agent) releaseLease(lease *ownership.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := lease.Release(ctx); err != nil {
		a.log.Warn("release partition lock", "partition", lease.P, "error", err)
	}
}

// drop forgets a partition whose ownership was lost, and lets the
// ownership loop try to get it back if it is still assigned here.
func (a *Agent) drop(p int, lost *ownedPartition) {
	a.mu.Lock()
	if a.owned[p] == lost {
		lost.part.Detach()
		lost.cancel()
		delete(a.owned, p)
	}
	a.mu.Unlock()
	a.signalOwned()
	a.wakeOwnLoop()
}

// reopen replaces a failed partition with a fresh one rebuilt from the
// store, under the same lock, unless it was released meanwhile.
func (a *Agent) reopen(p int, failed *ownedPartition) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.owned[p] != failed {
		return
	}
	failed.part.Detach()
	failed.cancel()
	delete(a.owned, p)
	if failed.lease.Valid() {
		a.opening[p] = failed.lease
	}
	a.wakeOwnLoop()
}

// handoffWait bounds how long a graceful handoff waits for attempts in
// flight; after it the lock is released anyway and their outcomes are not
// recorded (the new owner sends those events again).
const handoffWait = 15 * time.Second

// releaseLocked starts a graceful handoff of partition p (see handoff).
// Until it ends, p is not opened again here.
func (a *Agent) releaseLocked(p int) (done <-chan struct{}) {
	op, ok := a.owned[p]
	if !ok {
		return nil
	}
	op.part.Detach()
	delete(a.owned, p)
	released := make(chan struct{})
	a.releasing[p] = released
	go func() {
		a.handoff(p, op)
		a.mu.Lock()
		delete(a.releasing, p)
		a.mu.Unlock()
		close(released)
		a.wakeOwnLoop()
	}()
	return released
}

// handoff: no new attempt starts (the scheduler dropped the partition),
// attempts in flight finish, the partition flushes, and the lock is
// released; the next owner rebuilds from the stream.
func (a *Agent) handoff(p int, op *ownedPartition) {
	drained := make(chan struct{})
	go func() {
		op.inFlight.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(handoffWait):
		a.log.Warn("handoff: attempts still in flight; releasing anyway", "partition", p)
	}
	op.cancel()
	<-op.done
	a.releaseLease(op.lease)
	a.signalOwned()
}

func (a *Agent) partition(p int) *owner.Partition {
	a.mu.Lock()
	defer a.mu.Unlock()
	if op, ok := a.owned[p]; ok {
		return op.part
	}
	return nil
}

// ownedPartitionOf returns a running partition and counts an attempt in
// flight on it (call done after its outcome is recorded).
func (a *Agent) ownedPartitionOf(p int) (*ownedPartition, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	op, ok := a.owned[p]
	if !ok {
		return nil, false
	}
	op.inFlight.Add(1)
	return op, true
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
	op, ok := a.ownedPartitionOf(att.Lane.Partition)
	if !ok {
		// Its partition is still opening (the rebuild registers lanes
		// before the partition is installed), or was just released: try
		// again shortly rather than spin.
		head := att.Head
		head.NotBefore = time.Now().Add(100 * time.Millisecond)
		a.sched.Retry(att, head)
		return
	}
	defer op.inFlight.Done()
	part := op.part
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
	if !part.Owned() {
		// Fenced: the lease lapsed (the partition is stopping). Another
		// agent delivers it now.
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
	for _, d := range dests {
		a.configure(d)
	}
	return nil
}

// configure gives the scheduler a destination's limits, class, weights
// and pause state.
func (a *Agent) configure(d *destinations.Destination) {
	p := lanes.Partition(d.ID, int(a.partitionCount.Load()))
	a.sched.SetLimits(d.ID, p, d.Limits)
	a.sched.SetClass(d.ID, p, d.Class)
	a.sched.SetWeights(d.ID, p, d.Weights)
	a.sched.SetPaused(d.ID, p, d.Paused)
}

// configurePartition configures again the destinations of partition p
// (dropping a partition from the scheduler forgets them).
func (a *Agent) configurePartition(p int) {
	n := int(a.partitionCount.Load())
	for _, d := range a.registry.All() {
		if lanes.Partition(d.ID, n) == p {
			a.configure(d)
		}
	}
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

// errRunning: the partition opened meanwhile; nothing to acquire.
var errRunning = errors.New("partition already running here")

// cellSize is this agent plus its distinct routes to others.
func cellSize(clusterListen string, routes []string) int {
	if clusterListen == "" {
		return 1
	}
	others := make(map[string]bool)
	for _, r := range routes {
		if host := strings.TrimPrefix(r, "nats://"); host != clusterListen {
			others[host] = true
		}
	}
	return 1 + len(others)
}
