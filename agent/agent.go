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
//	history      attempt outcomes and delivered events, by minute, for
//	             events get, list and resend
//	destinations the control plane's destinations, as delivery uses them
//
// The Agent wires them together: it follows the control plane (follow.go),
// keeps the lifecycle of the partitions it is assigned (lifecycle.go
// decides, the loops of own.go lock, open, run and hand them off), and runs
// the delivery workers.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/archive"
	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/deadletters"
	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/history"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/agent/ownership"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/bounds"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/internal/ssrf"
	"github.com/rivora/rivora/internal/tlsconf"
	"github.com/rivora/rivora/lanes"
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
	// NATSPassword ("" = none) is required of every client and route of
	// the embedded NATS server (natsd.Config.Password); NATSTLS, with a
	// certificate, serves its client port over TLS and its routes over
	// mutual TLS.
	NATSPassword string
	NATSTLS      tlsconf.Files
	// Replicas is the stream replica count; 0 means min(3, cell size),
	// the cell size being this agent plus its distinct routes.
	Replicas int
	// ConsulURL, when set, takes partition ownership from Consul sessions
	// and locks; otherwise ownership is in process (one agent).
	ConsulURL string
	// SessionTTL and LockDelay tune the Consul session (defaults 10s, 5s).
	SessionTTL time.Duration
	LockDelay  time.Duration
	SyncAlways bool
	MaxPayload int
	// MaxBatch and MaxBatchBytes bound one PublishBatch: its events, and
	// its request in bytes after decompression (ingest defaults when 0).
	MaxBatch      int
	MaxBatchBytes int
	DedupWindow   time.Duration
	// HistoryRetention is how long events' outcomes and delivered events
	// are kept for events get/list/resend (history.DefaultRetention when 0).
	HistoryRetention time.Duration
	// Archive is where dead letters go (tier 3); nil means a local
	// directory, ArchiveDir (default DataDir/archive).
	Archive    archive.Archive
	ArchiveDir string
	Version    string
	// Keys (required) are what every call is checked against: the cell
	// token, and the API tokens the control plane's feed brings.
	Keys *auth.Keys
	// Transport carries the agent's calls to the control plane (nil =
	// http.DefaultTransport), e.g. with the cell's CA for TLS.
	Transport http.RoundTripper
	// Guard is what every delivery connection passes, on the address it
	// dials (--allow-destination-cidr); nil denies by default (loopback,
	// private ranges, metadata, …) and allows nothing more.
	Guard *ssrf.Guard
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
	worker   owner.Worker
	deps     owner.Deps
	locker   ownership.Locker

	deadLetters *deadletters.Service
	ready       atomic.Bool

	// partitionCount is the cell's partition count (0 until the first
	// config).
	partitionCount atomic.Int32
	// parts is the lifecycle of the partitions assigned here (lifecycle.go);
	// lockLoop, openLoop, the partitions' run goroutines and their handoffs
	// act on its decisions (own.go).
	parts *partitions
	// running holds the partitions' run goroutines and handoffs: Run waits
	// for them before it closes the locker.
	running sync.WaitGroup
	applied atomic.Uint64
	// gone holds the destinations stopped here after a 410 (gone.go).
	gone *goneHolds
	// controlPlaneIndex picks the followed control plane among several.
	controlPlaneIndex atomic.Uint32
}

