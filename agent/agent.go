// Package agent is Rivora's sidecar. Its data path, one package per step:
//
//	natsd        embedded NATS JetStream: the durable home of every event
//	ingest       accept: validate, store durably, ack after the PubAck
//	             (into an owned partition's lanes, else tier 1 INGEST)
//	partitions   the partitions assigned here: their locks, opens,
//	             handoffs, and where an open partition is found
//	owner        tier 2: per partition, the single writer of its lanes
//	             (LANES_p) and ledger (LEDGER_p): move, rebuild, record
//	             what is done, hand dead letters to the archive
//	scheduler    which lane head goes next (budgets, fairness, retries)
//	limits       a destination's limits and priority class (a leaf)
//	budget       per-destination adaptive token buckets and health
//	delivery     one signed HTTP POST per attempt
//	verdict      what becomes of an attempt: one pure decision, which
//	             the owner settles once (owner.Worker, owner's settle)
//	gone         a partner's 410: the destination held here, reported
//	retry        backoff, max attempts and the window
//	archive      tier 3: dead letters as NDJSON objects (directory or S3)
//	deadletters  list and replay the archive
//	history      attempt outcomes and delivered events, by minute, for
//	             events get, list and resend
//	destinations the control plane's destinations, as delivery uses them
//	upstream     the control plane the agent follows, and its audit log
//	api          the agent's Connect services, errors mapped at the edge
//
// The Agent wires them together: it follows the control plane (follow.go),
// runs each component under its own Run(ctx) and the delivery workers
// (worker.go), and stops them in order.
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
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent/api"
	"github.com/rivora/rivora/agent/archive"
	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/deadletters"
	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/diskroom"
	"github.com/rivora/rivora/agent/gone"
	"github.com/rivora/rivora/agent/heldtime"
	"github.com/rivora/rivora/agent/history"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/agent/ownership"
	"github.com/rivora/rivora/agent/partitions"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/agent/subscriptions"
	"github.com/rivora/rivora/agent/upstream"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/backoff"
	"github.com/rivora/rivora/internal/ssrf"
	"github.com/rivora/rivora/internal/tlsconf"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Config configures an agent.
type Config struct {
	Name    string
	DataDir string
	// DataDirLock is DataDir's lock when the caller took it already
	// (rivora dev and agent, which release it only once their HTTP
	// server has stopped too); it stays the caller's. nil: the embedded
	// server takes it, and releases it as it stops (natsd.Config.Lock).
	DataDirLock *natsd.DirLock
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
	// NATSClusterAdvertise (host:port, "" = none) is the route address
	// gossiped to the cell's other agents (natsd.Config.ClusterAdvertise).
	NATSClusterAdvertise string
	// NATSPassword ("" = none) is required of every client and route of
	// the embedded NATS server (natsd.Config.Password); NATSTLS, with a
	// certificate, serves its client port over TLS and its routes over
	// mutual TLS.
	NATSPassword string
	NATSTLS      tlsconf.Files
	// LeafListen (host:port), when set, accepts NATS leaf-node
	// connections from edge servers, which must present the credential
	// LeafPassword derives from the cell token (TLS with NATSTLS).
	LeafListen string
	// Replicas is the stream replica count; 0 means min(3, cell size),
	// the cell size being this agent plus its distinct routes.
	Replicas int
	// ConsulURL, when set, takes partition ownership from Consul sessions
	// and locks; otherwise ownership is in process (one agent).
	ConsulURL string
	// SessionTTL and LockDelay tune the Consul session (defaults 10s, 5s).
	SessionTTL time.Duration
	LockDelay  time.Duration
	// StoreStallTimeout is how long a partition may go without a
	// confirmed write before this agent gives it up (0:
	// owner.DefaultStoreStallTimeout).
	StoreStallTimeout time.Duration
	// DrainAttemptsWait bounds how long a stop waits for attempts in
	// flight (0: 15 s); past it they are abandoned, their events sent
	// again after the restart.
	DrainAttemptsWait time.Duration
	// SyncAlways makes every acknowledgement survive a power loss
	// (--fsync): natsd.Config.Fsync, with the group commit's barrier
	// before every ingest answer, every move's INGEST ack and every purge
	// of dead-lettered lane events.
	SyncAlways bool
	MaxPayload int
	// MaxBatch and MaxBatchBytes bound one PublishBatch: its events, and
	// its request in bytes after decompression (ingest defaults when 0).
	MaxBatch      int
	MaxBatchBytes int
	// ConcurrentEvents is how many events publishes may hold while they
	// are accepted, the other calls waiting their customer's turn
	// (ingest default when 0).
	ConcurrentEvents int
	DedupWindow      time.Duration
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
	// EgressProxy, when set, carries deliveries and OAuth2 token fetches
	// (--egress-proxy); the guard still judges each destination's address.
	EgressProxy *delivery.EgressProxy
	// MinFreeDisk (--min-free-disk) is the store's room (natsd
	// StoreRoom: DataDir's free disk, or what the store's limit leaves)
	// under which ingest refuses every event, and under twice which the
	// events of the customers holding most pending ones (diskroom). 0:
	// diskroom.DefaultMinFree; negative: not watched.
	MinFreeDisk int64

	// mangleDestination, a test seam (nil outside tests; set through
	// export_test.go, so not part of the public Config), changes a copy
	// of each destination's config before the agent builds it: it stands
	// for a config this agent cannot build though the control plane took
	// it (a key format a newer control plane accepts), which a control
	// plane of the agent's own version refuses.
	mangleDestination func(*rivorav1.Destination)
	// mangleSubscription is the same seam for each subscription's
	// config: one this agent cannot load (a secret or filter a newer
	// control plane takes).
	mangleSubscription func(*rivorav1.Subscription)
}

