package natsd

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivora/rivora/testkit/poll"
)

// gatedSync is a sync that blocks until released, counting the syncs
// begun and ended.
type gatedSync struct {
	started, ended atomic.Int64
	release        chan error
}

func newGatedSync() *gatedSync { return &gatedSync{release: make(chan error)} }

func (g *gatedSync) sync() error {
	g.started.Add(1)
	err := <-g.release
	g.ended.Add(1)
	return err
}

// waiting is how many callers wait for the next sync.
func (s *Syncer) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next == nil {
		return 0
	}
	return s.next.waiters
}

// commitAsync calls Commit in a goroutine; its answer arrives on the
// channel.
func commitAsync(ctx context.Context, s *Syncer) <-chan error {
	done := make(chan error, 1)
	go func() { done <- s.Commit(ctx) }()
	return done
}

func TestNilSyncerCommitsAtOnceForFree(t *testing.T) {
	var s *Syncer
	if err := s.Commit(t.Context()); err != nil {
		t.Fatalf("nil Syncer Commit = %v, want nil", err)
	}
	allocs := testing.AllocsPerRun(100, func() { _ = s.Commit(context.Background()) })
	if allocs != 0 {
		t.Fatalf("nil Syncer Commit allocates %.0f times, want 0", allocs)
	}
	s.close() // no panic
}

// Callers arriving while a sync runs share the next one: 100 callers
// behind a running sync cost one more sync, and none of them is answered
// by the sync that began before it called.
func TestConcurrentCommitsShareTheNextSync(t *testing.T) {
	g := newGatedSync()
	s := newSyncer(g.sync)
	defer s.close()
	first := commitAsync(t.Context(), s)
	poll.True(t, "the first sync starts", 5*time.Second, func() bool { return g.started.Load() == 1 })

	const callers = 100
	answers := make([]<-chan error, callers)
	for i := range answers {
		answers[i] = commitAsync(t.Context(), s)
	}
	poll.True(t, "every caller waits for the next sync", 5*time.Second, func() bool { return s.waiting() == callers })

	g.release <- nil // the first sync ends: it answers only the first caller
	if err := <-first; err != nil {
		t.Fatalf("first Commit = %v", err)
	}
	poll.True(t, "the second sync starts", 5*time.Second, func() bool { return g.started.Load() == 2 })
	for i, done := range answers {
		select {
		case err := <-done:
			t.Fatalf("caller %d answered (%v) before a sync that began after its call ended", i, err)
		default:
		}
	}
	g.release <- nil
	for i, done := range answers {
		if err := <-done; err != nil {
			t.Fatalf("caller %d: Commit = %v", i, err)
		}
	}
	if n := g.started.Load(); n != 2 {
		t.Fatalf("%d callers cost %d syncs, want 2 (one running, one shared)", callers+1, n)
	}
}

// Against a model: whatever the interleaving, a Commit returns only after
// a sync that began after it was called has ended.
func TestCommitWaitsForASyncBegunAfterTheCall(t *testing.T) {
	var started, ended atomic.Int64
	s := newSyncer(func() error {
		started.Add(1)
		time.Sleep(50 * time.Microsecond) // a sync takes time: callers pile up
		ended.Add(1)
		return nil
	})
	defer s.close()
	var wg sync.WaitGroup
	var violations, commits atomic.Int64
	for range 32 {
		wg.Go(func() {
			for range 200 {
				// Syncs run one at a time, in order: once sync number
				// before+1 (the first that can have begun after this
				// point) has ended, ended exceeds before.
				before := started.Load()
				if err := s.Commit(context.Background()); err != nil {
					t.Errorf("Commit = %v", err)
					return
				}
				commits.Add(1)
				if ended.Load() <= before {
					violations.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if v := violations.Load(); v != 0 {
		t.Fatalf("%d of %d Commits returned before a sync begun after their call ended", v, commits.Load())
	}
	if syncs := started.Load(); syncs >= commits.Load() {
		t.Fatalf("%d commits took %d syncs: no sync was shared", commits.Load(), syncs)
	}
	t.Logf("%d commits, %d syncs", commits.Load(), started.Load())
}

// A failed sync answers every caller waiting for it with its error, and
// every later caller too: the kernel may have dropped the pages it could
// not write, and a later sync would not tell.
func TestSyncFailureReachesEveryWaiterAndStays(t *testing.T) {
	g := newGatedSync()
	s := newSyncer(g.sync)
	defer s.close()
	first := commitAsync(t.Context(), s)
	poll.True(t, "the first sync starts", 5*time.Second, func() bool { return g.started.Load() == 1 })
	answers := make([]<-chan error, 10)
	for i := range answers {
		answers[i] = commitAsync(t.Context(), s)
	}
	poll.True(t, "every caller waits for the next sync", 5*time.Second, func() bool { return s.waiting() == len(answers) })
	g.release <- nil
	if err := <-first; err != nil {
		t.Fatalf("first Commit = %v", err)
	}
	diskErr := errors.New("input/output error")
	g.release <- diskErr
	for i, done := range answers {
		if err := <-done; !errors.Is(err, diskErr) {
			t.Fatalf("caller %d: Commit = %v, want the sync's error", i, err)
		}
	}
	if err := s.Commit(t.Context()); !errors.Is(err, diskErr) {
		t.Fatalf("Commit after a failed sync = %v, want the failure again", err)
	}
	if n := g.started.Load(); n != 2 {
		t.Fatalf("%d syncs, want 2: none after the failure", n)
	}
}

// A caller whose context ends stops waiting; the sync still answers the
// others, and close waits for it.
func TestCommitReturnsWhenItsContextEnds(t *testing.T) {
	g := newGatedSync()
	s := newSyncer(g.sync)
	ctx, cancel := context.WithCancel(t.Context())
	leaving := commitAsync(ctx, s)
	staying := commitAsync(t.Context(), s)
	poll.True(t, "a sync starts", 5*time.Second, func() bool { return g.started.Load() == 1 })
	cancel()
	if err := <-leaving; !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit with its context cancelled = %v, want context.Canceled", err)
	}
	closed := make(chan struct{})
	go func() {
		// Both callers may have joined the first sync, or the second one
		// the next: release every sync until the staying caller is answered.
		for {
			select {
			case g.release <- nil:
			case <-closed:
				return
			}
		}
	}()
	if err := <-staying; err != nil {
		t.Fatalf("the other caller's Commit = %v", err)
	}
	s.close()
	close(closed)
	if err := s.Commit(t.Context()); !errors.Is(err, errSyncerClosed) {
		t.Fatalf("Commit after close = %v, want errSyncerClosed", err)
	}
	if g.started.Load() != g.ended.Load() {
		t.Fatalf("close returned with a sync running (%d begun, %d ended)", g.started.Load(), g.ended.Load())
	}
}
