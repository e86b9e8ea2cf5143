// Package agent is Rivora's sidecar. Its data path, one package per step:
//
//	natsd        embedded NATS JetStream: the durable home of every event
//	ingest       tier 1: validate, store in INGEST, ack after the PubAck
//	owner        tier 2: per partition, move events into lanes (LANES_p),
//	             keep attempt state (LEDGER_p), rebuild after a restart
//	scheduler    which lane head goes next (budgets, fairness, retries)
//	budget       per-destination token buckets
//	delivery     one signed HTTP POST per attempt
//	retry        backoff, max attempts and the window
//	archive      tier 3: dead letters as NDJSON objects
//	history      per-event attempt outcomes for "where is my event?"
//
// The Agent wires them together and runs the delivery workers.
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
	Name       string
	DataDir    string
	Partitions int
	// Workers is the number of concurrent delivery attempts.
	Workers     int
	NATSListen  string
	SyncAlways  bool
	MaxPayload  int
	DedupWindow time.Duration
	// ArchiveDir is the local dead-letter archive (default DataDir/archive).
	ArchiveDir string
	Version    string
}

// Defaults.
const (
	DefaultPartitions = 16
	DefaultWorkers    = 64
)

// Agent is one running sidecar.
type Agent struct {
	cfg        Config
	log        *slog.Logger
	nats       *natsd.Server
	registry   *destinations.Registry
	sched      *scheduler.Scheduler
	gateway    *ingest.Gateway
	history    *history.History
	sender     *delivery.Sender
	partitions []*owner.Partition
	ready      atomic.Bool
}

// New starts the embedded NATS server, creates the streams and rebuilds
// every partition this agent owns. Call Run next.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Agent, error) {
	if cfg.Partitions <= 0 {
		cfg.Partitions = DefaultPartitions
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
	log = base.With("component", "agent")
	a := &Agent{cfg: cfg, log: log, registry: destinations.NewRegistry(), sched: scheduler.New(clock.Real{})}
	var err error
	if a.nats, err = natsd.Start(natsd.Config{DataDir: cfg.DataDir, ClientListen: cfg.NATSListen, SyncAlways: cfg.SyncAlways, Name: cfg.Name}, base.With("component", "nats")); err != nil {
		return nil, err
	}
	fail := func(err error) (*Agent, error) {
		a.nats.Shutdown()
		return nil, err
	}
	js := a.nats.JetStream()
	if a.gateway, err = ingest.New(ctx, js, a.registry, ingest.Config{Partitions: cfg.Partitions, MaxPayload: cfg.MaxPayload, DedupWindow: cfg.DedupWindow}, base.With("component", "ingest")); err != nil {
		return fail(err)
	}
	if a.history, err = history.New(ctx, js, history.DefaultRetention); err != nil {
		return fail(err)
	}
	arch, err := archive.NewDir(cfg.ArchiveDir)
	if err != nil {
		return fail(err)
	}
	a.sender = delivery.NewSender(fmt.Sprintf("rivora/%s (%s)", cfg.Version, cfg.Name))
	deps := owner.Deps{
		JS: js, Scheduler: a.sched, Registry: a.registry, History: a.history, Archive: arch,
		Clock: clock.Real{}, Log: base.With("component", "owner"), DedupWindow: cfg.DedupWindow,
	}
	start := time.Now()
	for p := range cfg.Partitions {
		part, err := owner.Open(ctx, p, deps)
		if err != nil {
			return fail(err)
		}
		a.partitions = append(a.partitions, part)
	}
	if err := registerMetrics(a.sched); err != nil {
		return fail(err)
	}
	log.Info("partitions opened", "partitions", cfg.Partitions, "took", time.Since(start).Round(time.Millisecond))
	return a, nil
}

// Run delivers until ctx ends, then drains: no new attempt starts, attempts
// in flight finish (bounded by their timeouts), the partitions flush, and
// the embedded server stops.
func (a *Agent) Run(ctx context.Context) error {
	partCtx, stopPartitions := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPartitions()
	var partWG sync.WaitGroup
	for _, part := range a.partitions {
		partWG.Add(1)
		go func() {
			defer partWG.Done()
			if err := part.Run(partCtx); err != nil {
				a.log.Error("partition stopped", "error", err)
			}
		}()
	}
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
	a.ready.Store(true)
	a.log.Info("agent running", "workers", a.cfg.Workers)
	<-ctx.Done()
	a.ready.Store(false)
	a.log.Info("draining: waiting for attempts in flight")
	workWG.Wait()
	stopPartitions()
	partWG.Wait()
	a.nats.Shutdown()
	a.log.Info("agent stopped")
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
	part := a.partitions[att.Lane.Partition]
	ev, err := part.Load(ctx, att)
	if err != nil {
		part.Skip(att, err)
		return
	}
	dest, ok := a.registry.Get(ev.GetDestinationId())
	if !ok {
		// Deleted while the attempt was being picked: hold the lane.
		head := att.Head
		head.NotBefore = time.Now().Add(time.Second)
		a.sched.Retry(att, head)
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

// Handle registers the agent's Connect services (ingest, events) on mux.
func (a *Agent) Handle(mux *http.ServeMux, opts ...connect.HandlerOption) {
	mux.Handle(rivorav1connect.NewIngestServiceHandler(a.gateway, opts...))
	mux.Handle(rivorav1connect.NewEventServiceHandler(&eventService{a: a}, opts...))
}

// ApplyDestinations installs the control plane's current destinations and
// applies their limits in place.
func (a *Agent) ApplyDestinations(list []*rivorav1.Destination) error {
	dests, err := a.registry.Replace(list)
	if err != nil {
		return err
	}
	for _, d := range dests {
		p := lanes.Partition(d.ID, a.cfg.Partitions)
		a.sched.SetLimits(d.ID, p, d.Limits)
		a.sched.SetClass(d.ID, p, d.Class)
		a.sched.SetWeights(d.ID, p, d.Weights)
	}
	return nil
}

// Health reports destinations' budgets and backlogs ("" = all).
func (a *Agent) Health(_ context.Context, destinationID string) ([]*rivorav1.DestinationHealth, error) {
	var out []*rivorav1.DestinationHealth
	for _, snap := range a.sched.Snapshot(destinationID) {
		if !snap.Configured && snap.Pending == 0 {
			continue
		}
		out = append(out, healthToProto(snap))
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

// Pending is the number of events of a destination not yet delivered or
// dead-lettered.
func (a *Agent) Pending(_ context.Context, destinationID string) (int64, error) {
	return int64(a.sched.Pending(destinationID)), nil
}

// ArchivePending dead-letters a destination's pending events (reason
// "deleted") and returns how many.
func (a *Agent) ArchivePending(ctx context.Context, destinationID string) (int64, error) {
	part := a.partitions[lanes.Partition(destinationID, a.cfg.Partitions)]
	n, err := part.ArchiveDestination(ctx, destinationID)
	return int64(n), err
}

var errNotFound = errors.New("not found")