// DefaultWorkers is the default number of delivery workers.
const DefaultWorkers = 64

// Agent is one running sidecar.
type Agent struct {
	cfg Config
	log *slog.Logger
	// clock is the agent's time: what the scheduler, owner and delivery
	// are handed, and when the registries say a destination or
	// subscription became unusable or usable.
	clock clock.Clock
	// leaving is set at the stop, before the leaving report: the drain
	// hands every partition off itself, so an assignment the control
	// plane sends meanwhile (its partitions to others) is not applied.
	leaving  atomic.Bool
	nats     *natsd.Server
	registry *destinations.Registry
	// subs are the cell's subscriptions (ingest fans out by them, delivery
	// asks them for a subscription's URL, secret and headers); catalogue
	// is its event types.
	subs      *subscriptions.Table
	catalogue *subscriptions.Catalogue
	// held keeps the registry's and subs' stretches of being unusable in
	// the data directory, for the agent's next run: the config follower
	// notes them, noteAlive notes the agent running (it has its own lock).
	held    *heldtime.Book
	sched   *scheduler.Scheduler
	gateway *ingest.Gateway
	// room watches the store's room for the gateway, by the cell's
	// pending events (cellPending); nil: not watched.
	room        *diskroom.Watch
	cellPending *diskroom.Cell
	history     *history.History
	worker      owner.Worker
	sender      *delivery.Sender
	locker      ownership.Locker
	upstream    *upstream.Planes

	deadLetters *deadletters.Service
	// archive is where dead letters go (checked once at startup).
	archive archive.Archive
	// parts is the partitions assigned here, and the one partition count.
	parts *partitions.Set
	// applied is the config version applied (follow.go).
	applied atomic.Uint64
	// gone holds the destinations stopped here after a 410.
	gone *gone.Holds
	// edges keeps INGEST's sources equal to the registered edges (edges.go).
	edges *edgeSources
}