// New starts the embedded NATS server and creates the shared streams.
// Partitions open when the control plane assigns them (see Run).
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Agent, error) {
	if cfg.Keys == nil {
		return nil, errors.New("agent: no keys (Config.Keys): the cell token and API tokens every call is checked against are required")
	}
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
		cfg: cfg, log: log, registry: destinations.NewRegistry(), sched: scheduler.New(clock.Real{}), parts: newPartitions(),
		gone: newGoneHolds(),
	}
	var err error
	if a.nats, err = natsd.Start(natsd.Config{
		DataDir: cfg.DataDir, ClientListen: cfg.NATSListen, SyncAlways: cfg.SyncAlways, Name: cfg.Name,
		ClusterListen: cfg.NATSCluster, Routes: cfg.NATSRoutes, Password: cfg.NATSPassword, TLS: cfg.NATSTLS,
	}, base.With("component", "nats")); err != nil {
		return nil, err
	}
	fail := func(err error) (*Agent, error) {
		if a.history != nil {
			a.history.Close()
		}
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
		a.gateway, err = ingest.New(ctx, js, a.registry, ingest.Config{MaxPayload: cfg.MaxPayload, MaxBatch: cfg.MaxBatch, MaxBatchBytes: cfg.MaxBatchBytes, DedupWindow: cfg.DedupWindow, Replicas: cfg.Replicas}, base.With("component", "ingest"))
		return err
	}); err != nil {
		return fail(err)
	}
	a.gateway.SetLocalStore(a)
	if err := create(history.Stream, func() (err error) {
		a.history, err = history.New(ctx, js, history.Config{Retention: cfg.HistoryRetention, Replicas: cfg.Replicas}, base.With("component", "history"))
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
		if err == nil {
			a.deadLetters.SetAuditor(func(ctx context.Context, e *rivorav1.AuditEntry) error {
				return a.recordAudit(ctx, auditAuthor(ctx, e))
			})
		}
		return err
	}); err != nil {
		return fail(err)
	}
	a.worker = owner.Worker{
		Scheduler: a.sched, Sender: delivery.NewSender(fmt.Sprintf("rivora/%s (%s)", cfg.Version, cfg.Name), cfg.Guard),
		Clock: clock.Real{}, Log: base.With("component", "delivery"), Disable: a.disableHere,
	}
	base.Info("deliveries pass the SSRF guard", "component", "delivery", "guard", cfg.Guard.String())
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
// timeouts), the partitions flush and hand their locks back, and the
// embedded server stops. Every goroutine it starts has ended when it
// returns.
func (a *Agent) Run(ctx context.Context) error {
	var work, loops sync.WaitGroup
	work.Go(func() { _ = a.sched.Run(ctx) })
	for range a.cfg.Workers {
		work.Go(func() { a.work(ctx) })
	}
	loops.Go(func() { a.follow(ctx) })
	loops.Go(func() { a.lockLoop(ctx) })
	loops.Go(func() { a.openLoop(ctx) })
	loops.Go(func() { a.reportOwned(ctx) })
	loops.Go(func() { a.reportGone(ctx) })
	a.log.Info("agent running", "workers", a.cfg.Workers, "controlplane", a.controlPlaneURL())
	<-ctx.Done()
	a.ready.Store(false)
	a.log.Info("draining: waiting for attempts in flight")
	loops.Wait()
	work.Wait()
	for _, run := range a.parts.stop() {
		a.handOff(run)
	}
	a.running.Wait()
	a.history.Close() // the last records recorded, before the server stops
	closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := a.locker.Close(closeCtx); err != nil {
		a.log.Warn("release ownership", "error", err)
	}
	cancel()
	a.nats.Shutdown()
	a.log.Info("agent stopped")
	return nil
}

// partition returns partition p while it runs here, else nil.
func (a *Agent) partition(p int) *owner.Partition {
	if run := a.parts.run(p); run != nil {
		return run.part
	}
	return nil
}

// Ready reports whether the agent is serving.
func (a *Agent) Ready() bool { return a.ready.Load() }

// Healthy is what /healthz answers: nil while the agent serves with
// every partition assigned here running, else why not — starting or
// draining, or which partitions are broken (they restart by themselves:
// healthy again once they run).
func (a *Agent) Healthy() error {
	if !a.ready.Load() {
		return errors.New("starting or draining")
	}
	if broken := a.parts.broken(); len(broken) > 0 {
		return fmt.Errorf("%d partition(s) broken: %s", len(broken), strings.Join(broken, "; "))
	}
	return nil
}

// Services are the services Handle registers, by full name.
var Services = []string{
	rivorav1connect.IngestServiceName, rivorav1connect.EventServiceName, rivorav1connect.LaneServiceName,
	rivorav1connect.PartitionServiceName, rivorav1connect.ArchiveServiceName,
}

// Handle registers the agent's Connect services (ingest, events, lanes,
// partitions, archive) on mux, each behind the auth interceptor: every
// call is checked against auth.Policies with the agent's keys. Handlers
// return domain errors tagged with a kind (internal/errkind); the
// outermost interceptor turns them into Connect codes. Every
// request is bounded (internal/bounds): its strings, and Publish to one event of
// MaxPayload, PublishBatch to the batch limits, the rest to
// bounds.DefaultMessage, after decompression and on the wire.
func (a *Agent) Handle(mux *http.ServeMux, opts ...connect.HandlerOption) {
	opts = append([]connect.HandlerOption{connect.WithInterceptors(errkind.Interceptor(), auth.NewInterceptor(a.cfg.Keys), bounds.Interceptor())}, opts...)
	// Ingest answers are event ids: compressing them costs more than it
	// saves on the networks agents sit on.
	ingestOpts := append([]connect.HandlerOption{connect.WithCompressMinBytes(1 << 20)}, opts...)
	publish, batch := a.gateway.RequestLimits()
	path, batchHandler := rivorav1connect.NewIngestServiceHandler(a.gateway, slices.Concat(ingestOpts, []connect.HandlerOption{bounds.ReadMax(batch)})...)
	_, publishHandler := rivorav1connect.NewIngestServiceHandler(a.gateway, slices.Concat(ingestOpts, []connect.HandlerOption{bounds.ReadMax(publish)})...)
	// The door checks the caller from the headers, before a body is read.
	guarded := func(limit int, h http.Handler) http.Handler {
		return auth.Door(a.cfg.Keys, nil, bounds.Handler(limit, h))
	}
	mux.Handle(path, guarded(batch, batchHandler))
	mux.Handle(rivorav1connect.IngestServicePublishProcedure, guarded(publish, publishHandler))
	opts = append(opts, bounds.ReadMax(bounds.DefaultMessage))
	handle := func(path string, h http.Handler) { mux.Handle(path, guarded(bounds.DefaultMessage, h)) }
	handle(rivorav1connect.NewEventServiceHandler(&eventService{a: a}, opts...))
	handle(rivorav1connect.NewLaneServiceHandler(&laneService{a: a}, opts...))
	handle(rivorav1connect.NewPartitionServiceHandler(&partitionService{a: a}, opts...))
	handle(rivorav1connect.NewArchiveServiceHandler(a.deadLetters, opts...))
}

