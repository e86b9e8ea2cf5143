package controlplane

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/rivora/rivora/internal/backoff"
	"github.com/rivora/rivora/internal/consullock"
	"github.com/rivora/rivora/internal/errkind"
)

// Several control planes may share one Consul; the one holding the lock
// on ConsulLeaderKey, with its own session, leads: it alone serves the
// admin and agent APIs and writes the state. The others answer Unavailable
// naming the leader, and campaign until they win the lock.

const (
	// ConsulLeaderKey is the leader lock; its value is the leader's
	// advertised URL.
	ConsulLeaderKey = "rivora/controlplane/leader"
	// leaderTTL is the session's TTL. A leader that could not renew its
	// session for this long stops leading: Consul may have ended it.
	leaderTTL = 10 * time.Second
	// leaderLockDelay keeps the lock from being taken right after a
	// leader's session ended without releasing it, so a leader that has
	// not noticed yet stops first.
	leaderLockDelay = time.Second
	// leaderWait is the longest blocking query on the lock while following
	// (consullock waits as long while leading).
	leaderWait = 30 * time.Second
	// cleanupTimeout bounds releasing the lock and ending the session.
	cleanupTimeout = 3 * time.Second
)

// leaderOnly is the gate of every admin and agent RPC (leaderInterceptor)
// and of the leader's own loops: nil when this control plane may serve
// (always without Consul), otherwise an ErrUnavailable naming the leader.
func (cp *ControlPlane) leaderOnly() error {
	if cp.election == nil {
		return nil
	}
	return cp.election.check()
}

// election campaigns for the leader lock and tracks who holds it.
type election struct {
	client *api.Client
	kv     *api.KV
	self   string // the advertised URL: the lock's value when we lead
	log    *slog.Logger
	// elected runs once the lock is ours and before this control plane
	// serves: it loads the state. An error gives the lock back.
	elected func(ctx context.Context, session string) error

	mu         sync.Mutex
	leading    bool
	ledSince   time.Time // when this term began (leading)
	leader     string    // the leader's advertised URL as last seen; "": none known
	leaseUntil time.Time // the session is surely alive until then
	// epoch ends when the current leadership term ends, or the next one
	// if not leading now; then a new epoch begins.
	epoch    context.Context
	endEpoch context.CancelFunc
	orphans  []*consullock.Session // our sessions that could not be ended yet
	// cannotLead is why this control plane could not lead the last time
	// it won the lock (nil: it could, or has not tried).
	cannotLead error
}

func newElection(client *api.Client, self string, log *slog.Logger, elected func(context.Context, string) error) *election {
	e := &election{client: client, kv: client.KV(), self: self, log: log, elected: elected}
	e.epoch, e.endEpoch = context.WithCancel(context.Background())
	return e
}

// check is the gate: nil while leading, else an ErrUnavailable saying
// who leads, if known.
func (e *election) check() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.leading && time.Now().Before(e.leaseUntil):
		return nil
	case e.leading:
		return errorf(ErrUnavailable, "not the leader: this control plane lost contact with Consul and cannot lead until it renews its session; retry shortly")
	case e.leader != "" && e.leader != e.self:
		// Retrying here never succeeds: the answer says where to go,
		// in words and in a detail agents and rivoractl read.
		err := errorf(ErrUnavailable, "not the leader; the leader is %s: send the call there (rivoractl --server %s)", e.leader, e.leader)
		return errkind.WithInfo(err, errkind.NotLeaderReason, map[string]string{"leader": e.leader})
	case e.cannotLead != nil:
		return errorf(ErrUnavailable, "not the leader: this control plane won the leader lock but cannot lead (%v); see its log", e.cannotLead)
	default:
		return errorf(ErrUnavailable, "not the leader; no leader yet, retry shortly")
	}
}

// leadingFor is how long this control plane has led (false: it does not).
func (e *election) leadingFor() (time.Duration, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.leading {
		return 0, false
	}
	return time.Since(e.ledSince), true
}

