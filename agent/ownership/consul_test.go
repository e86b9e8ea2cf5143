package ownership_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/ownership"
	"github.com/rivora/rivora/e2e/consultest"
	"github.com/rivora/rivora/internal/consullock"
	"github.com/rivora/rivora/testkit/poll"
)

func newLocker(t *testing.T, url, agent string) *ownership.Consul {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := ownership.NewConsul(ownership.ConsulConfig{URL: url, Agent: agent, LockDelay: time.Second}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(runCtx) }()
	select {
	case <-l.Ready():
	case <-ctx.Done():
		t.Fatal("no Consul session within 30 s")
	}
	t.Cleanup(func() {
		stop()
		<-done
		_ = l.Close(context.Background())
	})
	return l
}

func TestConsulLocker(t *testing.T) {
	srv := consultest.Start(t)
	ctx := context.Background()
	a := newLocker(t, srv.URL(), "a")
	b := newLocker(t, srv.URL(), "b")
	if a.Session() == "" || a.Session() == b.Session() {
		t.Fatalf("sessions %q %q", a.Session(), b.Session())
	}

	leaseA, err := a.TryAcquire(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !leaseA.Valid() || leaseA.Epoch == 0 {
		t.Fatalf("fresh lease: valid %v epoch %d", leaseA.Valid(), leaseA.Epoch)
	}
	if _, err := b.TryAcquire(ctx, 3); !errors.Is(err, ownership.ErrHeld) {
		t.Fatalf("second holder: got %v, want ErrHeld", err)
	}

	// Graceful handoff: released locks are free at once (no lock-delay).
	if err := leaseA.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if leaseA.Valid() {
		t.Fatal("released lease still valid")
	}
	leaseB, err := b.TryAcquire(ctx, 3)
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	if leaseB.Epoch <= leaseA.Epoch {
		t.Fatalf("epoch did not grow: %d then %d", leaseA.Epoch, leaseB.Epoch)
	}

	// A's session destroyed from outside (what the control plane does for
	// a dead agent): its lease is lost at once, and its lock is free for
	// others only after the lock-delay.
	leaseA2, err := a.TryAcquire(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	client, err := consullock.NewClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	if at := a.SessionReplacedAt(); !at.IsZero() {
		t.Fatalf("first session says it replaced one at %v", at)
	}
	destroyed := time.Now()
	if _, err := client.Session().Destroy(a.Session(), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-leaseA2.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not lost after its session was destroyed")
	}
	if leaseA2.Valid() {
		t.Fatal("lost lease still valid")
	}
	var leaseB2 *ownership.Lease
	poll.True(t, "b acquires 4 after the lock-delay", 10*time.Second, func() bool {
		leaseB2, err = b.TryAcquire(ctx, 4)
		return err == nil
	})
	if waited := time.Since(destroyed); waited < 900*time.Millisecond {
		t.Fatalf("acquired %s after the session died, inside the 1s lock-delay", waited)
	}
	if leaseB2.Epoch <= leaseA2.Epoch {
		t.Fatalf("epoch did not grow: %d then %d", leaseA2.Epoch, leaseB2.Epoch)
	}
	// A gets a new session and can take other partitions again.
	select {
	case <-a.SessionChanged():
	case <-time.After(10 * time.Second):
		t.Fatal("a did not replace its lost session")
	}
	// The control plane holds it to the rejoin delay from then.
	if at := a.SessionReplacedAt(); at.Before(destroyed) || at.After(time.Now()) {
		t.Fatalf("replaced at %v, want between the destroy (%v) and now", at, destroyed)
	}
	if _, err := a.TryAcquire(ctx, 5); err != nil {
		t.Fatalf("a after a new session: %v", err)
	}
}

func TestConsulLockerSurvivesConsulRestart(t *testing.T) {
	srv := consultest.Start(t)
	ctx := context.Background()
	a := newLocker(t, srv.URL(), "a")
	lease, err := a.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	srv.Start()
	// A short outage (well inside the TTL) costs nothing: the session and
	// its lock survive in Consul's state.
	if !lease.Valid() {
		t.Fatalf("lease lost over a short consul restart: %v", lease.Cause())
	}
	client, err := consullock.NewClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	pair, _, err := client.KV().Get(ownership.LockKey(1), nil)
	if err != nil || pair == nil || pair.Session != a.Session() {
		t.Fatalf("lock after restart: %+v %v", pair, err)
	}
}

func TestLocal(t *testing.T) {
	ctx := context.Background()
	l := ownership.NewLocal()
	first, err := l.TryAcquire(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, 0); !errors.Is(err, ownership.ErrHeld) {
		t.Fatalf("got %v, want ErrHeld", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := l.TryAcquire(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if second.Epoch <= first.Epoch || !second.Valid() || first.Valid() {
		t.Fatalf("epochs %d→%d valid %v/%v", first.Epoch, second.Epoch, first.Valid(), second.Valid())
	}
}