// applyDestinations installs changed destinations in the registry and the
// scheduler, in place: nothing pending moves.
func (a *Agent) applyDestinations(changed []*rivorav1.Destination, removed []string, snapshot bool) error {
	var dests []*destinations.Destination
	var err error
	before := a.registry.All()
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
	for _, d := range before {
		if _, ok := a.registry.Get(d.ID); !ok {
			a.forgetDestination(d.ID)
		}
	}
	return nil
}

// forgetDestination forgets a deleted destination everywhere the agent
// keeps something of it: the scheduler (budget, rate history, weights,
// lanes: so health and the console no longer show it), a 410 hold, the
// partition's dead-letter counts and every metric series labelled with
// it. Called when the config that deletes it is applied, before the
// agent reports that version applied.
func (a *Agent) forgetDestination(id string) {
	a.sched.ForgetDestination(id)
	a.gone.forget(id)
	owner.ForgetDestinationMetrics(id)
	if n := int(a.partitionCount.Load()); n > 0 {
		if part := a.partition(lanes.Partition(id, n)); part != nil {
			part.ForgetDestination(id)
		}
	}
}

// configure gives the scheduler a destination's limits, class, weights
// and pause state.
func (a *Agent) configure(d *destinations.Destination) {
	p := lanes.Partition(d.ID, int(a.partitionCount.Load()))
	a.sched.SetLimits(d.ID, p, d.Limits)
	a.sched.SetClass(d.ID, p, d.Class)
	a.sched.SetWeights(d.ID, p, d.Weights)
	a.gone.setPaused(a.sched, d.ID, p, d.Paused)
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

// Health reports destinations' budgets and backlogs ("" = all), with
// their rate history when withRates.
func (a *Agent) Health(_ context.Context, destinationID string, withRates bool) ([]*rivorav1.DestinationHealth, error) {
	var out []*rivorav1.DestinationHealth
	for _, snap := range a.sched.Snapshot(destinationID) {
		if !snap.Configured && snap.Pending == 0 {
			continue
		}
		h := healthToProto(snap)
		if withRates {
			rates, transitions := a.sched.RateHistory(snap.ID)
			h.RateHistory = rateHistoryToProto(rates)
			for _, t := range transitions {
				h.Transitions = append(h.Transitions, &rivorav1.HealthTransition{At: timestamppb.New(t.At), From: t.From.String(), To: t.To.String(), Cause: t.Cause})
			}
		}
		n := int(a.partitionCount.Load())
		if n > 0 {
			if part := a.partition(lanes.Partition(snap.ID, n)); part != nil {
				h.UnarchivedDeadLetters = int64(part.Unarchived(snap.ID))
				h.ArchivedDeadLetters = part.Archived(snap.ID)
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
		LearnedRate:    s.LearnedRate,
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
	if !s.OldestPending.IsZero() {
		h.OldestPendingAge = durationpb.New(max(time.Since(s.OldestPending), 0).Round(time.Millisecond))
	}
	h.AttemptsLastMinute = int64(s.LastMinuteAttempts)
	if s.LastMinuteAttempts > 0 {
		h.ThrottledShare = float64(s.LastMinuteThrottled) / float64(s.LastMinuteAttempts)
		h.ServerErrorShare = float64(s.LastMinuteServerErrors) / float64(s.LastMinuteAttempts)
	}
	return h
}

func rateHistoryToProto(samples []scheduler.RateSample) []*rivorav1.RateSample {
	out := make([]*rivorav1.RateSample, len(samples))
	for i, s := range samples {
		out[i] = &rivorav1.RateSample{
			Start: timestamppb.New(s.Start), ConfiguredRate: s.ConfiguredRate, CurrentRate: s.CurrentRate,
			Attempts: int32(s.Attempts), Delivered: int32(s.Delivered), Throttled: int32(s.Throttled), ServerErrors: int32(s.ServerErrors),
		}
	}
	return out
}

var errNotFound = errors.New("not found")

// controlPlane is a client of the control plane at url for the agent's
// own calls, which the cell token opens.
func (a *Agent) controlPlane(httpClient *http.Client, url string) rivorav1connect.AgentServiceClient {
	return rivorav1connect.NewAgentServiceClient(httpClient, url, connect.WithInterceptors(auth.Bearer(a.cfg.Keys.Cell().String())))
}

// httpClient is a client for calls to the control plane, through
// Config.Transport; timeout 0 is none (streams).
func (a *Agent) httpClient(timeout time.Duration) *http.Client {
	return &http.Client{Transport: a.cfg.Transport, Timeout: timeout}
}

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