// New starts the embedded NATS server and creates the shared streams.
// Partitions open when the control plane assigns them (see Run).
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Agent, error) {
	if cfg.Keys == nil {
		return nil, errors.New("agent: no keys (Config.Keys): the cell token and API tokens every call is checked against are required")
	}
	// Its first config brings them: until then (or until the control
	// plane is found out of reach) a call waits for them rather than be
	// refused at once.
	cfg.Keys.ExpectTokens()
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
		cfg: cfg, log: log, clock: clock.Real{}, registry: destinations.NewRegistry(), sched: scheduler.New(clock.Real{}),
		subs: subscriptions.NewTable(), catalogue: subscriptions.NewCatalogue(),
		upstream: upstream.New(cfg.ControlPlaneURL, cfg.Keys, cfg.Transport, base.With("component", "upstream", "agent", cfg.Name)),
	}
	a.gone = gone.New(gone.Config{
		Name: cfg.Name, Scheduler: a.sched, Upstream: a.upstream, Destination: a.pauseState, Applied: a.applied.Load,
		Log: log,
	})
	var err error
	if a.nats, err = natsd.Start(natsd.Config{
		DataDir: cfg.DataDir, Lock: cfg.DataDirLock, ClientListen: cfg.NATSListen, Fsync: cfg.SyncAlways, Name: cfg.Name,
		ClusterListen: cfg.NATSCluster, ClusterAdvertise: cfg.NATSClusterAdvertise, Routes: cfg.NATSRoutes, Password: cfg.NATSPassword, TLS: cfg.NATSTLS,
		LeafListen: cfg.LeafListen, LeafPassword: LeafPassword(cfg.Keys.Cell()),
	}, base.With("component", "nats")); err != nil {
		return nil, err
	}
	// Read once the data directory is this agent's (natsd took its lock).
	if a.held, err = heldtime.Open(cfg.DataDir, a.clock.Now()); err != nil {
		log.Warn("the time unusable configs were held before this start is not known: their events' windows count it", "error", err)
	}
	a.registry.Recall(a.held.Recalled(heldtime.Destination))
	a.subs.Recall(a.held.Recalled(heldtime.Subscription))
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
		if a.locker, err = ownership.NewConsul(ownership.ConsulConfig{URL: cfg.ConsulURL, Agent: cfg.Name, TTL: cfg.SessionTTL, LockDelay: cfg.LockDelay}, base.With("component", "ownership")); err != nil {
			return fail(err)
		}
	} else {
		a.locker = ownership.NewLocal()
	}
	js := a.nats.JetStream()
	a.edges = newEdgeSources(js, edgeSourcesRepair, base.With("component", "edges"))
	// In a cell, the replicated streams are created retrying
	// (replicatedCreate); alone, at once.
	startup := startupCreate(log)
	create := func(what string, fn func(ctx context.Context) error) error {
		if cfg.NATSCluster == "" {
			return fn(ctx)
		}
		return startup.run(ctx, what, fn)
	}
	if err := create(history.Stream, func(ctx context.Context) (err error) {
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
	a.archive = arch
	// The owners check the events edges forward against the idempotency
	// records the gateway keeps (the bucket is the gateway's: created
	// here first, as the gateway creates it).
	var forwarded *ingest.ForwardedCheck
	if err := create(ingest.IdempotencyBucket, func(ctx context.Context) (err error) {
		forwarded, err = ingest.NewForwardedCheck(ctx, js, cfg.DedupWindow, cfg.Replicas)
		return err
	}); err != nil {
		return fail(err)
	}
	a.parts = partitions.New(partitions.Config{
		Name: cfg.Name, Locker: a.locker, Upstream: a.upstream, Configure: a.configurePartition, Log: log,
		Deps: owner.Deps{
			JS: js, Scheduler: a.sched, Registry: a.registry, Subscriptions: a.subs, Applied: a.applied.Load, History: a.history, Archive: arch,
			Clock: clock.Real{}, Log: base.With("component", "owner"), DedupWindow: cfg.DedupWindow, Replicas: cfg.Replicas,
			StoreStallTimeout: cfg.StoreStallTimeout, Forwarded: forwarded, Durable: a.nats.Syncer(), SnapshotDir: snapshotDir(cfg.DataDir),
		},
	})
	if a.room, a.cellPending, err = watchRoom(cfg, a.nats, a.sched, base.With("component", "diskroom")); err != nil {
		return fail(err)
	}
	if err := create("INGEST", func(ctx context.Context) (err error) {
		a.gateway, err = ingest.New(ctx, js, a.registry, ingest.Config{
			MaxPayload: cfg.MaxPayload, MaxBatch: cfg.MaxBatch, MaxBatchBytes: cfg.MaxBatchBytes, DedupWindow: cfg.DedupWindow, Replicas: cfg.Replicas,
			ConcurrentEvents: cfg.ConcurrentEvents, Local: a.parts, Partitions: a.parts, Subscriptions: a.subs, Catalogue: a.catalogue, Applied: a.applied.Load,
			Delivered: a.history, Durable: a.nats.Syncer(), StoreDown: a.nats.LostErr, Reach: a.nats.Reach(), Room: a.room,
		}, base.With("component", "ingest"))
		return err
	}); err != nil {
		return fail(err)
	}
	if err := create(deadletters.CheckpointBucket, func(ctx context.Context) (err error) {
		a.deadLetters, err = deadletters.New(ctx, js, arch, a.parts, a.gateway, a.upstream.Audit, cfg.Replicas, base.With("component", "deadletters"))
		return err
	}); err != nil {
		return fail(err)
	}
	a.sender = delivery.NewSender(fmt.Sprintf("rivora/%s (%s)", cfg.Version, cfg.Name), cfg.Guard, senderOptions(cfg)...)
	a.worker = owner.Worker{
		Scheduler: a.sched, Sender: a.sender,
		Clock: clock.Real{}, Log: base.With("component", "delivery"), Disable: a.gone.Hold,
	}
	base.Info("deliveries pass the SSRF guard", "component", "delivery", "guard", cfg.Guard.String())
	if cfg.EgressProxy != nil {
		base.Info("deliveries go out through the egress proxy", "component", "delivery", "proxy", cfg.EgressProxy.String())
	}
	owned := func(destinationID string) bool { return a.parts.OfDestination(destinationID) != nil }
	if err := registerMetrics(a.sched, owned); err != nil {
		return fail(err)
	}
	return a, nil
}

// watchRoom watches the store's room (Config.MinFreeDisk) by the cell's
// pending events, or returns nils when told not to.
func watchRoom(cfg Config, nats *natsd.Server, sched *scheduler.Scheduler, log *slog.Logger) (*diskroom.Watch, *diskroom.Cell, error) {
	minFree := cfg.MinFreeDisk
	if minFree < 0 {
		return nil, nil, nil
	}
	if minFree == 0 {
		minFree = diskroom.DefaultMinFree(nats.StoreCapacity())
	}
	cell, err := diskroom.ShareInCell(nats.Conn(), cfg.Name, sched.PendingByCustomer, log)
	if err != nil {
		return nil, nil, fmt.Errorf("hear the cell's pending events: %w", err)
	}
	return diskroom.New(diskroom.Config{Dir: cfg.DataDir, MinFree: minFree, Room: nats.StoreRoom, Pending: cell.Pending, Log: log}), cell, nil
}

// senderOptions are the delivery options cfg asks for.
func senderOptions(cfg Config) []delivery.Option {
	if cfg.EgressProxy == nil {
		return nil
	}
	return []delivery.Option{delivery.WithEgressProxy(cfg.EgressProxy)}
}

// Run follows the control plane and delivers until ctx ends, then drains:
// no new attempt starts, attempts in flight finish (drainAttemptsWait at
// most), the partitions flush and hand their locks back, and the
// embedded server stops. Every goroutine it starts has ended when it
// returns, but the workers of attempts still in flight past
// drainAttemptsWait: those are abandoned as at a handoff (their outcomes
// are not recorded; the events go out again from their stream), so one
// hanging partner with a 5-minute timeout cannot hold a stop past its
// supervisor's kill timeout (Nomad's kill_timeout is 45 s here).
//
// When the embedded server disables its JetStream by itself (a full disk:
// natsd.ErrJetStreamDisabled) the agent drains the same way and returns
// that error, so the process exits non-zero and its supervisor starts it
// again: nats-server never turns JetStream back on in a running server,
// and a restart rejoins the cell's streams with the Raft state kept on
// disk (server.RunAgent first waits for room on the disk).
func (a *Agent) Run(ctx context.Context) error {
	ctx, stopAgent := context.WithCancelCause(ctx)
	defer stopAgent(nil)
	go func() {
		select {
		case <-a.nats.JetStreamLost():
			a.log.Error("stopping: this agent's store is gone; its partitions go to the other agents, and its supervisor is to start it again",
				"error", a.nats.LostErr())
			stopAgent(a.nats.LostErr())
		case <-ctx.Done():
		}
	}()
	// The history and the locker outlive the partitions, which write the
	// one and hold leases of the other: they stop last.
	var history, locker sync.WaitGroup
	historyCtx, stopHistory := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHistory()
	history.Go(func() {
		if err := a.history.Run(historyCtx); err != nil {
			a.log.Error("history writer stopped", "error", err)
		}
	})
	lockerCtx, stopLocker := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLocker()
	locker.Go(func() { _ = a.locker.Run(lockerCtx) })
	// The Watch on the control plane ends at the stop, but only once the
	// agent told the control plane it is leaving (leave): a control plane
	// that sees a Watch end without that takes the agent for dead and, a
	// second later, destroys its Consul session — which would cut the
	// drain short (leases gone with attempts in flight, their outcomes
	// unrecorded; locks freed only after the lock-delay). When the report
	// fails, the Watch stays open until the drain released the locks.
	var following sync.WaitGroup
	followCtx, stopFollowing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFollowing()
	// The follower announces the session and the partition set takes
	// leases with it: both start once it exists, its TTL running from
	// here, not from New (which may take a while in a fresh cell).
	select {
	case <-a.locker.Ready():
	case <-ctx.Done():
	}
	var work, loops sync.WaitGroup
	a.sched.LimitWorkers(a.cfg.Workers)
	work.Go(func() { _ = a.sched.Run(ctx) })
	for range a.cfg.Workers {
		work.Go(func() { a.work(ctx) })
	}
	following.Go(func() { a.follow(followCtx) })
	loops.Go(func() { _ = a.parts.Run(ctx) })
	loops.Go(func() { _ = a.gone.Run(ctx) })
	loops.Go(func() { a.forgetUnknown(ctx) })
	loops.Go(func() { a.noteAlive(ctx) })
	if a.room != nil {
		loops.Go(func() { a.room.Run(ctx) })
		loops.Go(func() { a.cellPending.Run(ctx) })
	}
	loops.Go(func() { _ = a.upstream.Run(ctx) })
	loops.Go(func() { _ = a.edges.Run(ctx) })
	loops.Go(func() { _ = checkArchive(ctx, a.archive, archiveCheckTimeout, a.log) })
	a.log.Info("agent running", "workers", a.cfg.Workers, "controlplane", a.upstream.URL())
	<-ctx.Done()
	// Leaving, the agent is given no partitions and asked nothing more;
	// then it stops following, so no assignment starts a handoff in its
	// drain. A dead store (ErrJetStreamDisabled) leaves the same way: its
	// session ends as soon as the locker closes, below.
	a.leaving.Store(true)
	// In a cell, the meta leadership goes first, if its server holds it,
	// before it leaves: the agents that take its partitions create
	// their streams and consumers through the meta leader, and the
	// stream step-downs below are refused while its server hears of no
	// meta leader.
	a.handOverMeta()
	// In a cell, its server's stream and consumer leaderships go to
	// caught-up peers now, while it is still routed to them, rather than
	// by an election after it exits; but those of its own partitions,
	// which its drain goes on writing (natsd.HandOverLeaderships).
	handover := make(chan natsd.Handed, 1)
	keep := a.ownPartitionGroups()
	go func() { handover <- a.nats.HandOverLeaderships(handOverWait, keep) }()
	if a.leave(errors.Is(context.Cause(ctx), natsd.ErrJetStreamDisabled)) {
		stopFollowing()
	}
	a.log.Info("draining: waiting for attempts in flight")
	drain := a.watchDrain()
	drain.at("the partition and edge loops")
	loops.Wait()
	drain.at("attempts in flight")
	attemptsWait := a.cfg.DrainAttemptsWait
	if attemptsWait <= 0 {
		attemptsWait = drainAttemptsWait
	}
	handoffWait := attemptsWait // attempts in flight: none, past Wait
	if !waitAtMost(&work, attemptsWait) {
		a.log.Warn("draining: attempts still in flight; stopping without their outcomes (their events are sent again)", "waited", attemptsWait)
		handoffWait = 0 // they were waited for already
	}
	drain.at("the partitions' handoffs")
	a.parts.Shutdown(handoffWait)
	drain.at("the history's last records")
	stopHistory() // the last records stored, before the server stops
	history.Wait()
	drain.at("the ownership locker")
	stopLocker()
	locker.Wait()
	closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := a.locker.Close(closeCtx); err != nil {
		a.log.Warn("release ownership", "error", err)
	}
	cancel()
	drain.at("the control plane's watch")
	stopFollowing()
	following.Wait()
	drain.at("the streams' leaderships")
	if handed := <-handover; handed.Streams+handed.Consumers+handed.Left > 0 {
		a.log.Info("handed this server's stream leaderships over to its peers", "streams", handed.Streams, "consumers", handed.Consumers, "still_led_here", handed.Left)
	}
	drain.at("the embedded NATS server's shutdown")
	a.gateway.Close()
	a.nats.Shutdown()
	drain.done()
	if err := context.Cause(ctx); errors.Is(err, natsd.ErrJetStreamDisabled) {
		a.log.Error("agent stopped: its store was disabled", "error", err)
		return err
	}
	a.log.Info("agent stopped")
	return nil
}

// handOverWait bounds the wait for the new leaders of the streams and
// consumers this agent's server leads (natsd.HandOverLeaderships).
const handOverWait = 2 * time.Second

// metaHandOverWait bounds the wait for the new meta leader
// (natsd.HandOverMeta), which holds the agent's leaving up: a
// step-down's round trip and a caught-up peer's election take tens of
// milliseconds.
const metaHandOverWait = time.Second

// handOverMeta hands the cell's meta leadership over, if this agent's
// server holds it, and says so.
func (a *Agent) handOverMeta() {
	start := time.Now()
	to, err := a.nats.HandOverMeta(metaHandOverWait)
	switch {
	case err != nil:
		a.log.Warn("could not hand this server's jetstream meta leadership over: the cell elects another meta leader after its exit", "error", err)
	case to != "":
		a.log.Info("handed this server's jetstream meta leadership over", "to", to, "took", time.Since(start).Round(time.Millisecond))
	}
}

// ownPartitionGroups tells the stream and consumer groups of the
// partitions whose lock this agent holds now, in any phase (their lane
// store, ledger and INGEST mover): its drain goes on writing them until
// it releases the lock. Read once: a partition handed off meanwhile is
// still kept (its next owner may be writing already).
func (a *Agent) ownPartitionGroups() func(stream, consumer string) bool {
	own := make(map[[2]string]bool)
	for _, p := range a.parts.Held() {
		own[[2]string{lanes.LanesStream(p), ""}] = true
		own[[2]string{lanes.LedgerStream(p), ""}] = true
		own[[2]string{lanes.IngestStream, owner.MoverName(p)}] = true
	}
	return func(stream, consumer string) bool { return own[[2]string{stream, consumer}] }
}

// leaveWait bounds the leaving report: it never holds the drain up longer.
const leaveWait = 2 * time.Second

// leave tells the control plane this agent is stopping (ReportLeaving),
// and whether because its store failed, so its partitions go to the
// others now and its session is left for it to end after the drain; it
// tries the control planes (the leader one names first) for leaveWait at
// most. It reports whether the Watch may end now: a control plane not
// told takes an ended Watch for a dead agent and destroys its session a
// second later, so then the Watch stays open through the drain
// (assignments are not applied meanwhile: a.leaving).
func (a *Agent) leave(storeFailed bool) bool {
	session := a.locker.Session()
	if session == "" {
		return true // no Consul (rivora dev, one agent): no session to keep
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaveWait)
	defer cancel()
	var err error
	for ctx.Err() == nil {
		url := a.upstream.URL()
		_, err = a.upstream.Client(a.upstream.HTTPClient(leaveWait), url).ReportLeaving(ctx, connect.NewRequest(&rivorav1.ReportLeavingRequest{
			AgentName: a.cfg.Name, Session: session, StoreFailed: storeFailed,
		}))
		if err == nil {
			a.log.Info("told the control plane this agent is leaving", "controlplane", url)
			return true
		}
		if !a.upstream.Failed(url, err) {
			// Not sent on to a leader it named: a short pause before the
			// next control plane (or the same one again).
			if !backoff.Sleep(ctx, 200*time.Millisecond) {
				break
			}
		}
	}
	a.log.Warn("could not tell the control plane this agent is leaving; following it until the drain released the partitions", "error", err)
	return false
}

// drainAttemptsWait bounds how long a drain waits for attempts in
// flight, as a partition's handoff does (partitions.handoffWait).
const drainAttemptsWait = 15 * time.Second

// waitAtMost waits for wg, or d; it reports whether wg was done.
func waitAtMost(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// drainWatch names the step a drain waits on, and logs it while the
// drain takes long: a drain that hangs says where.
type drainWatch struct {
	step        atomic.Pointer[string]
	stop, ended chan struct{}
}

// drainStillEvery is how often a long drain logs the step it waits on.
const drainStillEvery = 15 * time.Second

func (a *Agent) watchDrain() *drainWatch {
	w := &drainWatch{stop: make(chan struct{}), ended: make(chan struct{})}
	w.at("")
	from := time.Now()
	go func() {
		defer close(w.ended)
		t := time.NewTicker(drainStillEvery)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
				a.log.Warn("draining: still waiting", "for", *w.step.Load(), "after", time.Since(from).Round(time.Second))
			}
		}
	}()
	return w
}

