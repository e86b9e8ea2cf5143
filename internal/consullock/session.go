package consullock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/rivora/rivora/internal/backoff"
)

// expiryCheck is how often KeepAlive checks that the session is still
// confirmed alive, so that Lost fires soon after a missed TTL.
const expiryCheck = 100 * time.Millisecond

// SessionConfig configures a Session.
type SessionConfig struct {
	// Name is the session's name in Consul: who holds it.
	Name string
	// TTL is the session's TTL (Consul's minimum is 10s). KeepAlive renews
	// every TTL/3; the session counts as alive until a TTL after the last
	// renewal Consul confirmed was sent.
	TTL time.Duration
	// LockDelay is how long Consul keeps the locks of a session that ended
	// without giving them back from anyone else: the margin in which a
	// holder that has not noticed yet stops. 0 means Consul's default.
	LockDelay time.Duration
	// NodeHealth ties the session also to the health of the Consul node it
	// is created through (Consul's default serfHealth check); without it
	// only the TTL ends the session.
	NodeHealth bool
	// EndUnconfirmed makes KeepAlive give the session up (ErrNotRenewed)
	// once no renewal was confirmed for a TTL. Without it KeepAlive keeps
	// renewing: the session may well be alive in Consul (say Consul was
	// restarted meanwhile), and locks can be taken with it again once a
	// renewal is confirmed.
	EndUnconfirmed bool
	// DestroyUnconfirmed makes KeepAlive, once a TTL passed since the last
	// confirmed renewal and another renewal got no answer at all (an
	// error status from Consul is an answer: see unanswered), ask Consul to
	// destroy the session (once per run of unconfirmed renewals), then go
	// on renewing. Every Lease is lost before the request goes out. Consul acts on a request whose
	// answer is lost: a holder whose requests reach Consul but whose
	// answers do not (a one-way link) would otherwise keep the session and
	// its locks alive in Consul with renewals it never sees confirmed, and
	// nobody could take the locks for as long as that lasts. If the
	// destroy did not take effect (Consul down, or without a leader), the
	// session serves again once a renewal is confirmed, as without this
	// option; if it did, the first renewal answered after it reports
	// ErrGone.
	DestroyUnconfirmed bool
	// Retry spaces renewals after a failed one (never past the session's
	// expiry) and a Lease watcher's failed queries (default 100ms doubling
	// to 2s).
	Retry backoff.Backoff
	// Confirmed, if set, is called with the send time of the creation and
	// of every renewal Consul confirmed: the session is surely alive until
	// a TTL after it.
	Confirmed func(sent time.Time)
	// Log receives renewal trouble (default: discarded).
	Log *slog.Logger
}

// Session is one Consul session with behaviour "release": its locks are
// given back when it ends (after its lock-delay). It owns its Leases and
// their watchers.
//
// Invariants: confirmed only grows; once ended is set it never changes, no
// Lease is added after it, and every Lease the session had is lost; the
// watchers group grows only while ended is nil, and is waited for only
// after it is set.
type Session struct {
	client *api.Client
	cfg    SessionConfig
	id     string
	// start anchors confirmed on the monotonic clock.
	start time.Time
	// confirmed is when (since start) the last creation or renewal that
	// Consul confirmed was sent.
	confirmed atomic.Int64

	mu       sync.Mutex
	leases   map[string]*Lease // at most one per key
	ended    error             // why the session ended; nil while it lives
	watchers sync.WaitGroup    // one per Lease, until it is lost
}

// CreateSession creates a session in Consul (one attempt, bounded by ctx).
// Keep it alive with KeepAlive; end it with Destroy.
func CreateSession(ctx context.Context, client *api.Client, cfg SessionConfig) (*Session, error) {
	if cfg.TTL <= 0 {
		return nil, fmt.Errorf("consul session TTL %s: want a positive duration", cfg.TTL)
	}
	if cfg.Retry.Initial <= 0 {
		cfg.Retry = backoff.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second}
	}
	cfg.Log = cmp.Or(cfg.Log, slog.New(slog.DiscardHandler))
	entry := &api.SessionEntry{Name: cfg.Name, TTL: cfg.TTL.String(), LockDelay: cfg.LockDelay, Behavior: api.SessionBehaviorRelease}
	create := client.Session().CreateNoChecks
	if cfg.NodeHealth {
		create = client.Session().Create
	}
	s := &Session{client: client, cfg: cfg, start: time.Now(), leases: make(map[string]*Lease)}
	id, _, err := create(entry, writeOptions(ctx))
	if err != nil {
		return nil, fmt.Errorf("create consul session: %w", err)
	}
	s.id = id
	s.confirm(s.start)
	return s, nil
}

