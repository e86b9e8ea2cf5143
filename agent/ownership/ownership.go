// Package ownership grants this agent the single-writer right to a
// partition's pending store. The grant comes from outside the workers: a
// Locker (Consul sessions and locks in a cell, in process for `rivora dev`)
// hands out Leases; the agent writes and delivers for a partition only
// while it holds a valid Lease on it.
package ownership

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Locker grants Leases on partitions.
type Locker interface {
	// Session names this agent's grant holder (the Consul session id; ""
	// in process).
	Session() string
	// SessionChanged is signalled when Session changes (a lost session
	// was replaced).
	SessionChanged() <-chan struct{}
	// SessionReplacedAt is when Session replaced a session that was lost
	// (zero for the first one, and in process).
	SessionReplacedAt() time.Time
	// TryAcquire takes partition p's lock if nobody holds it. It returns
	// ErrHeld if another holder has it (or Consul's lock-delay still
	// protects it after a holder died), or if this Locker holds it already
	// through another Lease.
	TryAcquire(ctx context.Context, p int) (*Lease, error)
	// Run creates the session and keeps it alive until ctx ends.
	Run(ctx context.Context) error
	// Ready is closed once Run created the first session: Session names
	// it from then on.
	Ready() <-chan struct{}
	// Close releases every lease and ends the session; its owner calls it
	// once Run returned.
	Close(ctx context.Context) error
}

// ErrHeld means another holder has the lock (or it is in its lock-delay).
var ErrHeld = errors.New("ownership lock is held by another agent")

// ErrNoSession means this agent's session is not confirmed alive: no lock
// can be taken until it is renewed or replaced.
var ErrNoSession = errors.New("consul session is not confirmed alive; waiting for a renewal")

// Lease is the right to write partition P's pending store and deliver its
// events, for as long as Valid.
type Lease struct {
	// P is the partition.
	P int
	// Epoch is the fencing epoch: it grows with every acquisition of the
	// partition's lock by anyone (Consul's LockIndex). Ledger writes carry
	// it; an owner refuses a ledger written under a newer epoch.
	Epoch uint64

	grant grant
}

// grant backs a Lease: a Consul lock (*consullock.Lease) or an in-process
// one (*localGrant).
type grant interface {
	Lost() <-chan struct{}
	Cause() error
	Valid() bool
	Release(ctx context.Context) error
}

// Lost is closed when the lease is lost (lock taken away, session gone,
// or not renewed in time). A lost lease never comes back: acquire again.
func (l *Lease) Lost() <-chan struct{} { return l.grant.Lost() }

// Cause says why the lease was lost (nil while held).
func (l *Lease) Cause() error { return l.grant.Cause() }

// Valid reports whether the lease still holds right now. It is cheap: call
// it before every write and every delivery. It fails as soon as the
// session could have expired, even if nothing has noticed yet (a process
// that was frozen past its session TTL sees false at once when it thaws).
func (l *Lease) Valid() bool { return l.grant.Valid() }

// Release gives the lock back (graceful handoff). The lease is lost after.
func (l *Lease) Release(ctx context.Context) error { return l.grant.Release(ctx) }

// localGrant is an in-process lock: lost only when released.
type localGrant struct {
	lost    context.Context // canceled, with the cause, when released
	lose    context.CancelCauseFunc
	release func()
}

func newLocalGrant(release func()) *localGrant {
	g := &localGrant{release: release}
	g.lost, g.lose = context.WithCancelCause(context.Background())
	return g
}

func (g *localGrant) Lost() <-chan struct{} { return g.lost.Done() }

func (g *localGrant) Cause() error {
	if g.lost.Err() == nil {
		return nil
	}
	return context.Cause(g.lost)
}

func (g *localGrant) Valid() bool { return g.lost.Err() == nil }

func (g *localGrant) Release(context.Context) error {
	g.lose(errReleased)
	g.release()
	return nil
}

var errReleased = errors.New("released")

// Local is the in-process Locker of a single-agent cell (`rivora dev`):
// every partition is free unless this process holds it.
type Local struct {
	mu     sync.Mutex
	held   map[int]*Lease
	epochs map[int]uint64
}

// NewLocal returns an in-process Locker.
func NewLocal() *Local {
	return &Local{held: make(map[int]*Lease), epochs: make(map[int]uint64)}
}

// Session is "" in process.
func (l *Local) Session() string { return "" }

// SessionChanged never fires.
func (l *Local) SessionChanged() <-chan struct{} { return nil }

// SessionReplacedAt is zero: there is no session to lose.
func (l *Local) SessionReplacedAt() time.Time { return time.Time{} }

// Ready is closed: there is no session to create.
func (l *Local) Ready() <-chan struct{} { return closed }

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Run has no session to keep: it waits for ctx.
func (l *Local) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// TryAcquire grants p unless it is held.
func (l *Local) TryAcquire(_ context.Context, p int) (*Lease, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur, ok := l.held[p]; ok && cur.Valid() {
		return nil, ErrHeld
	}
	// Epochs must grow across restarts too (ledgers keep them): start
	// from the clock.
	l.epochs[p] = max(l.epochs[p]+1, uint64(time.Now().UnixNano()))
	var lease *Lease
	lease = &Lease{P: p, Epoch: l.epochs[p], grant: newLocalGrant(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.held[p] == lease {
			delete(l.held, p)
		}
	})}
	l.held[p] = lease
	return lease, nil
}

// Close releases every lease.
func (l *Local) Close(ctx context.Context) error {
	l.mu.Lock()
	leases := make([]*Lease, 0, len(l.held))
	for _, lease := range l.held {
		leases = append(leases, lease)
	}
	l.mu.Unlock()
	for _, lease := range leases {
		_ = lease.Release(ctx)
	}
	return nil
}
