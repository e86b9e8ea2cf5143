// Package controlplane holds Rivora's configuration — destinations, limits
// (a reviewed YAML file plus audited runtime overrides), priorities and
// pauses — serves the admin API, and pushes every change to the agents over
// AgentService.Watch. Its own state is a snapshot and a change log (one
// record per change, holding what it changed) and an audit log under the
// state directory or, with Consul, the same in Consul KV, shared by
// several control planes of which the one holding a Consul lock leads.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/bounds"
	"github.com/rivora/rivora/internal/consullock"
	"github.com/rivora/rivora/internal/httpurl"
	"github.com/rivora/rivora/internal/ssrf"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// DefaultLimits are the built-in limits, below the limits file.
var DefaultLimits = &rivorav1.Limits{
	RatePerSecond: 50,
	Burst:         200,
	MaxAttempts:   8,
	Window:        durationpb.New(72 * time.Hour),
	Timeout:       durationpb.New(10 * time.Second),
	MaxInFlight:   32,
}

// DefaultPartitions is the default number of partitions of a cell.
const DefaultPartitions = 16

// Config configures a control plane.
type Config struct {
	// StateDir holds controlplane.json (snapshot), controlplane.log
	// (changes since) and audit.ndjson (unused with
	// ConsulURL).
	StateDir string
	// LimitsPath is the reviewed limits file ("" = none); it is watched and
	// reloaded on change.
	LimitsPath string
	Partitions int
	// ReloadEvery is how often the limits file is checked (500ms).
	ReloadEvery time.Duration
	// ConsulURL ("" = none) keeps the state and the audit log in Consul
	// KV instead of StateDir, shared by several control planes: the one
	// holding the leader lock serves, the others answer Unavailable naming
	// it and take over when it goes.
	ConsulURL string
	// AdvertiseURL is the URL the other control planes name this one by
	// while it leads; required with ConsulURL.
	AdvertiseURL string
	// RejoinDelay is how long an agent that lost its Consul session waits,
	// once back with a new one, before it is assigned partitions again
	// (default 30s): a flapping agent does not drag partitions around.
	RejoinDelay time.Duration
	// OperatorWebhook ("" = none) receives operator notices (notify.go),
	// signed with OperatorWebhookSecret ("" = the stored one, or a new
	// one, written to OperatorSecretPath). NotifyParkedAfter is how long a destination is
	// parked before it is notified (default 5m).
	OperatorWebhook       string
	OperatorWebhookSecret string
	NotifyParkedAfter     time.Duration
	// CertExpiryWarning is how long before a destination's client
	// certificate expires that health marks it expiring and an operator
	// notice goes out (default 14 days).
	CertExpiryWarning time.Duration
	// Keys (required) are what every call is checked against: the cell
	// token and the API tokens, kept equal to the stored tokens.
	Keys *auth.Keys
	// AdminTokenPath is where the first start (no token stored yet)
	// writes the bootstrap admin token, mode 0600 ("" = no bootstrap
	// token: nobody can call the API until one is stored).
	AdminTokenPath string
	// OperatorSecretPath is where a generated operator webhook secret is
	// written, mode 0600 (never logged).
	OperatorSecretPath string
	// MaxDestinations caps the registered destinations (0 =
	// DefaultMaxDestinations); see capacity.go.
	MaxDestinations int
	// Transport carries the control plane's calls to agents (nil =
	// http.DefaultTransport), e.g. with the cell's CA for TLS.
	Transport http.RoundTripper
	// StrictEventTypes refuses, at ingest, events whose type is not in
	// the event-type catalogue (--strict-event-types): it goes to the
	// agents with the catalogue, and ListEventTypes reports it.
	StrictEventTypes bool
	// Guard refuses destination URLs (and the operator webhook) whose
	// literal address or host name it denies (--allow-destination-cidr);
	// nil denies by default and allows nothing more. The agents enforce
	// their own guard on every address they dial.
	Guard *ssrf.Guard
}

