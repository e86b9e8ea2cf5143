package partitions

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/ownership"
	"github.com/rivora/rivora/testkit/poll"
)

// TestOpenLoopOpensSeveralPartitionsAtOnce: a restart opens every
// partition of the agent at once, up to maxParallelOpens at a time, and
// never one partition twice at once (the scheduler holds the lanes of one
// open of a partition at a time); a failed open is tried again. The fake
// open lets no open finish before maxParallelOpens run together, so opens
// made one after another never finish and the test fails.
func TestOpenLoopOpensSeveralPartitionsAtOnce(t *testing.T) {
	// More partitions than open at once, on any number of cores
	// (maxParallelOpens follows GOMAXPROCS).
	partitions, failsOnce := 2*maxParallelOpens+2, 3
	s := &Set{log: slog.New(slog.DiscardHandler), states: newLifecycle(testStallTimeout)}
	s.count.Store(int32(partitions))
	want := map[int]bool{}
	for p := range partitions {
		want[p] = true
	}
	s.states.assign(want)
	locker := ownership.NewLocal()
	for p := range partitions {
		lease, err := locker.TryAcquire(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		if !s.states.lockTaken(lease) {
			t.Fatalf("lock %d not taken", p)
		}
	}

	var (
		mu       sync.Mutex
		inOpen   = map[int]bool{}
		calls    = map[int]int{}
		most     int
		full     = make(chan struct{}) // closed once maxParallelOpens opens run together
		fullOnce sync.Once
	)
	open := func(ctx context.Context, p int) error {
		lease, ok := s.states.startOpen(p)
		if !ok {
			return nil
		}
		mu.Lock()
		if inOpen[p] {
			t.Errorf("partition %d opened twice at once", p)
		}
		inOpen[p] = true
		calls[p]++
		first := calls[p] == 1
		most = max(most, len(inOpen))
		if len(inOpen) == maxParallelOpens {
			fullOnce.Do(func() { close(full) })
		}
		mu.Unlock()
		select {
		case <-full:
		case <-ctx.Done():
		}
		mu.Lock()
		delete(inOpen, p)
		mu.Unlock()
		if p == failsOnce && first {
			s.states.openFailed(lease, false)
			return errors.New("its streams are electing a leader")
		}
		if !s.states.opened(&partitionRun{p: p, lease: lease, done: make(chan struct{})}) {
			t.Errorf("partition %d: opened refused", p)
		}
		return nil
	}

	ctx, cancel := context.WithCancel(t.Context())
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		s.openLoop(ctx, open)
	}()
	poll.True(t, "every partition runs", 10*time.Second, s.Ready)
	cancel()
	<-loopDone

	mu.Lock()
	defer mu.Unlock()
	if most != maxParallelOpens {
		t.Errorf("at most %d opens ran at once, want %d", most, maxParallelOpens)
	}
	for p := range partitions {
		wantCalls := 1
		if p == failsOnce {
			wantCalls = 2
		}
		if calls[p] != wantCalls {
			t.Errorf("partition %d opened %d times, want %d", p, calls[p], wantCalls)
		}
		if s.states.run(p) == nil {
			t.Errorf("partition %d does not run", p)
		}
	}
}