// scope ends the requests next serves when the leadership term they were
// served in ends, so that agents following a deposed leader reconnect (and
// are told the new leader). A request that arrives while not leading is
// bound to the next term, in case leadership begins before its gate.
func (e *election) scope(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		epoch := e.epoch
		e.mu.Unlock()
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(epoch, cancel)
		defer stop()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// run campaigns until ctx ends, one session at a time: a session that is
// lost (not renewed for its TTL, or ended by Consul) or whose lock was
// taken is ended and replaced. On return the lock is released and the
// session destroyed.
func (e *election) run(ctx context.Context) {
	retry := newRetry()
	for ctx.Err() == nil {
		e.endOrphans(ctx)
		s, err := e.createSession(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d := jitter(retry.Next())
			e.log.Warn("leader election: creating a Consul session failed; retrying", "error", err, "retry_in", d)
			backoff.Sleep(ctx, d)
			continue
		}
		retry.Reset()
		e.hold(ctx, s)
	}
}

func (e *election) createSession(ctx context.Context) (*consullock.Session, error) {
	ctx, cancel := context.WithTimeout(ctx, consulTimeout)
	defer cancel()
	return consullock.CreateSession(ctx, e.client, consullock.SessionConfig{
		Name:      "rivora-controlplane " + e.self,
		TTL:       leaderTTL,
		LockDelay: leaderLockDelay,
		// A session not confirmed for a TTL may be gone: start over with
		// a new one rather than wait for Consul to say.
		EndUnconfirmed: true,
		Retry:          newRetry(),
		Confirmed:      e.confirmed,
		Log:            e.log,
	})
}

// confirmed notes that the session is surely alive until a TTL after sent.
func (e *election) confirmed(sent time.Time) {
	e.mu.Lock()
	e.leaseUntil = sent.Add(leaderTTL)
	e.mu.Unlock()
}

// hold keeps session s alive and campaigns with it until it is lost or ctx
// ends, then gives the lock back and ends the session.
func (e *election) hold(ctx context.Context, s *consullock.Session) {
	sctx, lost := context.WithCancel(ctx)
	renewing := make(chan struct{})
	go func() {
		defer close(renewing)
		defer lost()
		e.keepAlive(sctx, s)
	}()
	e.campaign(sctx, s)
	lost()
	<-renewing

	// Releasing first spares the next leader the lock-delay.
	cctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := s.Release(cctx, ConsulLeaderKey); err != nil {
		e.log.Warn("leader election: releasing the leader lock failed; destroying the session releases it", "error", err)
	}
	if err := s.Destroy(cctx); err != nil {
		e.log.Warn("leader election: ending the session failed; retrying later", "session", s.ID(), "error", err)
		e.mu.Lock()
		e.orphans = append(e.orphans, s)
		e.mu.Unlock()
	}
}

// keepAlive renews session s until ctx ends or the session is lost (Consul
// ended it, or it could not be renewed for a whole TTL).
func (e *election) keepAlive(ctx context.Context, s *consullock.Session) {
	switch err := s.KeepAlive(ctx); {
	case errors.Is(err, consullock.ErrGone):
		e.log.Warn("leader election: Consul ended this control plane's session", "session", s.ID())
	case errors.Is(err, consullock.ErrNotRenewed):
		e.log.Error("leader election: session not renewed for longer than its TTL; starting over with a new one", "ttl", leaderTTL, "session", s.ID())
	}
}

// endOrphans ends sessions that could not be ended when they were given
// up (Consul was unreachable), so one of them does not keep the lock
// until Consul expires it.
func (e *election) endOrphans(ctx context.Context) {
	e.mu.Lock()
	orphans := e.orphans
	e.orphans = nil
	e.mu.Unlock()
	for i, s := range orphans {
		cctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
		err := s.Destroy(cctx)
		cancel()
		if err != nil {
			e.mu.Lock()
			e.orphans = append(e.orphans, orphans[i:]...)
			e.mu.Unlock()
			return
		}
	}
}

// isOrphan reports whether session id is one of this control plane's
// orphans.
func (e *election) isOrphan(id string) bool {
	if id == "" {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.ContainsFunc(e.orphans, func(s *consullock.Session) bool { return s.ID() == id })
}

// campaign tries to take the lock with session s, and waits for it to be
// free whenever another control plane holds it. Once taken, it leads until
// the lock is lost or ctx ends, and returns.
func (e *election) campaign(ctx context.Context, s *consullock.Session) {
	retry := newRetry()
	again := func(what string, err error) {
		d := jitter(retry.Next())
		e.log.Warn("leader election: "+what+"; retrying", "error", err, "retry_in", d)
		backoff.Sleep(ctx, d)
	}
	for ctx.Err() == nil {
		lock, err := e.acquire(ctx, s)
		if errors.Is(err, consullock.ErrHeld) {
			e.endOrphans(ctx) // one of them may hold it
			if err := e.follow(ctx); err != nil && ctx.Err() == nil {
				again("watching the leader lock failed", err)
				continue
			}
			retry.Reset()
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				again("acquiring the leader lock failed", err)
			}
			continue
		}
		if err := e.lead(ctx, s.ID()); err != nil {
			if ctx.Err() != nil {
				return
			}
			e.release(lock)
			e.mu.Lock()
			e.cannotLead, e.leader = err, ""
			e.mu.Unlock()
			again("won the leader lock but could not load the state; gave the lock back", err)
			continue
		}
		holder := e.keep(ctx, lock)
		e.stepDown(holder)
		return
	}
}

func (e *election) acquire(ctx context.Context, s *consullock.Session) (*consullock.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, consulTimeout)
	defer cancel()
	return s.Lock(ctx, ConsulLeaderKey, []byte(e.self))
}