// ControlPlane is the cell's configuration and its operations: it owns the
// state (store, audit log), the limits file in force, the agent registry
// and, with Consul, the leader election. Its operations return domain
// errors (errors.go); adminHandler and agentHandler serve them as
// rivora.v1.AdminService and rivora.v1.AgentService (Handle). Every
// goroutine it starts is owned by Run, which returns once they ended.
type ControlPlane struct {
	cfg   Config
	store Store
	audit AuditLog
	// consul is the Consul client (nil without ConsulURL).
	consul *api.Client
	// election is the leader election (nil without ConsulURL: alone, this
	// control plane always leads).
	election *election
	limits   atomic.Pointer[LimitsFile]
	// limitsStamp is the limits file's stamp (fileStamp) when New read
	// it; Run reloads the file when it differs.
	limitsStamp string
	agents      *agentRegistry
	// edges is what this control plane saw of the registered edges
	// (their watches and reports); which are registered is the store's.
	edges *edgeRegistry
	// operator routes the agents' operator services (HandleOperator).
	operator *operatorRouter
	// keys are what every call is checked against (Config.Keys), their
	// API tokens kept equal to the store's (syncKeys).
	keys *auth.Keys
	log  *slog.Logger
	now  func() time.Time
	// notify sends operator notices (nil without OperatorWebhook).
	notify *notifier
	// own is each token's own config versions, for a customer token's
	// config status (GetConfigStatus).
	own *ownVersions

	// changed is notified on every config or assignment change: it wakes
	// every Watch stream.
	changed broadcaster

	mu     sync.Mutex
	runCtx context.Context // Run's context, once Run started
}

// New opens the state, loads the limits file (a bad file is an error
// here) and returns a control plane. Call Run to watch the file and expire
// overrides.
func New(cfg Config, log *slog.Logger) (*ControlPlane, error) {
	if cfg.Partitions <= 0 {
		cfg.Partitions = DefaultPartitions
	}
	if cfg.ReloadEvery <= 0 {
		cfg.ReloadEvery = 500 * time.Millisecond
	}
	if cfg.Keys == nil {
		return nil, errors.New("control plane: no keys (Config.Keys): the cell token and API tokens every call is checked against are required")
	}
	cp := &ControlPlane{cfg: cfg, log: log, now: time.Now, keys: cfg.Keys}
	if cfg.ConsulURL == "" {
		store, err := OpenStore(cfg.StateDir)
		if err != nil {
			return nil, err
		}
		if err := fixPartitions(cfg.StateDir, cfg.Partitions); err != nil {
			return nil, err
		}
		audit, err := OpenAuditLog(cfg.StateDir)
		if err != nil {
			return nil, err
		}
		if mode, open := audit.OthersMayRead(); open {
			log.Warn("the audit log is readable by every user of this machine, and this process may not change that: make it 0600 or 0640 (its details hold destination URLs, whose query may carry a partner's credential)", "path", audit.path, "mode", mode.String())
		}
		cp.store, cp.audit = store, audit
	} else {
		if err := checkHTTPURL("advertise URL", cfg.AdvertiseURL); err != nil {
			return nil, fmt.Errorf("%w (the other control planes name the leader by it)", err)
		}
		client, err := newConsulClient(cfg.ConsulURL)
		if err != nil {
			return nil, err
		}
		// Nothing is read from Consul until this control plane leads, so
		// it starts while Consul is down.
		store := newConsulStore(client)
		cp.consul, cp.store, cp.audit = client, store, NewConsulAuditLog(client)
		cp.election = newElection(client, cfg.AdvertiseURL, log, func(ctx context.Context, session string) error {
			store.fence(ConsulLeaderKey, session)
			if err := fixPartitionsConsul(ctx, client.KV(), cfg.Partitions); err != nil {
				return err
			}
			if err := store.Reload(ctx); err != nil {
				return err
			}
			cp.syncKeys()
			if err := cp.bootstrap(); err != nil {
				return err
			}
			cp.elected()
			return nil
		})
	}
	cp.edges = newEdgeRegistry()
	cp.own = newOwnVersions()
	cp.agents = newAgentRegistry(cp.consul, cfg.Transport, cfg.Keys.Cell(), log)
	if cfg.RejoinDelay > 0 {
		cp.agents.rejoinDelay = cfg.RejoinDelay
	}
	cp.agents.onChange = cp.broadcast
	cp.agents.leading = func() bool { return cp.leaderOnly() == nil }
	cp.operator = newOperatorRouter(cp.agents, cfg.Partitions, cfg.Transport)
	lf := emptyLimitsFile()
	// Stamped before it is read: a change made while it is read, or
	// before Run starts, is reloaded by Run.
	cp.limitsStamp = fileStamp(cfg.LimitsPath)
	if cfg.LimitsPath != "" {
		var err error
		if lf, err = LoadLimitsFile(cfg.LimitsPath); err != nil {
			return nil, err
		}
	}
	cp.limits.Store(lf)
	if cfg.OperatorWebhook != "" {
		if err := validateURL(cfg.OperatorWebhook); err != nil {
			return nil, fmt.Errorf("operator webhook: %w", err)
		}
		hook, err := cp.guardURL(cfg.OperatorWebhook)
		if err != nil {
			return nil, fmt.Errorf("operator webhook: %w", err)
		}
		if _, err := secretOrNew(cfg.OperatorWebhookSecret); err != nil {
			return nil, fmt.Errorf("operator webhook: %w", err)
		}
		cp.notify = newNotifier(cp, hook, cfg.OperatorWebhookSecret, cfg.NotifyParkedAfter)
	}
	if cp.election != nil {
		log.Info("control plane ready; campaigning for leadership", "consul", cfg.ConsulURL, "advertise", cfg.AdvertiseURL, "limits_file", cfg.LimitsPath, "partitions", cfg.Partitions)
		return cp, nil
	}
	cp.syncKeys()
	if err := cp.bootstrap(); err != nil {
		return nil, err
	}
	version, dests := cp.store.Snapshot()
	cp.warnSharedOrigins(dests)
	if cfg.LimitsPath != "" {
		cp.record("limits.load", "", systemActor, fmt.Sprintf("%s at start: %s", filepath.Base(cfg.LimitsPath), describeLimitsFile(lf)), version)
	}
	log.Info("control plane ready", "version", version, "destinations", len(dests), "limits_file", cfg.LimitsPath, "partitions", cfg.Partitions)
	return cp, nil
}

