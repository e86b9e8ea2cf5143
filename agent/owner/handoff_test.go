package owner_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
)

// A partition being handed off is detached from the scheduler at once,
// but its mover runs until the handoff ends. What it moves meanwhile must
// not reach the scheduler: a lane registered there after the detach is
// one of a partition not open here, and it waits until this agent takes
// the partition back, when the rebuild puts the whole lane behind it. The
// stranded event then goes out ahead of its lane, and once more in its
// place: the chaos hour's reorders and "twice in one term" duplicates
// after an owner change (a1 handed partitions 1 and 7 to a3, a3 was
// killed, a1 took them back).
func TestAPartitionTakenBackDeliversItsLaneInOrderOnce(t *testing.T) {
	partner := newPartner(t, 0, nil)
	n := open(t, t.TempDir(), mustDir(t, t.TempDir()), []*rivorav1.Destination{dest("orders", partner.URL(), 5)})
	p := lanes.Partition("orders", partitions)
	want := []string{n.publish("orders", "L"), n.publish("orders", "L")}

	// The first run, without delivery workers: the events stay pending.
	ctx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	runDone := make(chan error, 1)
	go func() { runDone <- n.parts[p].Run(ctx) }()
	poll.True(t, "the first events registered", 10*time.Second, func() bool {
		_, ok := n.sched.Find(want[1])
		return ok
	})

	// The handoff begins; an event accepted elsewhere meanwhile is moved
	// (INGEST forgets it only once it is stored and registered).
	n.parts[p].Detach()
	late := n.publish("orders", "L")
	want = append(want, late)
	poll.True(t, "the late event moved", 10*time.Second, func() bool {
		return n.streamMsgs(lanes.IngestStream) == 0 && n.streamMsgs(lanes.LanesStream(p)) == 3
	})
	if loc, ok := n.sched.Find(late); ok {
		t.Errorf("the scheduler holds event %s (seq %d) of partition %d, moved after the partition was detached", late, loc.Entry.Seq, p)
	}
	stopRun()
	if err := <-runDone; err != nil {
		t.Fatalf("first run: %v", err)
	}

	// The agent takes the partition back: the rebuild registers the lane
	// from the store, and it is delivered in order, each event once.
	again, err := owner.Open(context.Background(), p, n.deps, n.leases[p])
	if err != nil {
		t.Fatalf("open partition %d again: %v", p, err)
	}
	n.parts[p] = again
	d, _ := n.reg.Get("orders")
	n.sched.SetLimits(d.ID, p, d.Limits)
	n.run(true)
	poll.True(t, "the lane delivered and nothing left pending", 15*time.Second, func() bool {
		return len(partner.DeliveredByLane()["L"]) >= len(want) && n.sched.Pending("orders") == 0
	})
	if got := partner.DeliveredByLane()["L"]; !slices.Equal(got, want) {
		t.Fatalf("lane L delivered %v, want %v: in publish order, each once", got, want)
	}
}

// A rebuild registers exactly what the store holds: whatever the
// scheduler still held of the partition (a lane an earlier run here
// registered after its detach) is dropped first, and logged, not left
// ahead of the rebuilt lane to go out first and twice.
func TestARebuildDropsWhatTheSchedulerStillHeldOfThePartition(t *testing.T) {
	partner := newPartner(t, 0, nil)
	var logs syncBuffer
	n := openWith(t, t.TempDir(), mustDir(t, t.TempDir()), []*rivorav1.Destination{dest("orders", partner.URL(), 5)}, "", slog.New(slog.NewTextHandler(&logs, nil)))
	p := lanes.Partition("orders", partitions)
	want := []string{n.publish("orders", "L"), n.publish("orders", "L")}
	ctx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	runDone := make(chan error, 1)
	go func() { runDone <- n.parts[p].Run(ctx) }()
	poll.True(t, "the events registered", 10*time.Second, func() bool {
		_, ok := n.sched.Find(want[1])
		return ok
	})
	stopRun()
	if err := <-runDone; err != nil {
		t.Fatalf("first run: %v", err)
	}
	n.parts[p].Detach()
	// A leftover: the lane's second event, as if registered after the
	// detach.
	lane := lanes.ID{Destination: "orders", Customer: "acme", Key: "L"}
	n.sched.AppendAll(p, []scheduler.LaneAppend{{ID: lane, Subject: lane.Subject(p), Entries: []scheduler.Entry{{Seq: 2, EventID: want[1], AcceptedAt: time.Now()}}}})

	again, err := owner.Open(context.Background(), p, n.deps, n.leases[p])
	if err != nil {
		t.Fatalf("open partition %d again: %v", p, err)
	}
	if got := n.sched.Pending("orders"); got != len(want) {
		t.Errorf("the scheduler holds %d events of orders after the rebuild, want the %d stored", got, len(want))
	}
	if !strings.Contains(logs.String(), "the scheduler still held lanes of the partition from an earlier run") {
		t.Errorf("the dropped leftover was not logged; log:\n%s", logs.String())
	}
	n.parts[p] = again
	d, _ := n.reg.Get("orders")
	n.sched.SetLimits(d.ID, p, d.Limits)
	n.run(true)
	poll.True(t, "the lane delivered and nothing left pending", 15*time.Second, func() bool {
		return len(partner.DeliveredByLane()["L"]) >= len(want) && n.sched.Pending("orders") == 0
	})
	if got := partner.DeliveredByLane()["L"]; !slices.Equal(got, want) {
		t.Fatalf("lane L delivered %v, want %v: in publish order, each once", got, want)
	}
}