func (w *drainWatch) at(step string) { w.step.Store(&step) }
func (w *drainWatch) done()          { close(w.stop); <-w.ended }

// Ready reports whether the agent is serving.
func (a *Agent) Ready() bool { return a.parts.Ready() }

// Healthy is what /healthz answers: nil while the agent serves with
// every partition assigned here running, else why not — starting or
// draining, or which partitions are broken (they restart by themselves:
// healthy again once they run).
func (a *Agent) Healthy() error {
	if err := a.nats.LostErr(); err != nil {
		return err
	}
	if !a.parts.Ready() {
		return errors.New("starting or draining")
	}
	if broken := a.parts.Broken(); len(broken) > 0 {
		return fmt.Errorf("%d partition(s) broken: %s", len(broken), strings.Join(broken, "; "))
	}
	return nil
}

// Services are the services Handle registers, by full name.
var Services = api.Services

// Handle registers the agent's Connect services on mux (api.Handle): each
// call checked against the agent's keys, bounded, and its errors mapped
// to Connect codes in one place.
func (a *Agent) Handle(mux *http.ServeMux, opts ...connect.HandlerOption) {
	api.Handle(mux, api.Config{
		Keys: a.cfg.Keys, Gateway: a.gateway, DeadLetters: a.deadLetters, Scheduler: a.sched, Registry: a.registry, Subscriptions: a.subs,
		History: a.history, Partitions: a.parts, Upstream: a.upstream, Log: a.log,
	}, opts...)
}

