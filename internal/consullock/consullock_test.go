package consullock_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/rivora/rivora/e2e/consultest"
	"github.com/rivora/rivora/internal/consullock"
	"github.com/rivora/rivora/testkit/poll"
)

// holder is a session kept alive for the test's duration.
type holder struct {
	*consullock.Session
	kept    chan struct{} // closed when KeepAlive returned
	keptErr error         // what it returned
}

// keepAliveEnded waits up to timeout for KeepAlive to return and reports
// whether it did, and with what.
func (h *holder) keepAliveEnded(timeout time.Duration) (bool, error) {
	select {
	case <-h.kept:
		return true, h.keptErr
	default:
	}
	select {
	case <-h.kept:
		return true, h.keptErr
	case <-time.After(timeout):
		return false, nil
	}
}

func newClient(t *testing.T, srv *consultest.Server) *api.Client {
	t.Helper()
	client, err := consullock.NewClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// start creates a session and keeps it alive until the test ends, then
// destroys it.
func start(t *testing.T, client *api.Client, cfg consullock.SessionConfig) *holder {
	t.Helper()
	cfg.TTL = max(cfg.TTL, 10*time.Second)
	if cfg.LockDelay == 0 {
		cfg.LockDelay = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := consullock.CreateSession(ctx, client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &holder{Session: s, kept: make(chan struct{})}
	runCtx, stop := context.WithCancel(context.Background())
	go func() {
		defer close(h.kept)
		h.keptErr = s.KeepAlive(runCtx)
	}()
	t.Cleanup(func() {
		stop()
		if ended, _ := h.keepAliveEnded(15 * time.Second); !ended {
			t.Errorf("KeepAlive of %s did not return 15s after its context ended", s.ID())
		}
		_ = s.Destroy(context.Background())
	})
	return h
}

func lock(t *testing.T, s *holder, key, value string) *consullock.Lease {
	t.Helper()
	l, err := s.Lock(context.Background(), key, []byte(value))
	if err != nil {
		t.Fatalf("lock %s with %s: %v", key, s.ID(), err)
	}
	return l
}

func awaitLost(t *testing.T, l *consullock.Lease, timeout time.Duration) {
	t.Helper()
	select {
	case <-l.Lost():
	case <-time.After(timeout):
		t.Fatalf("lease on %s not lost after %s", l.Key, timeout)
	}
	if l.Valid() || l.Cause() == nil {
		t.Fatalf("lost lease on %s: valid %v, cause %v", l.Key, l.Valid(), l.Cause())
	}
}

func holderOf(t *testing.T, client *api.Client, key string) (session, value string) {
	t.Helper()
	pair, _, err := client.KV().Get(key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if pair == nil {
		return "", ""
	}
	return pair.Session, string(pair.Value)
}

// One holder per key; a released key, or one whose session was destroyed
// cleanly, is free at once; every acquisition has a larger epoch.
func TestOneHolderPerKey(t *testing.T) {
	srv := consultest.Start(t)
	client := newClient(t, srv)
	a, b := start(t, client, consullock.SessionConfig{Name: "a"}), start(t, client, consullock.SessionConfig{Name: "b"})

	first := lock(t, a, "k", "a")
	if !first.Valid() || first.Epoch == 0 || first.Cause() != nil {
		t.Fatalf("fresh lease: valid %v epoch %d cause %v", first.Valid(), first.Epoch, first.Cause())
	}
	if s, v := holderOf(t, client, "k"); s != a.ID() || v != "a" {
		t.Fatalf("k held by %q valued %q, want %s valued a", s, v, a.ID())
	}
	if _, err := b.Lock(context.Background(), "k", []byte("b")); !errors.Is(err, consullock.ErrHeld) {
		t.Fatalf("second session: %v, want ErrHeld", err)
	}
	if _, err := a.Lock(context.Background(), "k", []byte("a")); !errors.Is(err, consullock.ErrHeld) {
		t.Fatalf("same session again: %v, want ErrHeld (one lease per key)", err)
	}

	if err := first.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if first.Valid() || !errors.Is(first.Cause(), consullock.ErrReleased) {
		t.Fatalf("released lease: valid %v cause %v", first.Valid(), first.Cause())
	}
	second := lock(t, b, "k", "b") // at once: a released key has no lock-delay
	if second.Epoch <= first.Epoch {
		t.Fatalf("epoch did not grow: %d then %d", first.Epoch, second.Epoch)
	}

	// Destroy gives the locks back before ending the session: free at once.
	c := start(t, client, consullock.SessionConfig{Name: "c"})
	held := lock(t, c, "k2", "c")
	if err := c.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	if held.Valid() || !errors.Is(held.Cause(), consullock.ErrReleased) {
		t.Fatalf("lease of a destroyed session: valid %v cause %v", held.Valid(), held.Cause())
	}
	if next := lock(t, b, "k2", "b"); next.Epoch <= held.Epoch {
		t.Fatalf("epoch did not grow: %d then %d", held.Epoch, next.Epoch)
	}
	if _, err := c.Lock(context.Background(), "k3", nil); !errors.Is(err, consullock.ErrDestroyed) {
		t.Fatalf("lock with a destroyed session: %v, want ErrDestroyed", err)
	}
}

// A session destroyed from outside (an operator, or the control plane
// ending a dead agent's session): its leases are lost at once, KeepAlive
// reports it gone, and its locks are free for others only after the
// lock-delay.
func TestDestroyedSessionLosesLeases(t *testing.T) {
	srv := consultest.Start(t)
	client := newClient(t, srv)
	a, b := start(t, client, consullock.SessionConfig{Name: "a"}), start(t, client, consullock.SessionConfig{Name: "b"})
	lease := lock(t, a, "k", "a")

	destroyed := time.Now()
	if _, err := client.Session().Destroy(a.ID(), nil); err != nil {
		t.Fatal(err)
	}
	awaitLost(t, lease, 5*time.Second)
	var taken *consullock.TakenError
	if !errors.As(lease.Cause(), &taken) && !errors.Is(lease.Cause(), consullock.ErrGone) {
		t.Fatalf("cause %v: want the key taken or the session gone", lease.Cause())
	}
	if ended, err := a.keepAliveEnded(10 * time.Second); !ended || !errors.Is(err, consullock.ErrGone) {
		t.Fatalf("KeepAlive of a destroyed session: returned %v with %v, want ErrGone", ended, err)
	}
	if _, err := a.Lock(context.Background(), "other", nil); !errors.Is(err, consullock.ErrGone) {
		t.Fatalf("lock with a gone session: %v, want ErrGone", err)
	}

	var next *consullock.Lease
	poll.True(t, "b takes k after the lock-delay", 10*time.Second, func() bool {
		var err error
		next, err = b.Lock(context.Background(), "k", []byte("b"))
		if err != nil && !errors.Is(err, consullock.ErrHeld) {
			t.Fatal(err)
		}
		return err == nil
	})
	if waited := time.Since(destroyed); waited < 900*time.Millisecond {
		t.Fatalf("taken %s after the session died, inside the 1s lock-delay", waited)
	}
	if next.Epoch <= lease.Epoch {
		t.Fatalf("epoch did not grow: %d then %d", lease.Epoch, next.Epoch)
	}
}

// A Lease whose key another session takes over (here: an operator
// deleting the key and b taking it) is lost, naming the new holder.
func TestTakenKeyLosesLease(t *testing.T) {
	srv := consultest.Start(t)
	client := newClient(t, srv)
	a, b := start(t, client, consullock.SessionConfig{Name: "a"}), start(t, client, consullock.SessionConfig{Name: "b"})
	lease := lock(t, a, "k", "a")
	if _, err := client.KV().Delete("k", nil); err != nil {
		t.Fatal(err)
	}
	awaitLost(t, lease, 5*time.Second)
	var taken *consullock.TakenError
	if !errors.As(lease.Cause(), &taken) || taken.Key != "k" || taken.Session != "" {
		t.Fatalf("cause %v: want k taken and free", lease.Cause())
	}
	lock(t, b, "k", "b") // deleted, not released by a session: no lock-delay
	if !a.Alive() {
		t.Fatal("losing a key ended the session")
	}
}

// A short Consul restart (well inside the TTL) costs nothing: the session
// and its locks survive in Consul's state, and renewals go on.
func TestSurvivesConsulRestart(t *testing.T) {
	srv := consultest.Start(t)
	client := newClient(t, srv)
	a := start(t, client, consullock.SessionConfig{Name: "a", EndUnconfirmed: true})
	lease := lock(t, a, "k", "a")
	before := a.Expires()
	srv.Stop()
	srv.Start()
	if !lease.Valid() {
		t.Fatalf("lease lost over a short consul restart: %v", lease.Cause())
	}
	if s, _ := holderOf(t, client, "k"); s != a.ID() {
		t.Fatalf("k held by %q after the restart, want %s", s, a.ID())
	}
	poll.True(t, "a renewal after the restart", 10*time.Second, func() bool { return a.Expires().After(before) })
	if !lease.Valid() {
		t.Fatalf("lease lost after a consul restart: %v", lease.Cause())
	}
}

// Consul unreachable for longer than the TTL: every lease is lost once a
// TTL passed since the last confirmed renewal. With EndUnconfirmed the
// session is given up; without, it is renewed again once Consul is back
// and takes locks again.
func TestNotRenewedWithinTTL(t *testing.T) {
	srv := consultest.Start(t)
	client := newClient(t, srv)
	kept := start(t, client, consullock.SessionConfig{Name: "kept"})
	ended := start(t, client, consullock.SessionConfig{Name: "ended", EndUnconfirmed: true})
	keptLease, endedLease := lock(t, kept, "k1", "kept"), lock(t, ended, "k2", "ended")

	srv.Stop()
	deadline := kept.Expires()
	awaitLost(t, keptLease, 15*time.Second)
	if lostAt := time.Now(); lostAt.Before(deadline) {
		t.Fatalf("lease lost at %s, before its session's expiry %s", lostAt, deadline)
	}
	awaitLost(t, endedLease, 5*time.Second)
	for _, l := range []*consullock.Lease{keptLease, endedLease} {
		if !errors.Is(l.Cause(), consullock.ErrNotRenewed) {
			t.Fatalf("lease on %s: cause %v, want ErrNotRenewed", l.Key, l.Cause())
		}
	}
	if done, err := ended.keepAliveEnded(5 * time.Second); !done || !errors.Is(err, consullock.ErrNotRenewed) {
		t.Fatalf("KeepAlive with EndUnconfirmed: returned %v with %v, want ErrNotRenewed", done, err)
	}
	if _, err := kept.Lock(context.Background(), "k3", nil); !errors.Is(err, consullock.ErrNotRenewed) {
		t.Fatalf("lock with an unconfirmed session: %v, want ErrNotRenewed", err)
	}

	srv.Start()
	poll.True(t, "the kept session renewed after Consul is back", 20*time.Second, kept.Alive)
	again := lock(t, kept, "k1", "kept")
	if !again.Valid() {
		t.Fatalf("lease after renewal: %v", again.Cause())
	}
	if done, err := kept.keepAliveEnded(0); done {
		t.Fatalf("KeepAlive without EndUnconfirmed returned %v", err)
	}
}

func TestNextIndex(t *testing.T) {
	for _, c := range []struct{ prev, last, want uint64 }{
		{0, 5, 5},
		{5, 9, 9},
		{9, 9, 9}, // a blocking query that timed out
		{9, 3, 0}, // went backwards: start over
		{9, 0, 0},
	} {
		if got := consullock.NextIndex(c.prev, c.last); got != c.want {
			t.Errorf("NextIndex(%d, %d) = %d, want %d", c.prev, c.last, got, c.want)
		}
	}
}

func TestNewClient(t *testing.T) {
	for _, bad := range []string{"", "127.0.0.1:8500", "consul:8500", "ftp://127.0.0.1", "http://"} {
		_, err := consullock.NewClient(bad)
		if err == nil || !strings.Contains(err.Error(), "want an http:// or https:// URL such as http://127.0.0.1:8500") {
			t.Errorf("NewClient(%q): %v", bad, err)
		}
	}
	if _, err := consullock.NewClient("https://consul.internal:8501"); err != nil {
		t.Errorf("https URL: %v", err)
	}
}
