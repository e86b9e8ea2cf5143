package owner_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
)

// runPartition runs partition p of n alone and hands back Run's error.
func (n *node) runPartition(ctx context.Context, p int) <-chan error {
	done := make(chan error, 1)
	go func() { done <- n.parts[p].Run(ctx) }()
	return done
}

// reopen opens partition p again, as the agent does after it failed, and
// runs it until the test ends.
func (n *node) reopen(p int) {
	n.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	n.t.Cleanup(cancel)
	n.sched.DropPartition(p)
	part, err := owner.Open(ctx, p, n.deps, n.leases[p])
	if err != nil {
		n.t.Fatalf("reopen partition %d: %v", p, err)
	}
	n.parts[p] = part
	done := n.runPartition(ctx, p)
	n.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			n.t.Errorf("reopened partition %d: %v", p, err)
		}
	})
}

// awaitRunError waits for a partition's Run to end with an error.
func awaitRunError(t *testing.T, done <-chan error, within time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("%s: the partition stopped without an error", what)
		}
		return err
	case <-time.After(within):
		t.Fatalf("%s: the partition still runs %s later, and INGEST keeps its events", what, within)
	}
	return nil
}

// The chaos hour's silent stall (issue 27): after a one-way fault healed,
// the owner reopened a partition, and a server whose view of the cluster
// lagged still held the mover's old consumer. The fresh consumer's pull
// reached it too, and when that server caught up with the deletion it
// answered the pull "409 Consumer Deleted". The client library stops
// consuming on that answer, silently; the real consumer, alive and full,
// got no pull again, and every event accepted for the partition stayed in
// INGEST. Here a spy on the consumer's pull subject answers the pull just
// as that server did. The mover must notice that its consumer stopped, and
// the partition restart (as after any failed move), so the events move.
func TestAMoverWhosePullIsAnsweredConsumerDeletedRestarts(t *testing.T) {
	n := open(t, t.TempDir(), mustDir(t, t.TempDir()), []*rivorav1.Destination{dest("orders", "http://127.0.0.1:1", 5)})
	p := lanes.Partition("orders", partitions)
	nc := n.srv.JetStream().Conn()
	pulls, err := nc.SubscribeSync(fmt.Sprintf("$JS.API.CONSUMER.MSG.NEXT.%s.mover-%d", lanes.IngestStream, p))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := n.runPartition(ctx, p)
	first := n.publish("orders", "u1")
	poll.True(t, "the first event moved", 10*time.Second, func() bool {
		_, ok := n.sched.Find(first)
		return ok
	})

	pull, err := pulls.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no pull request from the mover seen: %v", err)
	}
	deleted := nats.NewMsg(pull.Reply)
	deleted.Header.Set("Status", "409")
	deleted.Header.Set("Description", "Consumer Deleted")
	if err := nc.PublishMsg(deleted); err != nil {
		t.Fatal(err)
	}
	second := n.publish("orders", "u1")

	err = awaitRunError(t, done, 10*time.Second, "the mover's pull was answered Consumer Deleted")
	if !errors.Is(err, owner.ErrMoverStopped) || !strings.Contains(err.Error(), "consumer deleted") {
		t.Fatalf("the partition stopped with %v, want ErrMoverStopped naming the consumer's answer", err)
	}
	n.reopen(p)
	poll.True(t, "the second event moved after the restart", 10*time.Second, func() bool {
		_, ok := n.sched.Find(second)
		return ok
	})
	a, _ := n.sched.Find(first)
	b, _ := n.sched.Find(second)
	if a.Ahead != 0 || b.Ahead != 1 {
		t.Fatalf("lane order after the restart: first has %d ahead, second %d; want 0 and 1", a.Ahead, b.Ahead)
	}
}

// A mover whose consumer is really deleted while the partition runs (the
// server answers its waiting pull "409 Consumer Deleted") restarts the
// partition the same way, and the restart's fresh consumer moves what
// was published meanwhile.
func TestAMoverWhoseConsumerIsDeletedRestarts(t *testing.T) {
	n := open(t, t.TempDir(), mustDir(t, t.TempDir()), []*rivorav1.Destination{dest("orders", "http://127.0.0.1:1", 5)})
	p := lanes.Partition("orders", partitions)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := n.runPartition(ctx, p)
	first := n.publish("orders", "u1")
	poll.True(t, "the first event moved", 10*time.Second, func() bool {
		_, ok := n.sched.Find(first)
		return ok
	})
	if err := n.srv.JetStream().DeleteConsumer(ctx, lanes.IngestStream, fmt.Sprintf("mover-%d", p)); err != nil {
		t.Fatalf("delete the mover's consumer: %v", err)
	}
	err := awaitRunError(t, done, 10*time.Second, "the mover's consumer was deleted")
	if !errors.Is(err, owner.ErrMoverStopped) {
		t.Fatalf("the partition stopped with %v, want ErrMoverStopped", err)
	}
	second := n.publish("orders", "u1")
	n.reopen(p)
	poll.True(t, "the second event moved after the restart", 10*time.Second, func() bool {
		_, ok := n.sched.Find(second)
		return ok
	})
}

// The net under every other way a mover could go quiet (issue 27): INGEST
// holds an event for the partition, the mover takes nothing (here its
// consumer is paused: it answers pulls with nothing, as a consumer
// without a working leader does), and the partition restarts once that
// has lasted the mover stall timeout, with a warning that says what
// INGEST holds. The fresh consumer moves the event. An idle partition, or
// one whose mover keeps up, runs on past the timeout.
func TestAMoverThatTakesNothingFromIngestRestartsThePartition(t *testing.T) {
	const stall = 2 * time.Second
	var logged syncBuffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	n := openTuned(t, t.TempDir(), mustDir(t, t.TempDir()), []*rivorav1.Destination{dest("orders", "http://127.0.0.1:1", 5)}, log,
		func(deps *owner.Deps) { deps.MoverStallTimeout = stall })
	p := lanes.Partition("orders", partitions)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := n.runPartition(ctx, p)

	// Healthy, for twice the timeout: events move, and between them the
	// partition is idle.
	started := time.Now()
	for time.Since(started) < 2*stall {
		id := n.publish("orders", "u1")
		poll.True(t, "an event moved", 10*time.Second, func() bool {
			_, ok := n.sched.Find(id)
			return ok
		})
		select {
		case err := <-done:
			t.Fatalf("a partition whose mover keeps up stopped: %v", err)
		case <-time.After(stall / 2):
		}
	}

	js := n.srv.JetStream()
	if _, err := js.PauseConsumer(ctx, lanes.IngestStream, fmt.Sprintf("mover-%d", p), time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("pause the mover's consumer: %v", err)
	}
	held := n.publish("orders", "u1")
	heldAt := time.Now()
	err := awaitRunError(t, done, stall+10*time.Second, "INGEST holds an event the mover does not take")
	if !errors.Is(err, owner.ErrMoverStalled) {
		t.Fatalf("the partition stopped with %v, want ErrMoverStalled", err)
	}
	if took := time.Since(heldAt); took < stall {
		t.Fatalf("the partition restarted %s after the event waited, before the stall timeout %s", took, stall)
	}
	warning := logged.String()
	if !strings.Contains(warning, "INGEST holds events for this partition that its mover has not taken") || !strings.Contains(warning, "waiting=1") {
		t.Fatalf("the stall was not logged with what INGEST holds: %q", warning)
	}
	n.reopen(p)
	poll.True(t, "the held event moved after the restart", 10*time.Second, func() bool {
		_, ok := n.sched.Find(held)
		return ok
	})
}