// ID is the session's id in Consul.
func (s *Session) ID() string { return s.id }

// Alive reports whether a renewal (or the creation) that Consul confirmed
// was sent less than a TTL ago: until then Consul cannot have expired the
// session. It reads the monotonic clock, so a process frozen past the TTL
// sees false as soon as it runs again.
func (s *Session) Alive() bool {
	return int64(time.Since(s.start))-s.confirmed.Load() < int64(s.cfg.TTL)
}

// Expires is when the session stops being Alive unless a renewal is
// confirmed before.
func (s *Session) Expires() time.Time {
	return s.start.Add(time.Duration(s.confirmed.Load()) + s.cfg.TTL)
}

func (s *Session) confirm(sent time.Time) {
	s.confirmed.Store(int64(sent.Sub(s.start)))
	if s.cfg.Confirmed != nil {
		s.cfg.Confirmed(sent)
	}
}

// KeepAlive renews the session every TTL/3 until ctx ends (it returns nil)
// or the session is lost: ErrGone once Consul says it no longer exists, or
// (with EndUnconfirmed) ErrNotRenewed once no renewal was confirmed for a
// TTL. Meanwhile it loses every Lease as soon as a TTL passed without a
// confirmed renewal: before Consul can have ended the session and its
// lock-delay run out; with DestroyUnconfirmed it then asks Consul to end
// the session. When the session is lost, its Leases are lost and
// their watchers have returned by the time KeepAlive does.
func (s *Session) KeepAlive(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lost := make(chan error, 2)
	var wg sync.WaitGroup
	wg.Go(func() { lost <- s.renewLoop(ctx); cancel() })
	wg.Go(func() { lost <- s.expiryLoop(ctx); cancel() })
	wg.Wait()
	err := cmp.Or(<-lost, <-lost) // the first to end says why
	if err != nil {
		s.end(err)
		s.watchers.Wait()
	}
	return err
}

// renewLoop renews every TTL/3 and, after a failure, sooner (Retry, but
// never past the expiry). With DestroyUnconfirmed, the first unanswered
// renewal after the expiry is followed by a destroy (see SessionConfig). It
// returns nil when ctx ends, ErrGone when Consul answers that the session
// does not exist.
//
// The destroy is sent from this loop, after a renewal failed, so that no
// renewal is in flight then: a slow answer to a renewal sent in time
// still counts, and a session that is merely slow to confirm is not ended.
func (s *Session) renewLoop(ctx context.Context) error {
	r := renewals{s: s, retry: s.cfg.Retry}
	t := time.NewTimer(s.cfg.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		err := s.renew(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrGone):
			return ErrGone
		case err == nil:
			r.destroySent = false
		case s.cfg.DestroyUnconfirmed && !r.destroySent && !s.Alive() && unanswered(err):
			r.destroySent = true
			s.askDestroy(ctx)
		}
		t.Reset(r.next(err))
	}
}

// unanswered tells a renewal that got no HTTP answer at all (a timeout,
// a reset, a refused connection: the request may have arrived, its answer
// did not) from one Consul answered with an error status (500 "No
// cluster leader"): only the first is the lost-answers case a destroy is
// for. An answer proves answers get through, and a destroy sent during a
// Consul election could be applied once a leader is elected, ending
// every agent's session at once.
func unanswered(err error) bool {
	var transport *url.Error
	return errors.As(err, &transport)
}

// renewals is renewLoop's state between renewals: its back-off, whether
// the last one failed (a streak of failures is logged once), and whether
// a destroy was sent since the last confirmed renewal.
type renewals struct {
	s           *Session
	retry       backoff.Backoff
	failing     bool
	destroySent bool
}

// next notes the outcome of a renewal and says when to renew again:
// TTL/3 after a success; after a failure, the back-off, but not past the
// moment the session stops being Alive.
func (r *renewals) next(err error) time.Duration {
	s := r.s
	if err == nil {
		if r.failing {
			s.cfg.Log.Info("consul session renewed again", "session", s.id)
		}
		r.failing = false
		r.retry.Reset()
		return s.cfg.TTL / 3
	}
	left := time.Until(s.Expires())
	if !r.failing {
		s.cfg.Log.Warn("renewing the consul session failed; retrying", "session", s.id, "error", err, "lease_left", left.Round(time.Millisecond))
		r.failing = true
	}
	if d := r.retry.Next(); left <= 0 || d < left {
		return d
	}
	return left
}

