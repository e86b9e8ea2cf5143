package natsd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	storeSyncs = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rivora_store_syncs_total",
		Help: "Syncs of the JetStream store's filesystem run by the group commit (--fsync on a single node).",
	})
	storeSyncCommits = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rivora_store_sync_commits_total",
		Help: "Durability barriers (one per acknowledged publish, batch or move) answered by a sync; divided by rivora_store_syncs_total, how many share one sync.",
	})
	storeSyncSeconds = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "rivora_store_sync_seconds",
		Help:    "How long one sync of the JetStream store's filesystem took.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
	storeSyncFailures = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rivora_store_sync_failures_total",
		Help: "Failed syncs of the JetStream store; after one, every durability barrier fails until the process restarts.",
	})
)

// Collectors are the group commit's metrics, registered in the default
// registry as well: for a process with a registry of its own (an edge).
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{storeSyncs, storeSyncCommits, storeSyncSeconds, storeSyncFailures}
}

// errSyncerClosed answers a Commit after the server stopped.
var errSyncerClosed = errors.New("the store is shut down; nothing more can be made durable")

// Syncer is the store's group commit, the durability barrier of --fsync.
// JetStream then runs without SyncAlways: a stream acknowledges a write
// once it is in the OS (a single node's streams write(2) every message
// before they acknowledge it), and a caller that answers its own client,
// or removes an event's source copy after a move, first calls Commit.
// Commit returns once a sync of the store's filesystem that began after
// the call has finished, so every write acknowledged to the caller before
// it survives a power loss. Callers that arrive while a sync runs share
// the next one: under load one sync answers many acknowledgements, where
// SyncAlways syncs each write on its own.
//
// A nil *Syncer is the store without --fsync: Commit returns nil at once,
// and an ack means the write reached the OS.
//
// Invariants: a round's sync starts only after every waiter of the round
// joined it (a waiter joins next, and run takes next before it syncs);
// rounds run one at a time, in order; every waiter of a round is answered
// once its sync ended; once a sync failed, every later Commit fails.
type Syncer struct {
	sync func() error

	mu sync.Mutex
	// next is the round the next sync answers (nil: nobody waits).
	next *syncRound
	// running: a run goroutine serves the rounds (at most one).
	running bool
	closed  bool
	// failed is the first sync failure, answered to every later Commit:
	// the kernel may have dropped the pages it could not write, and a
	// later sync would not tell.
	failed error
	// runs tracks the run goroutine, for close.
	runs sync.WaitGroup
}

// syncRound is the callers one sync answers.
type syncRound struct {
	done    chan struct{}
	err     error // set before done is closed
	waiters int
}

// newSyncer returns a group commit over syncStore, which makes every
// write done before it started durable.
func newSyncer(syncStore func() error) *Syncer {
	return &Syncer{sync: syncStore}
}

// Commit returns once a sync that began after the call has finished: nil
// when every write the store acknowledged before the call is durable, the
// sync's error otherwise, or ctx's if it ended first (the sync still runs,
// for the other callers).
func (s *Syncer) Commit(ctx context.Context) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	switch {
	case s.failed != nil:
		s.mu.Unlock()
		return s.failed
	case s.closed:
		s.mu.Unlock()
		return errSyncerClosed
	}
	r := s.next
	if r == nil {
		r = &syncRound{done: make(chan struct{})}
		s.next = r
	}
	r.waiters++
	if !s.running {
		s.running = true
		s.runs.Add(1)
		go s.run()
	}
	s.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run syncs round after round while callers wait, then ends: no goroutine
// is left behind while the store is idle.
func (s *Syncer) run() {
	defer s.runs.Done()
	for {
		s.mu.Lock()
		r := s.next
		s.next = nil
		if r == nil {
			s.running = false
			s.mu.Unlock()
			return
		}
		failed := s.failed
		s.mu.Unlock()
		r.err = failed
		if failed == nil {
			r.err = s.syncOnce()
		}
		storeSyncCommits.Add(float64(r.waiters))
		close(r.done)
	}
}

// syncOnce runs one sync, counts it and keeps its failure for good.
func (s *Syncer) syncOnce() error {
	start := time.Now()
	err := s.sync()
	storeSyncSeconds.Observe(time.Since(start).Seconds())
	storeSyncs.Inc()
	if err == nil {
		return nil
	}
	storeSyncFailures.Inc()
	err = fmt.Errorf("sync the JetStream store (acknowledgements are not durable; restart the process once the disk is fixed): %w", err)
	s.mu.Lock()
	s.failed = err
	s.mu.Unlock()
	return err
}

// close refuses new Commits and waits until the waiting ones are answered.
func (s *Syncer) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.runs.Wait()
}