// Pending is the number of events of a destination not yet delivered or
// dead-lettered.
func (a *Agent) Pending(_ context.Context, destinationID string) (int64, error) {
	return int64(a.sched.Pending(destinationID)), nil
}

// ArchivePending dead-letters a destination's pending events (reason
// "deleted") and returns how many, and what it left to attempts in
// flight.
func (a *Agent) ArchivePending(ctx context.Context, destinationID string) (owner.Archived, error) {
	return a.parts.ArchivePending(ctx, destinationID, "")
}

// Health reports destinations' budgets and backlogs ("" = all), with
// their rate history when withRates.
func (a *Agent) Health(_ context.Context, destinationID string, withRates bool) ([]*rivorav1.DestinationHealth, error) {
	return api.Health(a.sched, a.parts, a.registry, destinationID, withRates), nil
}

// applyDestinations installs changed destinations in the registry and the
// scheduler, in place: nothing pending moves.
//
// A destination whose config does not build is installed unusable and
// held (destinations.Destination.Unusable): one customer's destination
// that this agent cannot build does not stop every other change.
func (a *Agent) applyDestinations(changed []*rivorav1.Destination, removed []string, snapshot bool) {
	// The destinations that may go: every one before a snapshot, the
	// removed ones before a change (a change costs what it changes, not
	// a walk of every destination: resuming 10k destinations one by one
	// is 10k changes).
	var mayGo []string
	if snapshot {
		for _, d := range a.registry.All() {
			mayGo = append(mayGo, d.ID)
		}
	} else {
		mayGo = removed
	}
	if a.cfg.mangleDestination != nil {
		changed = mangled(changed, a.cfg.mangleDestination)
	}
	var dests []*destinations.Destination
	if snapshot {
		dests = a.registry.Replace(a.clock.Now(), changed)
	} else {
		dests = a.registry.Update(a.clock.Now(), changed, removed)
	}
	for _, d := range dests {
		if d.Unusable != nil {
			// Its build errors name what is wrong (a key's format, a PEM
			// block missing), never the secret or key itself.
			a.log.Error("destination config unusable on this agent: its events are accepted and held, not attempted, until a config of it builds; the rest of the config applies",
				"destination", d.ID, "error", d.Unusable)
		}
		a.configure(d)
	}
	for _, id := range mayGo {
		if _, ok := a.registry.Get(id); !ok {
			a.forgetDestination(id)
		}
	}
	for _, d := range dests {
		a.held.Note(heldtime.Destination, d.ID, d.CreatedVersion, d.UnusableStretches)
	}
	a.keepHeldTime(heldtime.Destination, removed, snapshot, func(id string) bool {
		_, ok := a.registry.Get(id)
		return ok
	})
}