// renew renews the session once, bounded by TTL/3.
func (s *Session) renew(ctx context.Context) error {
	sent := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.TTL/3)
	defer cancel()
	entry, _, err := s.client.Session().Renew(s.id, writeOptions(ctx))
	switch {
	case err != nil:
		return err
	case entry == nil:
		return ErrGone
	}
	s.confirm(sent)
	return nil
}

// askDestroy asks Consul to destroy the session, which was not confirmed
// for a TTL (one attempt, bounded by TTL/3). Its answer is not needed: a
// destroy that arrived ends the session in Consul even if the answer is
// lost, and its locks are free for others after the lock-delay.
func (s *Session) askDestroy(ctx context.Context) {
	s.loseAll(ErrNotRenewed) // the expiry check may not have run yet
	sent := time.Now()
	dctx, cancel := context.WithTimeout(ctx, s.cfg.TTL/3)
	defer cancel()
	_, err := s.client.Session().Destroy(s.id, writeOptions(dctx))
	switch {
	case ctx.Err() != nil:
	case err != nil:
		s.cfg.Log.Warn("consul session not confirmed for its TTL: asked Consul to destroy it, so that its locks are freed even if only the answers are lost; no answer (if Consul did not get it, the session serves again once a renewal is confirmed)",
			"session", s.id, "unconfirmed_for", sent.Sub(s.Expires().Add(-s.cfg.TTL)).Round(time.Millisecond), "error", err)
	default:
		s.cfg.Log.Warn("consul session not confirmed for its TTL: destroyed it in Consul", "session", s.id)
	}
}

// expiryLoop loses every Lease whenever the session is not Alive. With
// EndUnconfirmed it then returns ErrNotRenewed; otherwise it returns nil
// when ctx ends.
func (s *Session) expiryLoop(ctx context.Context) error {
	t := time.NewTicker(expiryCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if s.Alive() {
			continue
		}
		s.loseAll(ErrNotRenewed)
		if s.cfg.EndUnconfirmed {
			return ErrNotRenewed
		}
	}
}

// Release gives key back if this session holds it; a Lease on it is lost
// (ErrReleased). A key given back is free at once, where one freed by the
// session's end waits out the lock-delay.
func (s *Session) Release(ctx context.Context, key string) error {
	s.mu.Lock()
	l := s.leases[key]
	delete(s.leases, key)
	s.mu.Unlock()
	if l != nil {
		l.lose(ErrReleased)
	}
	return s.releaseKey(ctx, key)
}

func (s *Session) releaseKey(ctx context.Context, key string) error {
	if _, _, err := s.client.KV().Release(&api.KVPair{Key: key, Session: s.id}, writeOptions(ctx)); err != nil {
		return fmt.Errorf("release %s: %w", key, err)
	}
	return nil
}

// Destroy gives every lock back, ends the session's Leases (ErrDestroyed),
// waits for their watchers and destroys the session in Consul. Stop
// KeepAlive first (else it reports the session gone at its next renewal).
// If Consul could not be reached, call it again later.
func (s *Session) Destroy(ctx context.Context) error {
	var errs []error
	for _, l := range s.current() {
		errs = append(errs, l.Release(ctx))
	}
	s.end(ErrDestroyed)
	s.watchers.Wait()
	if _, err := s.client.Session().Destroy(s.id, writeOptions(ctx)); err != nil {
		errs = append(errs, fmt.Errorf("destroy consul session %s: %w", s.id, err))
	}
	return errors.Join(errs...)
}

// current lists the Leases.
func (s *Session) current() []*Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	leases := make([]*Lease, 0, len(s.leases))
	for _, l := range s.leases {
		leases = append(leases, l)
	}
	return leases
}

// end marks the session ended (the first cause stays) and loses every
// Lease with cause.
func (s *Session) end(cause error) {
	s.mu.Lock()
	if s.ended == nil {
		s.ended = cause
	}
	s.mu.Unlock()
	s.loseAll(cause)
}

func (s *Session) loseAll(cause error) {
	s.mu.Lock()
	leases := s.leases
	s.leases = make(map[string]*Lease)
	s.mu.Unlock()
	for _, l := range leases {
		l.lose(cause)
	}
}

func (s *Session) forget(l *Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases[l.Key] == l {
		delete(s.leases, l.Key)
	}
}

func writeOptions(ctx context.Context) *api.WriteOptions {
	return (&api.WriteOptions{}).WithContext(ctx)
}
