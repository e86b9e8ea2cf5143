// Package edged runs `rivora edge`: an embedded NATS server in its own
// JetStream domain, joined to a cell as a leaf node, that acknowledges
// Publish and PublishBatch once the events are in its buffer (package
// edge) and lets the cell's INGEST source them across the link, cut or
// not. It owns, for one edge:
//
//	edged.go    the process: its NATS server, buffer and ingest gateway
//	            (agent/ingest in edge mode), Run and the API it serves
//	follow.go   the control plane's redacted config (EdgeService.WatchEdge),
//	            applied and kept on disk (config.go) so that a restart
//	            during a cut accepts and authenticates at once
//	claim.go    the edge's name, one running process's at a time: the
//	            control plane confirms it before the edge joins the cell
//	monitor.go  the link to the cell and the buffer's state, sampled each
//	            second: the over-age refusal, the full buffer's message
//	report.go   that state reported to the control plane (ReportEdge)
//	metrics.go  the same state as Prometheus metrics
//
// An edge never delivers: lanes, budgets and ownership stay in the cell.
package edged

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
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/agent/api"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/subscriptions"
	"github.com/rivora/rivora/agent/upstream"
	"github.com/rivora/rivora/edge"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/internal/ids"
	"github.com/rivora/rivora/internal/tlsconf"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// Config configures an edge.
type Config struct {
	// Name is the edge's name (--name): its JetStream domain, its
	// subjects and its registration with the control plane. A data dir
	// keeps the name it was made under (DataDir/edge-name): New refuses
	// another. A new data dir may take an old name (a lost dir's): its
	// buffer is a new incarnation, which the cell's source follows.
	Name string
	// DataDir holds the buffer (DataDir/jetstream), the edge's name
	// (DataDir/edge-name), the instance id its processes claim the name
	// with (DataDir/edge-instance) and the last config applied
	// (DataDir/edge-config.pb).
	DataDir string
	// DataDirLock is DataDir's lock when the caller took it already
	// (rivora edge, which releases it only once its HTTP server has
	// stopped too); it stays the caller's. nil: the edge's NATS server
	// takes it, and releases it as it stops (natsd.Config.Lock).
	DataDirLock *natsd.DirLock
	// CellLeaf are the cell's leaf ports (nats-leaf://HOST:PORT), tried
	// in turn; the server reconnects for ever.
	CellLeaf []string
	// ControlPlanes are the control planes' URLs: the edge follows the
	// one that leads.
	ControlPlanes []string
	// Keys (required) hold the cell token (the edge's calls to the
	// control plane, and its leaf credential) and the API tokens the
	// config brings, which publishers are checked against.
	Keys *auth.Keys
	// Transport carries the calls to the control plane (nil: the default).
	Transport http.RoundTripper
	// LeafCA, when set, is the CA bundle the cell's leaf port certificate
	// is verified with: the leaf connection is then TLS.
	LeafCA string
	// MaxBuffer is the most bytes of unforwarded events (--max-buffer).
	MaxBuffer int64
	// BufferMaxAge (0: none) refuses new events once the oldest
	// unforwarded one is older (--buffer-max-age); nothing is discarded.
	BufferMaxAge time.Duration
	// DedupWindow, MaxPayload, MaxBatch and MaxBatchBytes are the
	// agent's ingest bounds (ingest defaults when 0).
	DedupWindow   time.Duration
	MaxPayload    int
	MaxBatch      int
	MaxBatchBytes int
	// ConcurrentEvents is how many events publishes may hold while the
	// edge accepts them, the other calls waiting their customer's turn
	// (ingest default when 0).
	ConcurrentEvents int
	// SyncAlways makes every acknowledgement survive a power loss
	// (--fsync): natsd.Config.Fsync, with the group commit's barrier
	// before every ingest answer.
	SyncAlways bool
}

// Defaults.
const (
	DefaultMaxBuffer    = 1 << 30
	DefaultBufferMaxAge = 72 * time.Hour
	// pingInterval is the edge server's NATS ping interval: a silent cut
	// of the leaf connection is found in some 10–15 s.
	pingInterval = 5 * time.Second
)

// ConfigFile is the file under the data dir holding the last config the
// edge applied.
const ConfigFile = "edge-config.pb"