// keepHeldTime writes to the data directory (a.held) the stretches of
// being unusable of kind's destinations or subscriptions, once a config
// changed them (a.held.Note) or removed some (removed); after a whole
// config (snapshot) those no longer there (kept: whether one is) are
// forgotten. A failed write is logged and tried again at the next config
// or by noteAlive, whichever comes first.
func (a *Agent) keepHeldTime(kind heldtime.Kind, removed []string, snapshot bool, kept func(id string) bool) {
	for _, id := range removed {
		a.held.Forget(kind, id)
	}
	if snapshot {
		a.held.Retain(kind, kept)
	}
	if err := a.held.Save(); err != nil {
		a.log.Warn("the time unusable configs are held is not kept for the agent's next run: if it restarts, their events' windows count it", "error", err)
	}
}

// mangled is list with each destination or subscription a copy that
// mangle changed (Config.mangleDestination, mangleSubscription).
func mangled[M proto.Message](list []M, mangle func(M)) []M {
	out := make([]M, len(list))
	for i, d := range list {
		out[i] = proto.CloneOf(d)
		mangle(out[i])
	}
	return out
}

// LeafPassword is the credential an edge's NATS server presents to a
// cell's leaf port, derived from the cell token ("" without one: the leaf
// port is open, as the rest of an --insecure cell).
func LeafPassword(cell auth.CellToken) string {
	if cell.IsZero() {
		return ""
	}
	return cell.Derive("leaf")
}

