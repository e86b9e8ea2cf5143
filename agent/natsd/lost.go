package natsd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"time"
)

// ErrJetStreamDisabled: the embedded server turned its JetStream off by
// itself while the agent ran. nats-server does so when a store write
// finds the disk full ("JetStream out of resources, will be DISABLED")
// or not writable, and never turns it back on: its replicas of the
// cell's streams stay offline, the cell one failure from losing a
// quorum. The server keeps its Raft state on disk for a restart, which
// is the way back (the agent stops; AwaitRoom holds the next start until
// the disk has room).
var ErrJetStreamDisabled = errors.New("the embedded nats server disabled jetstream")

// lostPoll is how often watchJetStream looks: nats-server offers no
// callback, and JetStreamEnabled is two atomic loads.
const lostPoll = 250 * time.Millisecond

// MinFreeToStart is the room the data directory's filesystem must have
// before the embedded server starts (AwaitRoom): enough for a few of
// JetStream's message blocks and Raft logs, so that an agent restarted
// on a disk that is still (nearly) full waits instead of starting,
// taking partitions and failing again at its first writes.
const MinFreeToStart = 64 << 20

// watchJetStream closes s.lost, with the reason in s.lostErr, when the
// server's JetStream turns off before Shutdown.
func (s *Server) watchJetStream(storeDir string, log *slog.Logger) {
	defer close(s.watchDone)
	tick := time.NewTicker(lostPoll)
	defer tick.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-tick.C:
		}
		if s.ns.JetStreamEnabled() {
			continue
		}
		err := fmt.Errorf("%w (store %s): %s", ErrJetStreamDisabled, storeDir, why(storeDir))
		s.lostErr.Store(&err)
		log.Error("jetstream disabled by the embedded nats server; this agent can no longer store events", "store", storeDir, "error", err)
		close(s.lost)
		return
	}
}

// why is the likely cause of a disabled JetStream, from the store's
// filesystem.
func why(storeDir string) string {
	free, err := FreeBytes(storeDir)
	switch {
	case err != nil:
		return fmt.Sprintf("its filesystem cannot be read (%v)", err)
	case free < MinFreeToStart:
		return fmt.Sprintf("the disk is full (%d bytes free)", free)
	default:
		return fmt.Sprintf("a store write failed (%d bytes free now: not writable?)", free)
	}
}

// JetStreamLost is closed when the server disabled its JetStream by itself
// (ErrJetStreamDisabled); LostErr says why.
func (s *Server) JetStreamLost() <-chan struct{} { return s.lost }

// LostErr is nil while the server's JetStream runs, else why it stopped
// (it wraps ErrJetStreamDisabled).
func (s *Server) LostErr() error {
	if p := s.lostErr.Load(); p != nil {
		return *p
	}
	return nil
}

// FreeBytes is how many bytes an unprivileged writer may still use on the
// filesystem holding dir.
func FreeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// AwaitRoom waits until the filesystem of dataDir (created if missing)
// has at least minFree bytes free, logging now and then why it waits; it
// returns ctx's error if ctx ends first. An agent stopped for a full disk
// (ErrJetStreamDisabled) and restarted by its supervisor waits here,
// unhealthy and owning nothing, until room comes back.
func AwaitRoom(ctx context.Context, dataDir string, minFree int64, log *slog.Logger) error {
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return fmt.Errorf("create the data directory %s: %w", dataDir, err)
	}
	var nextLog time.Time
	for {
		free, err := FreeBytes(dataDir)
		if err != nil {
			return err
		}
		if free >= minFree {
			if !nextLog.IsZero() {
				log.Info("the data directory's disk has room again; starting", "data_dir", dataDir, "free_bytes", free)
			}
			return nil
		}
		if time.Now().After(nextLog) {
			log.Warn("waiting for room on the data directory's disk before starting the store", "data_dir", dataDir,
				"free_bytes", free, "need_bytes", minFree)
			nextLog = time.Now().Add(10 * time.Second)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for room on %s (%d bytes free, %d needed): %w", dataDir, free, minFree, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// StoreCapacity is how many bytes this server's JetStream may store in
// all: its store limit, which nats-server sets at start to three quarters
// of the store's free disk (and what it holds already) when none is
// configured; 0 when JetStream is off.
func (s *Server) StoreCapacity() int64 {
	if cfg := s.ns.JetStreamConfig(); cfg != nil {
		return cfg.MaxStore
	}
	return 0
}

// StoreRoom is how many more bytes this server's JetStream can store: the
// free disk of its store's filesystem, or what its store limit leaves
// (StoreCapacity less what it stores) if that is less. Past the limit a
// write is refused ("insufficient resources"); on a full disk JetStream
// turns off (ErrJetStreamDisabled).
func (s *Server) StoreRoom() (int64, error) {
	free, err := FreeBytes(s.storeDir)
	if err != nil {
		return 0, err
	}
	capacity := s.StoreCapacity()
	if capacity <= 0 {
		return free, nil
	}
	jsz, err := s.ns.Jsz(nil)
	if err != nil || jsz.Disabled {
		return free, nil
	}
	return min(free, capacity-int64(jsz.Store)), nil
}
