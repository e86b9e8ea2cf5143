package ownership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
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

// Consul grants leases with one Consul session per agent: a partition's
// lock is its key, acquired with the session. Sessions use behaviour
// "release", so a dead agent's locks free themselves (after the
// lock-delay).
type Consul struct {
	cfg    ConsulConfig
	client *api.Client
	log    *slog.Logger

	// start anchors lastRenewal on the monotonic clock.
	start time.Time
	// lastRenewal is when (since start) the last renewal that Consul
	// confirmed was sent.
	lastRenewal atomic.Int64

	mu      sync.Mutex
	session string
	changed chan struct{}
	leases  map[int]*Lease

	cancel context.CancelFunc
	done   chan struct{}
}

// NewConsul creates the agent's session (retrying until Consul answers or
// ctx ends) and keeps it renewed until Close.
func NewConsul(ctx context.Context, cfg ConsulConfig, log *slog.Logger) (*Consul, error) {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.LockDelay <= 0 {
		cfg.LockDelay = DefaultLockDelay
	}
	client, err := NewConsulClient(cfg.URL)
	if err != nil {
		return nil, err
	}
	c := &Consul{cfg: cfg, client: client, log: log, start: time.Now(), changed: make(chan struct{}, 1), leases: make(map[int]*Lease), done: make(chan struct{})}
	if err := c.newSession(ctx); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel
	go c.keepAlive(runCtx)
	return c, nil
}

// NewConsulClient makes a Consul API client for an http(s) URL.
func NewConsulClient(rawURL string) (*api.Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("consul address %q: want an http:// or https:// URL such as http://127.0.0.1:8500", rawURL)
	}
	cfg := api.DefaultConfig()
	cfg.Address, cfg.Scheme = u.Host, u.Scheme
	return api.NewClient(cfg)
}

// Session is the current session id.
func (c *Consul) Session() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session
}

// SessionChanged fires after a lost session was replaced.
func (c *Consul) SessionChanged() <-chan struct{} { return c.changed }

func (c *Consul) sinceStart(t time.Time) int64 { return int64(t.Sub(c.start)) }

// alive: a renewal Consul confirmed was sent less than a TTL ago.
func (c *Consul) alive(now time.Time) bool {
	return c.sinceStart(now)-c.lastRenewal.Load() < int64(c.cfg.TTL)
}

func (c *Consul) newSession(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		sent := time.Now()
		id, _, err := c.client.Session().Create(&api.SessionEntry{
			Name:      "rivora-agent-" + c.cfg.Agent,
			TTL:       c.cfg.TTL.String(),
			LockDelay: c.cfg.LockDelay,
			Behavior:  api.SessionBehaviorRelease,
		}, (&api.WriteOptions{}).WithContext(ctx))
		if err == nil {
			c.lastRenewal.Store(c.sinceStart(sent))
			c.mu.Lock()
			c.session = id
			c.mu.Unlock()
			c.log.Info("consul session created", "session", id, "ttl", c.cfg.TTL, "lock_delay", c.cfg.LockDelay)
			return nil
		}
		c.log.Warn("create consul session; retrying", "consul", c.cfg.URL, "error", err, "retry_in", backoff)
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, 2*time.Second)
		case <-ctx.Done():
			return fmt.Errorf("create consul session at %s: %w", c.cfg.URL, errors.Join(ctx.Err(), err))
		}
	}
}

// keepAlive renews the session every TTL/3 and, between renewals, checks
// that leases are still backed by a live session: once a TTL passed
// without a confirmed renewal every lease is lost (before Consul can
// expire the session and the lock-delay can end).
func (c *Consul) keepAlive(ctx context.Context) {
	defer close(c.done)
	renew := time.NewTicker(c.cfg.TTL / 3)
	defer renew.Stop()
	check := time.NewTicker(100 * time.Millisecond)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-check.C:
			if !c.alive(time.Now()) {
				c.loseAll(errors.New("consul session not renewed within its TTL"))
			}
		case <-renew.C:
			c.renew(ctx)
		}
	}
}

