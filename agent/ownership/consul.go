package ownership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/rivora/rivora/internal/backoff"
	"github.com/rivora/rivora/internal/consullock"
)

// ConsulConfig configures the Consul Locker.
type ConsulConfig struct {
	// URL is the Consul agent's HTTP API (http://127.0.0.1:8500).
	URL string
	// Agent is this agent's name, stored as the lock keys' value.
	Agent string
	// TTL is the session TTL (default 10s, Consul's minimum). The session
	// is renewed every TTL/3; leases stop being Valid once a TTL passed
	// since the last renewal that Consul answered.
	TTL time.Duration
	// LockDelay is how long Consul keeps a dead session's locks from
	// anyone else (default 5s): the margin in which a cut-off owner stops.
	LockDelay time.Duration
}

// Defaults of ConsulConfig.
const (
	DefaultTTL       = 10 * time.Second
	DefaultLockDelay = 5 * time.Second
)

// LockKey is partition p's ownership lock in Consul KV.
func LockKey(p int) string { return "rivora/partitions/" + strconv.Itoa(p) + "/owner" }

// Consul grants leases with one Consul session per agent (a
// consullock.Session): a partition's lock is its key, acquired with the
// session. Sessions use behaviour "release", so a dead agent's locks free
// themselves (after the lock-delay). A session Consul ended is replaced
// by a new one, announced on SessionChanged; a session merely not renewed
// in time loses its leases but is kept, and serves again once a renewal
// is confirmed. Kept in this agent, that is: once unconfirmed for a TTL it
// asks Consul to destroy it (consullock's DestroyUnconfirmed), because
// when only Consul's answers are lost its renewals still arrive and would
// keep its locks from the other agents for as long as that lasts. If
// Consul was down, the destroy did not arrive and nothing is lost.
//
// It owns the current session; Run keeps it alive. The session holds at
// most one lease per partition.
type Consul struct {
	cfg    ConsulConfig
	client *api.Client
	log    *slog.Logger

	mu      sync.Mutex
	session *consullock.Session // nil until Run created the first
	// replacedAt is when session replaced one Consul ended (zero for
	// the first).
	replacedAt time.Time
	ready      chan struct{} // closed once the first session exists
	changed    chan struct{}
}

// NewConsul is the agent's Consul locker. Run creates its session
// (retrying until Consul answers) and keeps it renewed: the session's TTL
// runs from the moment Run can renew it, however long the agent took to
// start.
func NewConsul(cfg ConsulConfig, log *slog.Logger) (*Consul, error) {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.LockDelay <= 0 {
		cfg.LockDelay = DefaultLockDelay
	}
	client, err := consullock.NewClient(cfg.URL)
	if err != nil {
		return nil, err
	}
	return &Consul{cfg: cfg, client: client, log: log, ready: make(chan struct{}), changed: make(chan struct{}, 1)}, nil
}

// Run creates the session (retrying until Consul answers), keeps it
// alive, and replaces it whenever Consul ended it (expired while this
// agent was cut off or frozen, or destroyed by the control plane: every
// lock it held is gone then), until ctx ends.
func (c *Consul) Run(ctx context.Context) error {
	first, err := c.newSession(ctx)
	if err != nil {
		return nil // ctx ended before Consul answered
	}
	c.mu.Lock()
	c.session = first
	c.mu.Unlock()
	close(c.ready)
	c.keepAlive(ctx)
	return nil
}

// Ready is closed once Run created the first session.
func (c *Consul) Ready() <-chan struct{} { return c.ready }

// Session is the current session id ("" before the first).
func (c *Consul) Session() string {
	if s := c.current(); s != nil {
		return s.ID()
	}
	return ""
}

func (c *Consul) current() *consullock.Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session
}

// SessionReplacedAt is when the current session replaced one Consul
// ended (zero for the first).
func (c *Consul) SessionReplacedAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.replacedAt
}

// SessionChanged fires after a lost session was replaced.
func (c *Consul) SessionChanged() <-chan struct{} { return c.changed }

// newSession creates a session, retrying until Consul answers or ctx ends.
func (c *Consul) newSession(ctx context.Context) (*consullock.Session, error) {
	cfg := consullock.SessionConfig{
		Name:       "rivora-agent-" + c.cfg.Agent,
		TTL:        c.cfg.TTL,
		LockDelay:  c.cfg.LockDelay,
		NodeHealth: true,
		// Unconfirmed for a TTL, this agent has stopped writing: let
		// Consul end the session so its partitions move, even when only
		// the answers are lost (see Consul).
		DestroyUnconfirmed: true,
		Retry:              backoff.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second},
		Log:                c.log,
	}
	retry := cfg.Retry
	for {
		s, err := consullock.CreateSession(ctx, c.client, cfg)
		if err == nil {
			c.log.Info("consul session created", "session", s.ID(), "ttl", c.cfg.TTL, "lock_delay", c.cfg.LockDelay)
			return s, nil
		}
		d := retry.Next()
		c.log.Warn("create consul session; retrying", "consul", c.cfg.URL, "error", err, "retry_in", d)
		if !backoff.Sleep(ctx, d) {
			return nil, fmt.Errorf("create consul session at %s: %w", c.cfg.URL, errors.Join(ctx.Err(), err))
		}
	}
}

// keepAlive is Run's loop.
func (c *Consul) keepAlive(ctx context.Context) {
	for {
		s := c.current()
		if err := s.KeepAlive(ctx); err == nil {
			return // ctx ended
		}
		c.log.Warn("consul session is gone; its partitions are lost", "session", s.ID())
		next, err := c.newSession(ctx)
		if err != nil {
			return
		}
		c.mu.Lock()
		c.session, c.replacedAt = next, time.Now()
		c.mu.Unlock()
		select {
		case c.changed <- struct{}{}:
		default:
		}
	}
}

// TryAcquire takes partition p's lock with the session.
func (c *Consul) TryAcquire(ctx context.Context, p int) (*Lease, error) {
	s := c.current()
	if s == nil {
		return nil, ErrNoSession // Run has not created it yet
	}
	lock, err := s.Lock(ctx, LockKey(p), []byte(c.cfg.Agent))
	switch {
	case errors.Is(err, consullock.ErrNotRenewed), errors.Is(err, consullock.ErrGone):
		return nil, ErrNoSession // being renewed, or replaced
	case errors.Is(err, consullock.ErrHeld):
		return nil, ErrHeld
	case err != nil:
		return nil, err
	}
	if c.current() != s {
		// Only a session that ended is replaced, and its leases with it.
		return nil, errors.New("consul session replaced while acquiring")
	}
	return &Lease{P: p, Epoch: lock.Epoch, grant: lock}, nil
}

// Close releases every lock and destroys the session; call it once Run
// returned.
func (c *Consul) Close(ctx context.Context) error {
	if s := c.current(); s != nil {
		return s.Destroy(ctx)
	}
	return nil
}