// elected runs when this control plane starts leading, its state just
// loaded from Consul: the limits in force are now its file's.
func (cp *ControlPlane) elected() {
	version, dests := cp.store.Snapshot()
	cp.warnSharedOrigins(dests)
	if cp.cfg.LimitsPath != "" {
		lf := cp.limits.Load()
		cp.record("limits.load", "", systemActor, fmt.Sprintf("%s on becoming the leader (%s): %s", filepath.Base(cp.cfg.LimitsPath), cp.cfg.AdvertiseURL, describeLimitsFile(lf)), version)
	}
	cp.log.Info("state loaded from Consul", "version", version, "destinations", len(dests), "tokens", cp.keys.Count())
	cp.broadcast()
}

func newConsulClient(raw string) (*api.Client, error) {
	if err := checkHTTPURL("consul URL", raw); err != nil {
		return nil, err
	}
	return consullock.NewClient(raw)
}

// checkHTTPURL accepts http://HOST[:PORT] and https://HOST[:PORT].
func checkHTTPURL(what, raw string) error {
	if _, err := httpurl.ParseBase(raw); err != nil {
		return fmt.Errorf("%s %q: want http://HOST:PORT or https://HOST:PORT", what, raw)
	}
	return nil
}

// Services are the services Handle registers, and OperatorServices those
// HandleOperator does, by full name.
var (
	Services = []string{
		rivorav1connect.AdminServiceName, rivorav1connect.TokenServiceName, rivorav1connect.AgentServiceName,
		rivorav1connect.SubscriptionServiceName, rivorav1connect.EventTypeServiceName, rivorav1connect.EdgeServiceName,
	}
	OperatorServices = []string{rivorav1connect.EventServiceName, rivorav1connect.LaneServiceName, rivorav1connect.ArchiveServiceName}
)

// Handle registers the admin, token, subscription, event-type, agent and
// edge services on mux, behind the
// gates every call passes: only the leader answers (leaderInterceptor),
// the caller must be let in by auth.Policies (auth.Interceptor), and
// domain errors become Connect codes in one place (errorInterceptor).
// Agent and edge streams also end when the leadership term they began in
// ends.
func (cp *ControlPlane) Handle(mux *http.ServeMux, opts ...connect.HandlerOption) {
	cp.handle(mux, cp.leaderOnly, opts...)
}