// applySubscriptions installs changed subscriptions, in place: nothing
// pending moves. The scheduler holds the lanes of the paused ones and
// lets go those of the others, the deleted included: an event of a
// deleted subscription is attempted and the owner dead-letters it
// (reason deleted, verdict.Facts.SubscriptionMissing), never dropped nor
// held forever.
//
// A subscription whose config does not load is installed unusable
// (subscriptions.Subscription.Unusable): one customer's subscription
// that this agent cannot load does not stop every other change. One
// whose secret did not load is held as a paused one.
func (a *Agent) applySubscriptions(changed []*rivorav1.Subscription, removed []string, snapshot bool) {
	if a.cfg.mangleSubscription != nil {
		changed = mangled(changed, a.cfg.mangleSubscription)
	}
	var subs []*subscriptions.Subscription
	if snapshot {
		subs = a.subs.Replace(a.clock.Now(), changed)
	} else {
		subs = a.subs.Update(a.clock.Now(), changed, removed)
	}
	for _, s := range subs {
		if s.Unusable != nil {
			// Its load errors name what is wrong (a secret's format, a
			// filter's), never the secret itself.
			a.log.Error("subscription config unusable on this agent: the rest of the config applies; a secret that did not load holds its events (accepted, not attempted), a filter that did not load fails every event (it gets none), until a config of it loads",
				"subscription", s.ID, "held", s.UnusableHeld, "error", s.Unusable)
		}
		a.sched.SetSubscriptionPaused(s.Destination, s.ID, s.Held())
	}
	for _, s := range subs {
		a.held.Note(heldtime.Subscription, s.ID, 0, s.UnusableStretches)
	}
	a.keepHeldTime(heldtime.Subscription, removed, snapshot, func(id string) bool {
		_, ok := a.subs.Get(id)
		return ok
	})
	for _, id := range removed {
		a.sched.SetSubscriptionPaused("", id, false)
	}
	if snapshot {
		for _, id := range a.sched.PausedSubscriptions() {
			if _, ok := a.subs.Get(id); !ok {
				a.sched.SetSubscriptionPaused("", id, false)
			}
		}
	}
}