func (e *election) release(lock *consullock.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := lock.Release(ctx); err != nil {
		e.log.Warn("leader election: releasing the leader lock failed", "error", err)
	}
}

// follow notes who holds the lock and returns once it may be free. A
// lock held by one of this control plane's own orphans (a session it gave
// up but Consul could not end, as while Consul restarts) is not waited
// out: follow returns soon, and campaign ends the orphan and tries again.
// Waiting left the cell without a leader for ~30 s after a Consul
// restart, until Consul expired the orphan.
func (e *election) follow(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, consulTimeout)
	pair, meta, err := e.kv.Get(ConsulLeaderKey, (&api.QueryOptions{}).WithContext(qctx))
	cancel()
	if err != nil {
		return err
	}
	holder, session := lockHolder(pair)
	if e.isOrphan(session) {
		backoff.Sleep(ctx, leaderLockDelay/4)
		return nil
	}
	e.setLeader(holder)
	if session == "" {
		// Free, yet not ours: within the lock-delay after the last
		// holder's session ended.
		backoff.Sleep(ctx, leaderLockDelay/4)
		return nil
	}
	index := meta.LastIndex
	for {
		pair, meta, err := e.kv.Get(ConsulLeaderKey, (&api.QueryOptions{WaitIndex: index, WaitTime: leaderWait}).WithContext(ctx))
		if err != nil {
			return err
		}
		if h, s := lockHolder(pair); s != session {
			return nil
		} else if h != holder {
			holder = h
			e.setLeader(h)
		}
		index = consullock.NextIndex(index, meta.LastIndex)
	}
}

// lead loads the state and starts a term.
func (e *election) lead(ctx context.Context, id string) error {
	if err := e.elected(ctx, id); err != nil {
		return err
	}
	e.mu.Lock()
	e.leading, e.leader, e.cannotLead, e.ledSince = true, e.self, nil, time.Now()
	e.mu.Unlock()
	e.log.Info("leading: this control plane serves the admin and agent APIs", "advertise", e.self, "session", id)
	return nil
}

// keep follows the lock while leading and returns when it is no longer
// held by the session (with the new holder's URL, if any) or ctx ends.
// While Consul is unreachable the lease decides: it is lost, and ctx ends,
// once the session may have expired.
func (e *election) keep(ctx context.Context, lock *consullock.Lease) string {
	select {
	case <-ctx.Done():
		return ""
	case <-lock.Lost():
	}
	var taken *consullock.TakenError
	if !errors.As(lock.Cause(), &taken) {
		return "" // the session is lost, and ctx ends with it
	}
	e.log.Warn("leader election: lost the leader lock", "now_held_by", taken.Value)
	return taken.Value
}

// stepDown ends the term, if any; holder is the new leader, if known.
func (e *election) stepDown(holder string) {
	e.mu.Lock()
	was := e.leading
	e.leading = false
	if was {
		e.endEpoch()
		e.epoch, e.endEpoch = context.WithCancel(context.Background())
	}
	e.mu.Unlock()
	if was {
		e.log.Info("no longer leading: refusing admin and agent calls")
	}
	e.setLeader(holder)
}

func (e *election) setLeader(url string) {
	e.mu.Lock()
	changed := e.leader != url
	e.leader = url
	if url != "" && url != e.self {
		e.cannotLead = nil // another leads: whatever kept this one from it may have passed
	}
	e.mu.Unlock()
	if changed && url != "" && url != e.self {
		e.log.Info("following the leader", "leader", url)
	}
}

// lockHolder returns the holder's URL and session ("", "" when free).
func lockHolder(pair *api.KVPair) (url, session string) {
	if pair == nil || pair.Session == "" {
		return "", ""
	}
	return string(pair.Value), pair.Session
}

// newRetry spaces retries against Consul: 100ms doubling to 5s.
func newRetry() backoff.Backoff {
	return backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
}

// jitter spreads d over [d/2, d], so that control planes retrying together
// do not stay in step.
func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }
