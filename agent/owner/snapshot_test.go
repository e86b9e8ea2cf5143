package owner_test

import (
	"bytes"
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
)

// syncBuffer is a log sink the owners' goroutines may write concurrently.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// laneState is one rebuilt lane as the scheduler holds it.
type laneState struct {
	Subject string
	Entries []scheduler.ExportedEntry
	Head    scheduler.Head
	Pending int
}

// schedulerState is every lane of every partition of n, by subject, with
// its head state.
func schedulerState(t *testing.T, n *node) []laneState {
	t.Helper()
	var out []laneState
	for p := range partitions {
		for _, l := range n.sched.ExportPartition(p) {
			loc, ok := n.sched.Find(l.Entries[0].ID.String())
			if !ok {
				t.Fatalf("lane %v: head %s not found", l.ID, l.Entries[0].ID)
			}
			out = append(out, laneState{Subject: l.ID.Subject(p), Entries: l.Entries, Head: loc.Head, Pending: n.sched.Pending(l.ID.Destination)})
		}
	}
	slices.SortFunc(out, func(a, b laneState) int { return cmp.Compare(a.Subject, b.Subject) })
	return out
}

// stopCleanly is a handoff's order: detach every partition (the snapshot
// is taken), then end the loops (the owners write it).
func (n *node) stopCleanly() {
	for _, part := range n.parts {
		part.Detach()
	}
	n.stop()
}

// fillAndStop makes a store with pending lanes (one whose head failed and
// is recorded in the ledger), a delivered event (a done record) and a
// partition with nothing pending, then stops it cleanly. It returns the
// data dir and the snapshot dir.
func fillAndStop(t *testing.T) (dir, snapDir string, dests []*rivorav1.Destination) {
	var mu sync.Mutex
	failing := map[string]bool{}
	p := newPartner(t, http.StatusServiceUnavailable, func(id string, _ int) bool {
		mu.Lock()
		defer mu.Unlock()
		return failing[id]
	})
	dir, snapDir = t.TempDir(), t.TempDir()
	dests = []*rivorav1.Destination{dest("orders", p.URL(), 50), dest("invoices", p.URL(), 50)}
	n := openWith(t, dir, mustDir(t, t.TempDir()), dests, snapDir, slog.New(slog.DiscardHandler))
	var heads []string
	mu.Lock()
	for _, d := range []string{"orders", "invoices"} {
		for l := range 5 {
			lane := "stuck-" + string(rune('a'+l))
			heads = append(heads, n.publish(d, lane))
			failing[heads[len(heads)-1]] = true
			for range 3 {
				failing[n.publish(d, lane)] = true
			}
		}
	}
	mu.Unlock()
	n.publish("orders", "free")
	n.run(true)
	poll.True(t, "every head attempted and recorded, the free lane delivered", 10*time.Second, func() bool {
		for _, id := range heads {
			loc, ok := n.sched.Find(id)
			if !ok || loc.Head.LastAttemptAt.IsZero() || loc.InFlight {
				return false
			}
		}
		return len(p.DeliveredByLane()["free"]) == 1 && n.totalMsgs(lanes.LedgerStream) >= uint64(len(heads))+1
	})
	n.stopCleanly()
	for pt := range partitions {
		if _, err := os.Stat(filepath.Join(snapDir, "partition-"+string(rune('0'+pt))+".snapshot")); err != nil {
			t.Fatalf("no snapshot of partition %d after a clean stop: %v", pt, err)
		}
	}
	return dir, snapDir, dests
}

// copyDir copies a stopped server's data dir, so the same store can be
// rebuilt twice, once from its snapshot and once by a full scan.
func copyDir(t *testing.T, from string) string {
	t.Helper()
	to := t.TempDir()
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatalf("copy %s: %v", from, err)
	}
	return to
}

// A restart after a clean stop rebuilds from the snapshot exactly the
// scheduler state a full scan of the same store rebuilds: lanes, entries
// (sequence, id, acceptance), heads; and the snapshot is used only once.
func TestSnapshotRebuildsWhatTheScanRebuilds(t *testing.T) {
	dir, snapDir, dests := fillAndStop(t)
	scanDir := copyDir(t, dir)
	arch := mustDir(t, t.TempDir())

	var logs syncBuffer
	fast := openWith(t, dir, arch, dests, snapDir, slog.New(slog.NewTextHandler(&logs, nil)))
	fromSnapshot := schedulerState(t, fast)
	fast.stop()
	if got := strings.Count(logs.String(), "partition rebuilt from snapshot"); got != partitions {
		t.Fatalf("%d partitions rebuilt from their snapshot, want %d; log:\n%s", got, partitions, logs.String())
	}
	if left, _ := os.ReadDir(snapDir); len(left) != 0 {
		t.Fatalf("snapshots left after use: %v", left)
	}

	slow := openWith(t, scanDir, arch, dests, "", slog.New(slog.DiscardHandler))
	fromScan := schedulerState(t, slow)
	slow.stop()
	if len(fromScan) != 10 {
		t.Fatalf("full scan rebuilt %d lanes, want 10", len(fromScan))
	}
	for _, l := range fromScan {
		if len(l.Entries) != 4 || l.Head.LastAttemptAt.IsZero() {
			t.Fatalf("full scan: lane %s has %d entries, head %+v; want 4 and a recorded attempt", l.Subject, len(l.Entries), l.Head)
		}
	}
	if !reflect.DeepEqual(fromSnapshot, fromScan) {
		t.Fatalf("rebuilt from the snapshot:\n%+v\nby a full scan:\n%+v", fromSnapshot, fromScan)
	}
}

// A snapshot is used only for the store it was taken of: one more event
// stored, or one removed, since the clean stop, and the rebuild scans.
func TestSnapshotOfAChangedStoreIsNotUsed(t *testing.T) {
	for _, change := range []string{"written", "deleted"} {
		t.Run(change, func(t *testing.T) {
			dir, snapDir, dests := fillAndStop(t)
			p := lanes.Partition("orders", partitions)
			changeLaneStore(t, dir, p, change)

			var logs syncBuffer
			n := openWith(t, dir, mustDir(t, t.TempDir()), dests, snapDir, slog.New(slog.NewTextHandler(&logs, nil)))
			// Four in each stuck lane of partition p's destinations (free was
			// delivered).
			want, got := 0, 0
			for _, d := range dests {
				if lanes.Partition(d.GetId(), partitions) == p {
					want += 20
					got += n.sched.Pending(d.GetId())
				}
			}
			switch change {
			case "written":
				want++
			case "deleted":
				want--
			}
			if got != want {
				t.Fatalf("partition %d: %d pending after the rebuild, want %d", p, got, want)
			}
			n.stop()
			out := logs.String()
			if !strings.Contains(out, "pending snapshot stale") || strings.Count(out, "partition rebuilt from snapshot") != partitions-1 {
				t.Fatalf("partition %d should have scanned (its store changed), the other used its snapshot; log:\n%s", p, out)
			}
		})
	}
}

// changeLaneStore stores one more copy of the last event of partition p's
// lane store, or deletes its first (pending) event, with nothing of
// Rivora's running.
func changeLaneStore(t *testing.T, dir string, p int, change string) {
	t.Helper()
	srv, err := natsd.Start(natsd.Config{DataDir: dir}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	ctx := context.Background()
	js := srv.JetStream()
	st, err := js.Stream(ctx, lanes.LanesStream(p))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last, err := st.GetMsg(ctx, info.State.LastSeq)
	if err != nil {
		t.Fatal(err)
	}
	switch change {
	case "written":
		msg := nats.NewMsg(last.Subject)
		msg.Data = last.Data
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	case "deleted":
		if err := st.DeleteMsg(ctx, info.State.FirstSeq); err != nil {
			t.Fatal(err)
		}
	}
}