// forgetDestination forgets a deleted destination everywhere the agent
// keeps something of it: the scheduler (budget, rate history, weights,
// lanes: so health and the console no longer show it), a 410 hold, the
// partition's dead-letter counts, its TLS connection pools and OAuth2
// token, and every metric series labelled with it. Called when the config that deletes it is applied, before the
// agent reports that version applied.
func (a *Agent) forgetDestination(id string) {
	a.sched.ForgetDestination(id)
	a.gone.Forget(id)
	owner.ForgetDestinationMetrics(id)
	a.sender.ForgetDestination(id)
	if part := a.parts.OfDestination(id); part != nil {
		part.ForgetDestination(id)
	}
}

// noteAlive notes in the data directory, every heldtime.AliveEvery and
// at the stop, that the agent still runs while it holds an unusable
// destination or subscription: the next start closes the stretch open
// at the stop there (heldtime), not crediting the downtime to the
// events' windows. It retries a failed write of the stretches too.
func (a *Agent) noteAlive(ctx context.Context) {
	t := time.NewTicker(heldtime.AliveEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		a.held.Alive(a.clock.Now())
		if err := a.held.Save(); err != nil {
			a.log.Warn("the time unusable configs are held is not kept for the agent's next run: if it restarts, their events' windows count it", "error", err)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// unknownEvery is how often forgetUnknown looks for events of
// destinations the config does not have.
const unknownEvery = time.Second

// forgetUnknown hands the scheduler's lanes of destinations the config
// does not have to their owners, until ctx ends: events that reached the
// cell after their destination was deleted (an edge's, accepted while it
// was cut off and forwarded when its link returned), or were pending when
// it was deleted while this agent was down. Held, they would wait for
// ever and go to a destination made later under the same id. Handed
// out, each becomes a dead letter (reason deleted), or waits while it was
// accepted under a config this agent has not applied (verdict.Decide).
// Nothing is looked at before the first config.
func (a *Agent) forgetUnknown(ctx context.Context) {
	t := time.NewTicker(unknownEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		if a.applied.Load() == 0 {
			continue
		}
		for _, id := range a.sched.Unconfigured() {
			if _, ok := a.registry.Get(id); !ok {
				a.log.Info("events pending for a destination the config does not have (deleted): each becomes a dead letter (reason deleted) unless accepted under a newer config", "destination", id)
				a.sched.ForgetUnknown(id)
			}
		}
	}
}

// configure gives the scheduler a destination's limits, class, weights
// and pause state.
func (a *Agent) configure(d *destinations.Destination) {
	p := lanes.Partition(d.ID, a.parts.Count())
	// Creation and last resume first: a budget restored from the ledger
	// (SetLimits makes it) is taken up only if saved after both.
	a.sched.NoteCreated(d.ID, p, d.CreatedAt)
	a.sched.NoteResume(d.ID, p, d.Pauses.LastResume())
	a.sched.SetLimits(d.ID, p, d.Limits)
	a.sched.SetClass(d.ID, p, d.Class)
	a.sched.SetWeights(d.ID, p, d.Weights)
	// Held: the control plane's pause, or a config that does not build
	// here. A config of an unusable destination that builds (and no
	// pause) lets it go as a resume does (scheduler.SetPaused): it also
	// ends the partner's Retry-After hold and makes due the lanes held
	// back by its failures, as an operator's resume would. Known and
	// kept: telling a mend from a resume would take a second kind of
	// pause through gone and the scheduler; the budget still paces what
	// goes, and a partner that still wants none answers 429 or 503 again.
	a.gone.Configure(d.ID, p, d.Held())
}

// configurePartition configures again the destinations of partition p
// (dropping a partition from the scheduler forgets them).
func (a *Agent) configurePartition(p int) {
	n := a.parts.Count()
	for _, d := range a.registry.All() {
		if lanes.Partition(d.ID, n) == p {
			a.configure(d)
		}
	}
}

// pauseState is a destination's partition and pause state from the config
// the agent follows, for the 410 holds (ok false: deleted, or no config
// yet).
func (a *Agent) pauseState(id string) (partition int, paused, ok bool) {
	d, found := a.registry.Get(id)
	n := a.parts.Count()
	if !found || n == 0 {
		return 0, false, false
	}
	return lanes.Partition(id, n), d.Held(), true
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

// snapshotDir is where partition owners keep their pending snapshots
// ("": no data dir, no snapshots).
func snapshotDir(dataDir string) string {
	if dataDir == "" {
		return ""
	}
	return filepath.Join(dataDir, "snapshots")
}
