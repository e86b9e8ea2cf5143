package owner_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/testkit/cutcell"
	"github.com/rivora/rivora/testkit/poll"
)

// A rebuild's scan reads every message its stream's leader stored, even
// when the consumer that reads it sits on a replica that is behind: here
// the former leader, cut off while the others went on writing, scanned
// from the moment the link heals (the consumer lands on a random replica,
// so the scan runs several times while the former leader catches up).
// Ending where such a replica ends lost a partition's latest events in
// TestPartitionIsolatedOwner.
func TestScanReadsPastAReplicaThatIsBehind(t *testing.T) {
	c := cutcell.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := jetstream.StreamConfig{Name: "SCAN", Subjects: []string{"scan.>"}, Storage: jetstream.FileStorage, Replicas: 3, AllowDirect: true}
	var st jetstream.Stream
	if err := poll.Check(30*time.Second, 250*time.Millisecond, func() (err error) {
		st, err = c.Servers[0].JetStream().CreateOrUpdateStream(ctx, cfg)
		return err
	}); err != nil {
		t.Fatalf("create the stream: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := -1
	for i := range c.Servers {
		if cutcell.Name(i) == info.Cluster.Leader {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatalf("leader %q is none of the cell's servers", info.Cluster.Leader)
	}
	other := (leader + 1) % len(c.Servers)
	publish := func(i, n int) {
		t.Helper()
		js := c.Servers[i].JetStream()
		for k := range n {
			if err := poll.Check(30*time.Second, 100*time.Millisecond, func() error {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				_, err := js.Publish(pctx, fmt.Sprintf("scan.%d", k%7), []byte("x"))
				return err
			}); err != nil {
				t.Fatalf("publish through %s: %v", cutcell.Name(i), err)
			}
		}
	}
	publish(leader, 50)

	c.Net.Isolate(cutcell.Name(leader))
	// The cut leader goes on appending what it can never commit.
	stale := c.Servers[leader].JetStream()
	for k := range 200 {
		_, _ = stale.PublishAsync(fmt.Sprintf("scan.%d", k%7), []byte("lost"))
	}
	publish(other, 2000)
	// Wait until the cut leader has stepped down (it loses its quorum
	// after 10s): until then it answers for the stream with its own
	// state. Then, answered by nobody, its own clients' requests fail.
	staleStream, err := stale.Stream(ctx, "SCAN")
	if err != nil {
		t.Fatal(err)
	}
	poll.True(t, "the cut leader stepped down", time.Minute, func() bool {
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		info, err := staleStream.Info(ictx)
		return err != nil || info.Cluster.Leader != cutcell.Name(leader)
	})
	c.Net.Heal()

	js := c.Servers[other].JetStream()
	st, err = js.Stream(ctx, "SCAN")
	if err != nil {
		t.Fatal(err)
	}
	const stored = 50 + 2000
	// A scan may fail while the cell elects leaders again (the former
	// leader rejoins with a higher term): the open that runs it is
	// tried again. A scan that succeeds must have read everything, and
	// no scan may skip or repeat a sequence.
	for run := range 12 {
		var read, next uint64
		var gap error
		err := poll.Check(time.Minute, 100*time.Millisecond, func() error {
			read, next = 0, 0
			err := owner.Scan(ctx, js, st, func(msg jetstream.Msg, meta *jetstream.MsgMetadata) error {
				read++
				if next != 0 && meta.Sequence.Stream != next {
					gap = fmt.Errorf("seq %d after %d", meta.Sequence.Stream, next-1)
					return gap
				}
				next = meta.Sequence.Stream + 1
				return nil
			})
			if gap != nil {
				return nil // not to be retried
			}
			return err
		})
		if gap != nil {
			t.Fatalf("scan %d: %v", run, gap)
		}
		if err != nil {
			t.Fatalf("scan %d: %v", run, err)
		}
		if read != stored || next != stored+1 {
			t.Fatalf("scan %d read %d messages through seq %d; the leader stores %d", run, read, next-1, stored)
		}
	}
}

// A scan ends at the last message stored, when the stream's last
// sequences were deleted since (delivered events purged): the leader
// says nothing follows, and the scan does not wait for more.
func TestScanEndsWhereTheLeaderHasNothingMore(t *testing.T) {
	srv, err := natsd.Start(natsd.Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx := context.Background()
	js := srv.JetStream()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TAIL", Subjects: []string{"tail.>"}, Storage: jetstream.FileStorage, AllowDirect: true})
	if err != nil {
		t.Fatal(err)
	}
	for k := range 10 {
		if _, err := js.Publish(ctx, fmt.Sprintf("tail.%d", k%3), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for _, seq := range []uint64{4, 9, 10} {
		if err := st.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	var got []uint64
	if err := owner.Scan(ctx, js, st, func(msg jetstream.Msg, meta *jetstream.MsgMetadata) error {
		got = append(got, meta.Sequence.Stream)
		return nil
	}); err != nil {
		t.Fatalf("scan: %v", err)
	}
	if want := []uint64{1, 2, 3, 5, 6, 7, 8}; !slices.Equal(got, want) {
		t.Fatalf("scan read seqs %v, want %v", got, want)
	}
}
