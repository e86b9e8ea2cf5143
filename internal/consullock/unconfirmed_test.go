package consullock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivora/rivora/e2e/consultest"
	"github.com/rivora/rivora/internal/consullock"
	"github.com/rivora/rivora/testkit/cutproxy"
	"github.com/rivora/rivora/testkit/poll"
)

// A holder whose requests reach Consul but whose answers are held (a
// one-way link) loses its leases a TTL after its last confirmed renewal;
// with DestroyUnconfirmed it then destroys its session — the request
// arrives though the answer does not — so another session takes the lock
// after the lock-delay, long before Consul could have expired a session
// its renewals keep reaching. A hold shorter than the TTL costs nothing.
// After the heal the holder learns its session is gone.
func TestOneWayLinkDestroysUnconfirmedSession(t *testing.T) {
	srv := consultest.Start(t)
	link := cutproxy.New(t, srv.HTTPAddr)
	viaLink, err := consullock.NewClient("http://" + link.Addr())
	if err != nil {
		t.Fatal(err)
	}
	direct := newClient(t, srv)
	a := start(t, viaLink, consullock.SessionConfig{Name: "a", DestroyUnconfirmed: true})
	b := start(t, direct, consullock.SessionConfig{Name: "b"})
	t.Cleanup(link.Restore) // before a and b are destroyed, if the test fails while cut
	lease := lock(t, a, "k", "a")

	// Answers held for half the TTL: a renewal goes unanswered, a retry
	// after the heal is confirmed; nothing is lost or destroyed.
	link.CutDirection(cutproxy.Down)
	waitFor(t, 10*time.Second/2)
	link.Restore()
	before := a.Expires()
	poll.True(t, "a renewal confirmed after a short hold", 10*time.Second, func() bool { return a.Expires().After(before) })
	if !lease.Valid() {
		t.Fatalf("lease lost over answers held for half the TTL: %v", lease.Cause())
	}
	if info, _, err := direct.Session().Info(a.ID(), nil); err != nil || info == nil {
		t.Fatalf("session %s after a short hold: %v, %v; want it alive", a.ID(), info, err)
	}

	link.CutDirection(cutproxy.Down)
	cutAt, deadline := time.Now(), a.Expires()
	awaitLost(t, lease, 15*time.Second)
	if lostAt := time.Now(); lostAt.Before(deadline) || !errors.Is(lease.Cause(), consullock.ErrNotRenewed) {
		t.Fatalf("lease lost at %s with %v; want ErrNotRenewed at its session's expiry %s or later", lostAt, lease.Cause(), deadline)
	}
	poll.True(t, "a's session ended in Consul while its answers are held", 10*time.Second, func() bool {
		info, _, err := direct.Session().Info(a.ID(), nil)
		return err == nil && info == nil
	})
	var next *consullock.Lease
	poll.True(t, "b takes k after the lock-delay", 10*time.Second, func() bool {
		var err error
		next, err = b.Lock(context.Background(), "k", []byte("b"))
		if err != nil && !errors.Is(err, consullock.ErrHeld) {
			t.Fatal(err)
		}
		return err == nil
	})
	// Consul expires a session 2×TTL after the last renewal it received,
	// and a's renewals kept arriving until the destroy: only the destroy
	// can have freed k this early.
	took := time.Since(cutAt)
	if took >= 2*10*time.Second {
		t.Fatalf("k taken %s after the one-way cut, not before Consul could have expired the session itself", took)
	}
	t.Logf("k taken by another session %s after the one-way cut (TTL 10s, lock-delay 1s)", took.Round(100*time.Millisecond))
	if next.Epoch <= lease.Epoch {
		t.Fatalf("epoch did not grow: %d then %d", lease.Epoch, next.Epoch)
	}
	if _, err := a.Lock(context.Background(), "k2", nil); !errors.Is(err, consullock.ErrNotRenewed) {
		t.Fatalf("lock with an unconfirmed session: %v, want ErrNotRenewed", err)
	}

	link.Restore()
	if done, err := a.keepAliveEnded(15 * time.Second); !done || !errors.Is(err, consullock.ErrGone) {
		t.Fatalf("KeepAlive after the heal: returned %v with %v, want ErrGone", done, err)
	}
}

// Consul down for longer than the TTL: the destroy a DestroyUnconfirmed
// session sends does not arrive, so once Consul is back the session is
// renewed and takes its locks again, as without the option.
func TestDestroyUnconfirmedOutlivesConsulOutage(t *testing.T) {
	srv := consultest.Start(t)
	client := newClient(t, srv)
	var log lines
	a := start(t, client, consullock.SessionConfig{Name: "a", DestroyUnconfirmed: true, Log: slog.New(slog.NewTextHandler(&log, nil))})
	lease := lock(t, a, "k", "a")

	srv.Stop()
	awaitLost(t, lease, 15*time.Second)
	poll.True(t, "a destroy asked of the stopped Consul", 10*time.Second, func() bool {
		return strings.Contains(log.String(), "asked Consul to destroy it")
	})
	srv.Start()
	// A bound, not a wait: the renewal's backoff after a long outage, and
	// Consul's own start, took over 20 s on a loaded machine (a full unit
	// run with -race).
	poll.True(t, "the session renewed after Consul is back", 45*time.Second, a.Alive)
	again := lock(t, a, "k", "a")
	if !again.Valid() {
		t.Fatalf("lease after renewal: %v", again.Cause())
	}
	if s, _ := holderOf(t, client, "k"); s != a.ID() {
		t.Fatalf("k held by %q, want the same session %s", s, a.ID())
	}
	if done, err := a.keepAliveEnded(0); done {
		t.Fatalf("KeepAlive returned %v after Consul came back", err)
	}
}

// waitFor waits d: the length of a fault, not a synchronisation.
func waitFor(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-time.After(d):
	case <-t.Context().Done():
	}
}

// lines is a log sink safe for concurrent writes.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
