package controlplane

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
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
	// leaderWait is the longest blocking query on the lock.
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
	sessions *api.Session
	kv       *api.KV
	self     string // the advertised URL: the lock's value when we lead
	log      *slog.Logger
	// elected runs once the lock is ours and before this control plane
	// serves: it loads the state. An error gives the lock back.
	elected func(ctx context.Context, session string) error

	mu         sync.Mutex
	leading    bool
	leader     string    // the leader's advertised URL as last seen; "": none known
	leaseUntil time.Time // the session is surely alive until then
	// epoch ends when the current leadership term ends, or the next one
	// if not leading now; then a new epoch begins.
	epoch    context.Context
	endEpoch context.CancelFunc
	orphans  []string // our sessions that could not be ended yet
}

func newElection(client *api.Client, self string, log *slog.Logger, elected func(context.Context, string) error) *election {
	e := &election{sessions: client.Session(), kv: client.KV(), self: self, log: log, elected: elected}
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
		return errorf(ErrUnavailable, "not the leader; the leader is %s", e.leader)
	default:
		return errorf(ErrUnavailable, "not the leader; no leader yet, retry shortly")
	}
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
	var b backoff
	for ctx.Err() == nil {
		e.endOrphans(ctx)
		id, err := e.createSession(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d := b.next()
			e.log.Warn("leader election: creating a Consul session failed; retrying", "error", err, "retry_in", d)
			sleep(ctx, d)
			continue
		}
		b.reset()
		e.hold(ctx, id)
	}
}

func (e *election) createSession(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, consulTimeout)
	defer cancel()
	start := time.Now()
	id, _, err := e.sessions.CreateNoChecks(&api.SessionEntry{
		Name:      "rivora-controlplane " + e.self,
		TTL:       leaderTTL.String(),
		LockDelay: leaderLockDelay,
		Behavior:  api.SessionBehaviorRelease,
	}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return "", err
	}
	e.mu.Lock()
	e.leaseUntil = start.Add(leaderTTL)
	e.mu.Unlock()
	return id, nil
}

// hold renews session id and campaigns with it until it is lost or ctx
// ends, then gives the lock back and ends the session.
func (e *election) hold(ctx context.Context, id string) {
	sctx, lost := context.WithCancel(ctx)
	renewing := make(chan struct{})
	go func() {
		defer close(renewing)
		e.renew(sctx, id, lost)
	}()
	e.campaign(sctx, id)
	lost()
	<-renewing

	// Releasing first spares the next leader the lock-delay.
	cctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	w := (&api.WriteOptions{}).WithContext(cctx)
	if _, _, err := e.kv.Release(&api.KVPair{Key: ConsulLeaderKey, Session: id}, w); err != nil {
		e.log.Warn("leader election: releasing the leader lock failed; destroying the session releases it", "error", err)
	}
	if _, err := e.sessions.Destroy(id, w); err != nil {
		e.log.Warn("leader election: ending the session failed; retrying later", "session", id, "error", err)
		e.mu.Lock()
		e.orphans = append(e.orphans, id)
		e.mu.Unlock()
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
	for i, id := range orphans {
		cctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
		_, err := e.sessions.Destroy(id, (&api.WriteOptions{}).WithContext(cctx))
		cancel()
		if err != nil {
			e.mu.Lock()
			e.orphans = append(e.orphans, orphans[i:]...)
			e.mu.Unlock()
			return
		}
	}
}

// renew keeps session id alive, every third of its TTL, until ctx ends.
// It calls lost when Consul says the session is gone, or when it could not
// renew it for a whole TTL.
func (e *election) renew(ctx context.Context, id string, lost context.CancelFunc) {
	var b backoff
	failing := false
	t := time.NewTimer(leaderTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, leaderTTL/3)
		entry, _, err := e.sessions.Renew(id, (&api.WriteOptions{}).WithContext(rctx))
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && entry == nil:
			e.log.Warn("leader election: Consul ended this control plane's session", "session", id)
			lost()
			return
		case err != nil:
			e.mu.Lock()
			until := e.leaseUntil
			e.mu.Unlock()
			if !time.Now().Before(until) {
				e.log.Error("leader election: session not renewed for longer than its TTL; starting over with a new one", "ttl", leaderTTL, "error", err)
				lost()
				return
			}
			d := b.next()
			if !failing {
				e.log.Warn("leader election: renewing the session failed; retrying", "error", err, "lease_left", time.Until(until).Round(time.Millisecond))
				failing = true
			}
			t.Reset(min(d, time.Until(until)))
		default:
			if failing {
				e.log.Info("leader election: session renewed again")
				failing = false
			}
			b.reset()
			e.mu.Lock()
			e.leaseUntil = start.Add(leaderTTL)
			e.mu.Unlock()
			t.Reset(leaderTTL / 3)
		}
	}
}