func (c *Consul) renew(ctx context.Context) {
	id := c.Session()
	sent := time.Now()
	rctx, cancel := context.WithTimeout(ctx, c.cfg.TTL/3)
	entry, _, err := c.client.Session().Renew(id, (&api.WriteOptions{}).WithContext(rctx))
	cancel()
	switch {
	case err != nil:
		c.log.Warn("renew consul session", "session", id, "error", err, "last_renewed_ago", time.Duration(c.sinceStart(time.Now())-c.lastRenewal.Load()).Round(time.Millisecond))
	case entry == nil:
		// Consul invalidated it (expired while we were cut off or frozen,
		// or destroyed by the control plane): every lock is gone.
		c.log.Warn("consul session is gone; its partitions are lost", "session", id)
		c.loseAll(errors.New("consul session invalidated"))
		if err := c.newSession(ctx); err != nil {
			return
		}
		select {
		case c.changed <- struct{}{}:
		default:
		}
	default:
		// Only a renewal of the session the leases were taken with counts.
		if c.Session() == id {
			c.lastRenewal.Store(c.sinceStart(sent))
		}
	}
}

func (c *Consul) loseAll(cause error) {
	c.mu.Lock()
	leases := c.leases
	c.leases = make(map[int]*Lease)
	c.mu.Unlock()
	for _, l := range leases {
		l.lose(cause)
	}
}

// TryAcquire takes partition p's lock with the session.
func (c *Consul) TryAcquire(ctx context.Context, p int) (*Lease, error) {
	if !c.alive(time.Now()) {
		return nil, ErrNoSession
	}
	id := c.Session()
	key := LockKey(p)
	c.mu.Lock()
	cur := c.leases[p]
	c.mu.Unlock()
	if cur != nil && cur.Valid() {
		// Held here already: one lease per partition.
		return nil, ErrHeld
	}
	ok, _, err := c.client.KV().Acquire(&api.KVPair{Key: key, Value: []byte(c.cfg.Agent), Session: id}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("acquire %s: %w", key, err)
	}
	if !ok {
		return nil, ErrHeld
	}
	pair, meta, err := c.client.KV().Get(key, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil || pair == nil || pair.Session != id {
		// Acquired, then lost at once, or unreadable: give it back.
		_, _, _ = c.client.KV().Release(&api.KVPair{Key: key, Session: id}, nil)
		if err == nil {
			err = errors.New("lock changed hands right after it was acquired")
		}
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	var lease *Lease
	lease = newLease(p, pair.LockIndex, c.alive, func(ctx context.Context) error {
		c.forget(p, lease)
		_, _, err := c.client.KV().Release(&api.KVPair{Key: key, Session: id}, (&api.WriteOptions{}).WithContext(ctx))
		return err
	})
	c.mu.Lock()
	if c.session != id {
		c.mu.Unlock()
		lease.lose(errors.New("consul session replaced"))
		return nil, errors.New("consul session replaced while acquiring")
	}
	c.leases[p] = lease
	c.mu.Unlock()
	go c.watch(lease, key, id, meta.LastIndex)
	return lease, nil
}

func (c *Consul) forget(p int, lease *Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leases[p] == lease {
		delete(c.leases, p)
	}
}

// watch follows the lock key with blocking queries and loses the lease as
// soon as the key is no longer held by this session.
func (c *Consul) watch(lease *Lease, key, session string, index uint64) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-lease.Lost()
		cancel()
	}()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		pair, meta, err := c.client.KV().Get(key, (&api.QueryOptions{WaitIndex: index, WaitTime: 30 * time.Second}).WithContext(ctx))
		if err != nil {
			if ctx.Err() == nil {
				select {
				case <-time.After(backoff):
					backoff = min(2*backoff, 2*time.Second)
				case <-ctx.Done():
				}
			}
			continue
		}
		backoff = 100 * time.Millisecond
		if pair == nil || pair.Session != session {
			c.forget(lease.P, lease)
			lease.lose(fmt.Errorf("lock %s no longer held by this agent's session", key))
			return
		}
		if meta.LastIndex < index {
			index = 0 // the index went backwards (Consul restored): start over
		} else {
			index = meta.LastIndex
		}
	}
}

// Close releases every lock and destroys the session.
func (c *Consul) Close(ctx context.Context) error {
	c.mu.Lock()
	leases := make([]*Lease, 0, len(c.leases))
	for _, l := range c.leases {
		leases = append(leases, l)
	}
	c.mu.Unlock()
	var errs []error
	for _, l := range leases {
		errs = append(errs, l.Release(ctx))
	}
	c.cancel()
	<-c.done
	_, err := c.client.Session().Destroy(c.Session(), (&api.WriteOptions{}).WithContext(ctx))
	errs = append(errs, err)
	return errors.Join(errs...)
}