// Edge is one running edge.
type Edge struct {
	cfg       Config
	log       *slog.Logger
	nats      *natsd.Server
	buffer    *edge.Buffer
	gateway   *ingest.Gateway
	registry  *destinations.Registry
	subs      *subscriptions.Table
	catalogue *subscriptions.Catalogue
	upstream  *upstream.Planes
	// partitions is the cell's partition count (0 until a config).
	partitions partitionCount
	// applied is the version of the config applied (follow.go).
	applied atomic.Uint64
	// config is the whole config applied and its file: follow.go's.
	config *configStore
	// warnings are the window warnings already logged (follow.go's).
	warnings map[string]time.Duration
	// unusableDests and unusableSubs are the destinations and
	// subscriptions of the last config the edge could not load, with
	// why (their error's text), so that each config message logs only
	// what changed (follow.go's logUnusable).
	unusableDests, unusableSubs map[string]string
	monitor                     *monitor
	// instance tells this edge's processes (those on its data dir:
	// dataDirInstance) from any other under the same name; claim is its
	// hold on the name (claim.go).
	instance string
	claim    *nameClaim
	// opened is the watch claimName opened, until follow takes it.
	opened atomic.Pointer[openedWatch]
	// metrics is the edge's own registry (metrics.go).
	metrics *prometheus.Registry
	started time.Time
	// following is true while a config watch that brought a config is
	// open; heard is when a watch last received a message (unix
	// nanoseconds; 0 if none has since the edge started): follow.go's.
	following atomic.Bool
	heard     atomic.Int64
}

// partitionCount is the cell's partition count, as ingest reads it.
type partitionCount struct{ n atomic.Int64 }

// Count is the count, 0 until the first config.
func (p *partitionCount) Count() int { return int(p.n.Load()) }

// New starts the edge's NATS server, opens its buffer and gateway, and
// applies the config kept on disk, if any: the edge accepts and
// authenticates from then on, cell and control plane reachable or not.
// It joins the cell once the control plane confirms the name is this
// process's (claim.go): it fails, naming the name, when another running
// edge holds it. Run must follow (it stops what New started).
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Edge, error) {
	if err := check(&cfg); err != nil {
		return nil, err
	}
	base := log
	log = base.With("component", "edge", "edge", cfg.Name)
	e := &Edge{
		cfg: cfg, log: log, registry: destinations.NewRegistry(), subs: subscriptions.NewTable(), catalogue: subscriptions.NewCatalogue(),
		upstream: upstream.New(strings.Join(cfg.ControlPlanes, ","), cfg.Keys, cfg.Transport, log),
		config:   newConfigStore(filepath.Join(cfg.DataDir, ConfigFile)), warnings: map[string]time.Duration{}, started: time.Now(),
	}
	var err error
	if e.nats, err = natsd.Start(natsd.Config{
		DataDir: cfg.DataDir, Lock: cfg.DataDirLock, Name: cfg.Name, Fsync: cfg.SyncAlways, Domain: edge.Domain(cfg.Name),
		LeafRemotes: cfg.CellLeaf, LeafPassword: agent.LeafPassword(cfg.Keys.Cell()), TLS: leafTLS(cfg.LeafCA),
		PingInterval: pingInterval, LeafHeld: true, // until the control plane confirms the name (claim.go)
	}, base.With("component", "nats")); err != nil {
		return nil, err
	}
	fail := func(err error) (*Edge, error) {
		e.nats.Shutdown()
		return nil, err
	}
	js := e.nats.JetStream()
	if err := claimDataDir(ctx, cfg.DataDir, cfg.Name, js); err != nil {
		return fail(err)
	}
	if e.instance, err = dataDirInstance(cfg.DataDir); err != nil { // under the data dir's lock, which the server holds
		return fail(err)
	}
	log = log.With("instance", e.instance)
	e.log = log
	e.claim = newNameClaim(cfg.Name, e.nats, log)
	if err := checkRoom(ctx, cfg, e.nats, js); err != nil {
		return fail(err)
	}
	if e.buffer, err = edge.Open(ctx, js, edge.Config{Name: cfg.Name, MaxBytes: cfg.MaxBuffer, DedupWindow: cfg.DedupWindow}); err != nil {
		return fail(err)
	}
	e.monitor = newMonitor(cfg, e.nats, e.buffer, e.started)
	e.monitor.sample(ctx)
	if e.gateway, err = ingest.New(ctx, js, e.registry, ingest.Config{
		MaxPayload: cfg.MaxPayload, MaxBatch: cfg.MaxBatch, MaxBatchBytes: cfg.MaxBatchBytes, DedupWindow: cfg.DedupWindow,
		ConcurrentEvents: cfg.ConcurrentEvents, Partitions: &e.partitions, Subscriptions: e.subs, Catalogue: e.catalogue, Applied: e.applied.Load,
		Edge: &ingest.EdgeTarget{
			Name: cfg.Name, Buffer: e.buffer.Incarnation(), Admit: e.admit, Reserve: e.reserve,
			Full: func() error { return e.monitor.full(0, 0) }, Stale: e.configNote,
		},
		Durable: e.nats.Syncer(),
	}, base.With("component", "ingest")); err != nil {
		return fail(err)
	}
	if err := e.loadConfig(); err != nil {
		return fail(err)
	}
	if e.metrics, err = newRegistry(e.monitor); err != nil {
		return fail(err)
	}
	cfg.Keys.SetStaleNote(e.tokensNote)
	if err := e.claimName(ctx); err != nil {
		return fail(err)
	}
	log.Info("edge ready", "cell_leaf", cfg.CellLeaf, "max_buffer", cfg.MaxBuffer, "buffer_max_age", cfg.BufferMaxAge,
		"config_version", e.applied.Load(), "buffered_events", e.monitor.status().Buffer.Events, "cell_connected", e.monitor.status().CellConnected)
	return e, nil
}