// handle is Handle with the leader gate given, so a test can stand in a
// follower's.
func (cp *ControlPlane) handle(mux *http.ServeMux, gate func() error, opts ...connect.HandlerOption) {
	opts = cp.gated(gate, opts)
	handle := cp.boundedHandle(mux, gate)
	handle(rivorav1connect.NewAdminServiceHandler(&adminHandler{cp: cp}, opts...))
	handle(rivorav1connect.NewTokenServiceHandler(&tokenHandler{cp: cp}, opts...))
	handle(rivorav1connect.NewSubscriptionServiceHandler(&subscriptionHandler{cp: cp}, opts...))
	handle(rivorav1connect.NewEventTypeServiceHandler(&eventTypeHandler{cp: cp}, opts...))
	path, agents := rivorav1connect.NewAgentServiceHandler(&agentHandler{cp: cp}, opts...)
	if cp.election != nil {
		agents = cp.election.scope(agents)
	}
	handle(path, agents)
	path, edges := rivorav1connect.NewEdgeServiceHandler(&edgeHandler{cp: cp}, opts...)
	if cp.election != nil {
		edges = cp.election.scope(edges)
	}
	handle(path, edges)
}

// gated puts the gates every call passes in front of opts, outermost
// first: error mapping, the leader gate (a follower's tokens may be
// stale, so it answers Unavailable before judging any), authentication
// and authorization, hiding agents' failures from customer tokens (it
// needs the caller's principal, which auth's interceptor puts in the
// context), and the bounds on request strings and sizes.
func (cp *ControlPlane) gated(gate func() error, opts []connect.HandlerOption) []connect.HandlerOption {
	return append([]connect.HandlerOption{
		connect.WithInterceptors(errorInterceptor, noAgentsInterceptor{why: cp.noAgentsWhy}, leaderInterceptor{gate: gate}, auth.NewInterceptor(cp.keys),
			hideAgentsInterceptor{log: cp.log}, bounds.Interceptor()),
		bounds.ReadMax(bounds.DefaultMessage),
	}, opts...)
}

// boundedHandle registers handlers on mux behind the door (auth.Door: the
// leader gate, then the caller's token and role, from the headers alone)
// with their raw bodies bounded like their messages (bounds.DefaultMessage:
// no control-plane request carries a payload).
func (cp *ControlPlane) boundedHandle(mux *http.ServeMux, gate func() error) func(string, http.Handler) {
	door := func() error { return asConnect(gate()) }
	return func(path string, h http.Handler) {
		mux.Handle(path, auth.Door(cp.keys, door, bounds.Handler(bounds.DefaultMessage, h)))
	}
}

// HandleOperator registers the operator services agents serve for what
// they own — rivora.v1.EventService, LaneService and ArchiveService —
// answered by routing each call to the agent that can answer it
// (operatorRouter), behind the same gates as Handle: only the leader
// knows the agents. With it, one address (this one) serves everything an
// operator needs. `rivora controlplane` registers it; `rivora dev` does
// not, since its agent serves these services itself on the same mux.
func (cp *ControlPlane) HandleOperator(mux *http.ServeMux, opts ...connect.HandlerOption) {
	cp.handleOperator(mux, cp.leaderOnly, opts...)
}

func (cp *ControlPlane) handleOperator(mux *http.ServeMux, gate func() error, opts ...connect.HandlerOption) {
	opts = cp.gated(gate, opts)
	handle := cp.boundedHandle(mux, gate)
	handle(rivorav1connect.NewEventServiceHandler(cp.operator, opts...))
	handle(rivorav1connect.NewLaneServiceHandler(cp.operator, opts...))
	handle(rivorav1connect.NewArchiveServiceHandler(cp.operator, opts...))
}