// campaign tries to take the lock with session id, and waits for it to be
// free whenever another control plane holds it. Once taken, it leads until
// the lock is lost or ctx ends, and returns.
func (e *election) campaign(ctx context.Context, id string) {
	var b backoff
	retry := func(what string, err error) {
		d := b.next()
		e.log.Warn("leader election: "+what+"; retrying", "error", err, "retry_in", d)
		sleep(ctx, d)
	}
	for ctx.Err() == nil {
		acquired, err := e.acquire(ctx, id)
		if err != nil {
			if ctx.Err() == nil {
				retry("acquiring the leader lock failed", err)
			}
			continue
		}
		if !acquired {
			if err := e.follow(ctx); err != nil && ctx.Err() == nil {
				retry("watching the leader lock failed", err)
				continue
			}
			b.reset()
			continue
		}
		if err := e.lead(ctx, id); err != nil {
			if ctx.Err() != nil {
				return
			}
			e.release(id)
			retry("won the leader lock but could not load the state; gave the lock back", err)
			continue
		}
		holder := e.keep(ctx, id)
		e.stepDown(holder)
		return
	}
}

func (e *election) acquire(ctx context.Context, id string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, consulTimeout)
	defer cancel()
	ok, _, err := e.kv.Acquire(&api.KVPair{Key: ConsulLeaderKey, Value: []byte(e.self), Session: id}, (&api.WriteOptions{}).WithContext(ctx))
	return ok, err
}

func (e *election) release(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if _, _, err := e.kv.Release(&api.KVPair{Key: ConsulLeaderKey, Session: id}, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		e.log.Warn("leader election: releasing the leader lock failed", "error", err)
	}
}

// follow notes who holds the lock and returns once it may be free.
func (e *election) follow(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, consulTimeout)
	pair, meta, err := e.kv.Get(ConsulLeaderKey, (&api.QueryOptions{}).WithContext(qctx))
	cancel()
	if err != nil {
		return err
	}
	holder, session := lockHolder(pair)
	e.setLeader(holder)
	if session == "" {
		// Free, yet not ours: within the lock-delay after the last
		// holder's session ended.
		sleep(ctx, leaderLockDelay/4)
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
		index = nextIndex(index, meta.LastIndex)
	}
}

// lead loads the state and starts a term.
func (e *election) lead(ctx context.Context, id string) error {
	if err := e.elected(ctx, id); err != nil {
		return err
	}
	e.mu.Lock()
	e.leading, e.leader = true, e.self
	e.mu.Unlock()
	e.log.Info("leading: this control plane serves the admin and agent APIs", "advertise", e.self, "session", id)
	return nil
}

// keep watches the lock while leading and returns when it is no longer
// held by session id (with the new holder's URL, if any) or ctx ends.
// While Consul is unreachable the lease decides: renew ends ctx once the
// session may have expired.
func (e *election) keep(ctx context.Context, id string) string {
	var b backoff
	var index uint64
	for {
		pair, meta, err := e.kv.Get(ConsulLeaderKey, (&api.QueryOptions{WaitIndex: index, WaitTime: leaderWait}).WithContext(ctx))
		if ctx.Err() != nil {
			return ""
		}
		if err != nil {
			d := b.next()
			e.log.Warn("leader election: watching the leader lock failed; still leading while the session lasts", "error", err, "retry_in", d)
			sleep(ctx, d)
			continue
		}
		b.reset()
		if holder, session := lockHolder(pair); session != id {
			e.log.Warn("leader election: lost the leader lock", "session", id, "now_held_by", holder)
			return holder
		}
		index = nextIndex(index, meta.LastIndex)
	}
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

// nextIndex is the WaitIndex after a blocking query answered last; an
// index going backwards (Consul restored) starts over.
func nextIndex(prev, last uint64) uint64 {
	if last < prev {
		return 0
	}
	return last
}

// backoff spaces retries against Consul: 100ms doubling to 5s, jittered.
type backoff struct{ last time.Duration }

func (b *backoff) next() time.Duration {
	b.last = min(max(2*b.last, 100*time.Millisecond), 5*time.Second)
	return b.last/2 + rand.N(b.last/2+1)
}

func (b *backoff) reset() { b.last = 0 }

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
