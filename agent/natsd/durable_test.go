package natsd

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// With Fsync a single node writes every message to the OS before it
// acknowledges it (so a sync begun after the ack covers it), and
// concurrent barriers share syncs of the store.
func TestFsyncWritesBeforeTheAckAndSyncsInGroups(t *testing.T) {
	dir := t.TempDir()
	srv, err := Start(Config{DataDir: dir, Fsync: true}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer srv.Shutdown()
	if srv.Syncer() == nil {
		t.Fatal("Fsync on a single node: no group commit (Syncer nil)")
	}
	ctx := t.Context()
	js := srv.JetStream()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DURABLE", Subjects: []string{"durable.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}

	// The barrier is enough only if JetStream's ack comes after write(2):
	// the acknowledged message must be in the block file already.
	payload := []byte("acked-before-any-barrier-7f3c9a")
	if _, err := js.Publish(ctx, "durable.one", payload); err != nil {
		t.Fatal(err)
	}
	if !blocksHold(t, filepath.Join(dir, "jetstream", "jetstream", "$G", "streams", "DURABLE", "msgs"), payload) {
		t.Fatal("an acknowledged message is not in its stream's block file: the store buffers writes past the ack, and a sync after the ack would not cover it")
	}

	syncs0, commits0 := testutil.ToFloat64(storeSyncs), testutil.ToFloat64(storeSyncCommits)
	const callers = 64
	var published, wg sync.WaitGroup
	published.Add(callers)
	errs := make(chan error, callers)
	for i := range callers {
		wg.Go(func() {
			_, err := js.Publish(ctx, "durable.many", fmt.Appendf(nil, "event %d", i))
			published.Done()
			if err != nil {
				errs <- err
				return
			}
			published.Wait() // every caller commits at once
			errs <- srv.Syncer().Commit(ctx)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("publish and commit: %v", err)
		}
	}
	syncs, commits := testutil.ToFloat64(storeSyncs)-syncs0, testutil.ToFloat64(storeSyncCommits)-commits0
	if commits != callers || syncs < 1 || syncs >= callers {
		t.Fatalf("%d barriers answered by %.0f syncs (%.0f counted): want all %d answered by fewer syncs", callers, syncs, commits, callers)
	}
	t.Logf("%d barriers, %.0f syncs", callers, syncs)
}

// blocksHold reports whether a stream's block files hold b.
func blocksHold(t *testing.T, msgs string, b []byte) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(msgs, "*.blk"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no block files in %s (%v)", msgs, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, b) {
			return true
		}
	}
	return false
}

// Without Fsync there is no barrier (Commit of the nil Syncer returns at
// once); a cluster member keeps Fsync with JetStream's own SyncAlways.
func TestGroupCommitOnlyForASingleNodeWithFsync(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want bool
	}{
		{"no fsync", Config{}, false},
		{"fsync, single node", Config{Fsync: true}, true},
		{"fsync, cluster member", Config{Fsync: true, ClusterListen: "127.0.0.1:0"}, false},
	} {
		syncStore, closeStore, err := groupCommit(tc.cfg, t.TempDir(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := syncStore != nil; got != tc.want {
			t.Errorf("%s: group commit %v, want %v", tc.name, got, tc.want)
		}
		if syncStore != nil {
			if err := syncStore(); err != nil {
				t.Errorf("%s: sync: %v", tc.name, err)
			}
			_ = closeStore()
		}
	}
	srv, err := Start(Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if srv.Syncer() != nil {
		t.Fatal("a server without Fsync has a group commit")
	}
	if err := srv.Syncer().Commit(context.Background()); err != nil {
		t.Fatalf("Commit without Fsync = %v", err)
	}
}