// Run reloads the limits file when it changes and expires overrides, until
// ctx ends. With Consul it also campaigns for leadership, does the rest
// only while leading, and on return has given the lock up.
func (cp *ControlPlane) Run(ctx context.Context) error {
	cp.mu.Lock()
	cp.runCtx = ctx
	cp.mu.Unlock()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { cp.agents.run(ctx) })
	if cp.election != nil {
		wg.Go(func() { cp.election.run(ctx) })
	}
	if cp.notify != nil {
		wg.Go(func() { cp.notify.run(ctx) })
	}
	t := time.NewTicker(cp.cfg.ReloadEvery)
	defer t.Stop()
	lastStamp := cp.limitsStamp
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if cp.leaderOnly() != nil {
			continue // a follower writes nothing; a changed file is reloaded once it leads
		}
		if cp.cfg.LimitsPath != "" {
			if stamp := fileStamp(cp.cfg.LimitsPath); stamp != lastStamp {
				lastStamp = stamp
				cp.reloadLimits()
			}
		}
		cp.expireOverrides()
	}
}

// runContext is Run's context (Background before Run starts): work that
// must not outlive the control plane, such as delayed session cleanup,
// checks it.
func (cp *ControlPlane) runContext() context.Context {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.runCtx == nil {
		return context.Background()
	}
	return cp.runCtx
}

func fileStamp(path string) string {
	if path == "" {
		return ""
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "missing"
	}
	return fmt.Sprintf("%d/%d", fi.ModTime().UnixNano(), fi.Size())
}

// reloadLimits swaps in a changed limits file, or keeps the last good one
// and logs why the new one was refused.
func (cp *ControlPlane) reloadLimits() {
	lf, err := LoadLimitsFile(cp.cfg.LimitsPath)
	if err != nil {
		cp.log.Error("limits file refused; the last good one stays in force", "error", err)
		cp.record("limits.reject", "", systemActor, err.Error(), 0)
		return
	}
	old := cp.limits.Swap(lf)
	version, err := cp.store.Update(func(*DestinationTx) error { return nil })
	if err != nil {
		cp.limits.Store(old)
		cp.log.Error("limits reload: saving the new config version failed", "error", err)
		return
	}
	cp.record("limits.reload", "", systemActor, fmt.Sprintf("%s: %s", filepath.Base(cp.cfg.LimitsPath), diffLimitsFiles(old, lf)), version)
	cp.log.Info("limits file reloaded", "path", cp.cfg.LimitsPath, "version", version)
	cp.broadcast()
}

func (cp *ControlPlane) expireOverrides() {
	now := cp.now()
	var expired []string
	version, err := cp.store.Update(func(tx *DestinationTx) error {
		expired = expired[:0]
		tx.Each(func(d *rivorav1.Destination) {
			if o := d.GetOverride(); o.GetExpiresAt() != nil && !o.GetExpiresAt().AsTime().After(now) {
				expired = append(expired, d.GetId())
			}
		})
		if len(expired) == 0 {
			return errNothingToDo
		}
		for _, id := range expired {
			d, _ := tx.Get(id)
			d.Override = nil
		}
		return nil
	})
	if errors.Is(err, errNothingToDo) {
		return
	}
	if err != nil {
		cp.log.Error("expire overrides", "error", err)
		return
	}
	for _, id := range expired {
		cp.record("limits.expire", id, systemActor, "override expired", version)
		cp.notify.overrideExpired(id, version, now)
	}
	cp.broadcast()
}

var errNothingToDo = errors.New("nothing to do")

// broadcast wakes every Watch stream.
func (cp *ControlPlane) broadcast() { cp.changed.notify() }

// changes returns a channel closed by the next broadcast.
func (cp *ControlPlane) changes() <-chan struct{} { return cp.changed.wait() }

func (cp *ControlPlane) record(action, destinationID string, who actor, detail string, version uint64, reason ...string) {
	// Every field is bounded: a detail quoting what was refused (a limits
	// file's key of megabytes) must not make a line no reader takes.
	e := &rivorav1.AuditEntry{
		At: timestamppb.New(cp.now()), Version: version, Author: bounds.Truncate(who.name, bounds.Name), TokenId: bounds.Truncate(who.tokenID, bounds.Name),
		Action: action, DestinationId: bounds.Truncate(destinationID, bounds.Name), Detail: bounds.Truncate(detail, bounds.AuditDetail),
	}
	if len(reason) > 0 {
		e.Reason = bounds.Truncate(reason[0], bounds.Text)
	}
	if err := cp.audit.Append(e); err != nil {
		cp.log.Error("audit log append failed", "action", action, "error", err)
	}
}

