package consullock

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/consul/api"

	"github.com/rivora/rivora/internal/backoff"
)

// Lease is a key held by a Session, for as long as Valid.
//
// Invariants: once lost (ctx canceled, with the cause) a Lease never comes
// back; while not lost its watcher follows the key.
type Lease struct {
	// Key is the lock's key in Consul KV.
	Key string
	// Epoch is the fencing epoch: the key's LockIndex, which grows with
	// every acquisition of the key by any session.
	Epoch uint64

	s *Session
	// ctx is canceled, with the cause, when the lease is lost; it also
	// bounds the watcher's queries.
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// Lock takes key with the session if nobody holds it, writing value, and
// follows it from then on. It returns ErrHeld if another session holds the
// key (or its lock-delay still protects it), or if this session holds it
// already through another Lease; ErrNotRenewed if the session is not
// Alive. One key is not Locked from two goroutines at once: a failed Lock
// gives the key back.
func (s *Session) Lock(ctx context.Context, key string, value []byte) (*Lease, error) {
	if err := s.usable(key); err != nil {
		return nil, err
	}
	ok, _, err := s.client.KV().Acquire(&api.KVPair{Key: key, Value: value, Session: s.id}, writeOptions(ctx))
	if err != nil {
		return nil, fmt.Errorf("acquire %s: %w", key, err)
	}
	if !ok {
		return nil, ErrHeld
	}
	pair, meta, err := s.client.KV().Get(key, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil || pair == nil || pair.Session != s.id {
		// Acquired, then lost at once, or unreadable: give it back.
		_ = s.releaseKey(context.WithoutCancel(ctx), key)
		if err == nil {
			err = errors.New("lock changed hands right after it was acquired")
		}
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return s.track(key, pair.LockIndex, meta.LastIndex)
}

// usable says why Lock may not take key now, if it may not.
func (s *Session) usable(key string) error {
	s.mu.Lock()
	ended, cur := s.ended, s.leases[key]
	s.mu.Unlock()
	switch {
	case ended != nil:
		return fmt.Errorf("lock %s: %w", key, ended)
	case !s.Alive():
		return ErrNotRenewed
	case cur != nil && cur.Valid():
		return ErrHeld
	}
	return nil
}

// track makes the Lease on key, just acquired, and starts its watcher at
// blocking index.
func (s *Session) track(key string, epoch, index uint64) (*Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != nil {
		return nil, fmt.Errorf("lock %s: %w", key, s.ended)
	}
	if cur := s.leases[key]; cur != nil && cur.Valid() {
		return nil, ErrHeld // a concurrent Lock won; its Lease keeps the key
	}
	l := &Lease{Key: key, Epoch: epoch, s: s}
	l.ctx, l.cancel = context.WithCancelCause(context.Background())
	s.leases[key] = l
	s.watchers.Go(func() { s.watch(l, index) })
	return l, nil
}

// watch follows the key with blocking queries and loses the Lease as soon
// as the key is no longer held by the session. Failed queries are retried:
// meanwhile the session's expiry decides.
func (s *Session) watch(l *Lease, index uint64) {
	defer s.forget(l)
	retry := s.cfg.Retry
	for l.ctx.Err() == nil {
		pair, meta, err := s.client.KV().Get(l.Key, (&api.QueryOptions{WaitIndex: index, WaitTime: blockingWait}).WithContext(l.ctx))
		if err != nil {
			if l.ctx.Err() == nil {
				s.cfg.Log.Debug("watching a lock failed; its lease holds while the session lasts", "key", l.Key, "error", err)
				backoff.Sleep(l.ctx, retry.Next())
			}
			continue
		}
		retry.Reset()
		if pair == nil || pair.Session != s.id {
			l.lose(taken(l.Key, pair))
			return
		}
		index = NextIndex(index, meta.LastIndex)
	}
}

func taken(key string, pair *api.KVPair) *TakenError {
	if pair == nil || pair.Session == "" {
		return &TakenError{Key: key}
	}
	return &TakenError{Key: key, Session: pair.Session, Value: string(pair.Value)}
}

// Lost is closed when the lease is lost: the key taken or freed, the
// session gone or not renewed within its TTL, or the lease released.
func (l *Lease) Lost() <-chan struct{} { return l.ctx.Done() }

// Cause says why the lease was lost (nil while held): a *TakenError,
// ErrGone, ErrNotRenewed, ErrReleased or ErrDestroyed.
func (l *Lease) Cause() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Valid reports whether the lease still holds right now. It is cheap (a
// channel and a monotonic-clock check): call it before every write it
// fences. It fails as soon as the session could have expired, even if
// nothing has noticed yet, and then loses the lease.
func (l *Lease) Valid() bool {
	select {
	case <-l.ctx.Done():
		return false
	default:
	}
	if !l.s.Alive() {
		l.lose(ErrNotRenewed)
		return false
	}
	return true
}

// Release gives the key back (free at once for others, no lock-delay); the
// lease is lost.
func (l *Lease) Release(ctx context.Context) error {
	l.lose(ErrReleased)
	l.s.forget(l)
	return l.s.releaseKey(ctx, l.Key)
}

func (l *Lease) lose(cause error) { l.cancel(cause) }