// check fills in cfg's defaults and refuses what cannot run.
func check(cfg *Config) error {
	if err := ids.Validate("edge name", cfg.Name); err != nil {
		return err
	}
	if cfg.Keys == nil {
		return errors.New("edge: no keys (Config.Keys): the cell token and the API tokens publishers are checked against are required")
	}
	if len(cfg.CellLeaf) == 0 {
		return errors.New("edge: no cell leaf port: give the cell's nats-leaf://HOST:PORT (--cell-leaf)")
	}
	if cfg.DataDir == "" {
		return errors.New("edge: no data dir")
	}
	if cfg.MaxBuffer <= 0 {
		cfg.MaxBuffer = DefaultMaxBuffer
	}
	if cfg.BufferMaxAge < 0 {
		return fmt.Errorf("edge: buffer max age %s: want a positive duration (0: none)", cfg.BufferMaxAge)
	}
	if cfg.DedupWindow <= 0 {
		cfg.DedupWindow = ingest.DefaultDedupWindow
	}
	return nil
}

// Run follows the control plane, samples the link and the buffer, and
// reports them until ctx ends, or until the control plane gives this
// edge's name to another running edge process (claim.go: Run returns
// why); then it stops the NATS server (what it acknowledged is on
// disk). Every goroutine it starts has ended when it returns.
func (e *Edge) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var loops sync.WaitGroup
	loops.Go(func() { e.follow(ctx) })
	loops.Go(func() { e.monitor.run(ctx, e.log) })
	loops.Go(func() { e.report(ctx) })
	e.log.Info("edge running", "controlplane", e.upstream.URL())
	var err error
	select {
	case <-ctx.Done():
	case err = <-e.claim.lost:
		e.log.Error("stopping: this edge's name is another running edge's", "error", err)
		cancel()
	}
	loops.Wait()
	if w := e.opened.Swap(nil); w != nil { // follow stopped before it took it
		w.cancel()
		_ = w.stream.Close()
	}
	e.gateway.Close()
	e.nats.Shutdown()
	e.log.Info("edge stopped")
	return err
}

// admit is the gateway's EdgeTarget.Admit: nil while the edge takes
// events, else why not (its name refused, its buffer over age).
func (e *Edge) admit() error {
	if err := e.claim.admit(); err != nil {
		return err
	}
	return e.monitor.admit()
}

// reserve is the gateway's EdgeTarget.Reserve: room in the buffer for a
// request whose events take n bytes there, or why there is none.
func (e *Edge) reserve(n int64) (done func(wrote bool), err error) {
	if done, ok := e.buffer.Reserve(n); ok {
		return done, nil
	}
	if n > e.cfg.MaxBuffer {
		// Refused again however empty the buffer: not back-pressure.
		return nil, errkind.WithInfo(errkind.Errorf(errkind.Exhausted, "this request's events take %d bytes in %s, more than edge %s's --max-buffer (%d bytes) holds even when empty: nothing was stored; send them in smaller requests", n, edge.StreamName, e.cfg.Name, e.cfg.MaxBuffer),
			ingest.RequestTooLargeReason, nil)
	}
	// The count goes by the buffer as read up to a second ago, and the
	// cell may have taken events since: read it again (at most every
	// fullFresh) before refusing.
	e.monitor.fresh()
	done, used, ok := e.buffer.ReserveCounted(n)
	if ok {
		return done, nil
	}
	return nil, e.monitor.full(n, used)
}

// Healthy is what /healthz answers: nil once the edge accepts events (a
// config applied, from disk or the control plane), else why not. A cut
// link to the cell leaves it healthy: accepting through cuts is its job.
func (e *Edge) Healthy() error {
	if e.partitions.Count() == 0 {
		return errors.New("no configuration yet: none kept on disk, none from the control plane so far")
	}
	return nil
}

// Services are the services Handle registers, by full name.
var Services = []string{rivorav1connect.IngestServiceName}

// Handle registers the edge's one service, ingest (Publish,
// PublishBatch), behind the agent's door, bounds and error mapping.
func (e *Edge) Handle(mux *http.ServeMux, opts ...connect.HandlerOption) {
	api.HandleIngest(mux, e.cfg.Keys, e.gateway, opts...)
}

// Status is the edge's state as last sampled: its link to the cell and
// its buffer.
func (e *Edge) Status() Status { return e.monitor.status() }

// leafTLS are the TLS files of the leaf connection: the CA that verifies
// the cell's leaf port ("": plain).
func leafTLS(ca string) tlsconf.Files { return tlsconf.Files{CA: ca} }