// render turns a stored destination into the form agents get: limits are
// the effective ones, the secret is there (agents sign with it). API
// answers hide the secret (answer).
func (cp *ControlPlane) render(d *rivorav1.Destination) *rivorav1.Destination {
	out := proto.Clone(d).(*rivorav1.Destination)
	out.Limits, _ = cp.effective(d)
	out.PauseReason = openPauseReason(d)
	return out
}

// effective merges, per field: built-in defaults < limits file defaults <
// the destination's own settings < the limits file's entry for it < an
// unexpired override.
func (cp *ControlPlane) effective(d *rivorav1.Destination) (*rivorav1.Limits, map[string]*rivorav1.LimitSource) {
	lf := cp.limits.Load()
	layers := []layer{
		{DefaultLimits, &rivorav1.LimitSource{Source: "default"}},
		{lf.Defaults, &rivorav1.LimitSource{Source: "file"}},
		{d.GetConfigured(), &rivorav1.LimitSource{Source: "destination"}},
		{lf.Destinations[d.GetId()], &rivorav1.LimitSource{Source: "file"}},
	}
	o := d.GetOverride()
	if o == nil || (o.GetExpiresAt() != nil && !o.GetExpiresAt().AsTime().After(cp.now())) {
		return mergeLimits(layers)
	}
	layers = append(layers, layer{o.GetLimits(), &rivorav1.LimitSource{Source: "override", ExpiresAt: o.GetExpiresAt()}})
	eff, sources := mergeLimits(layers)
	// Each overridden field names its own author and reason (a rate cut
	// and a later window change of one override are two reasons).
	for f, src := range sources {
		if src.GetSource() == "override" {
			of := overrideField(o, f)
			src.Author, src.Reason = of.GetAuthor(), of.GetReason()
		}
	}
	return eff, sources
}

// fileLimits is what the defaults and the limits file alone give.
func (cp *ControlPlane) fileLimits(id string) *rivorav1.Limits {
	lf := cp.limits.Load()
	l, _ := mergeLimits([]layer{
		{DefaultLimits, &rivorav1.LimitSource{Source: "default"}},
		{lf.Defaults, &rivorav1.LimitSource{Source: "file"}},
		{lf.Destinations[id], &rivorav1.LimitSource{Source: "file"}},
	})
	return l
}

// answer is a stored destination as API answers show it: rendered, its
// secret replaced by its fingerprint.
func (cp *ControlPlane) answer(d *rivorav1.Destination) *rivorav1.Destination {
	return withoutSecret(cp.render(d))
}

// withoutSecret replaces d's signing secrets (the previous one of a
// rotation too) and its custom header values by their fingerprints.
func withoutSecret(d *rivorav1.Destination) *rivorav1.Destination {
	d.SecretFingerprint = auth.Fingerprint(d.GetSecret())
	d.Secret = ""
	withoutPreviousSecret(d)
	withoutHeaderValues(d)
	withoutEndpointAuthSecrets(d)
	withoutSigningSecrets(d)
	return d
}

// snapshot is the current config version and every destination rendered
// (secrets included: for the agents' feed).
func (cp *ControlPlane) snapshot() (uint64, []*rivorav1.Destination) {
	version, dests := cp.store.Snapshot()
	for i, d := range dests {
		dests[i] = cp.render(d)
	}
	return version, dests
}

// actor is who made a change, as the audit log names it: an API token's
// name and id, or Rivora itself.
type actor struct {
	name, tokenID string
}

var (
	// rivoraActor makes Rivora's own changes (a 410 disable, the
	// operator-webhook destination).
	rivoraActor = actor{name: RivoraAuthor}
	// systemActor is the limits file's loads and reloads, expiries and
	// the bootstrap token.
	systemActor = actor{name: "system"}
)

// caller is the actor of the call ctx belongs to: the token it was made
// with, whatever the request's author field says.
func caller(ctx context.Context) actor {
	name, id := auth.Author(ctx, "unknown")
	return actor{name: name, tokenID: id}
}
