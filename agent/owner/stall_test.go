package owner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/agent/ownership"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/cutcell"
	"github.com/rivora/rivora/testkit/poll"
)

// An owner cut off from its NATS peers (its lease still valid: it reaches
// Consul) gives its partitions up within the store stall timeout, busy or
// idle: Run ends with ErrStoreStalled and an append waiting for the store
// is answered instead of hanging. Meanwhile an owner on the side that has
// the quorum can take the partition and write it, and once the link heals
// the cut server finds the store writable again. Before the cut, an idle
// partition runs well past the timeout: its probes keep it.
func TestAnOwnerCutFromItsPeersGivesItsPartitionsUp(t *testing.T) {
	const stall = 3 * time.Second
	c := cutcell.Start(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	// A fresh cluster answers stream creation once its meta leader is
	// elected: retry until then.
	if err := poll.Check(30*time.Second, 250*time.Millisecond, func() error {
		_, err := ingest.New(ctx, c.Servers[0].JetStream(), destinations.NewRegistry(), ingest.Config{Replicas: 3}, log)
		return err
	}); err != nil {
		t.Fatalf("create INGEST in the cell: %v", err)
	}
	depsOn := func(i int) owner.Deps {
		return owner.Deps{
			JS: c.Servers[i].JetStream(), Scheduler: scheduler.New(clock.Real{}), Registry: destinations.NewRegistry(),
			Archive: mustDir(t, t.TempDir()), Clock: clock.Real{}, Log: log, DedupWindow: ingest.DefaultDedupWindow,
			Replicas: 3, StoreStallTimeout: stall,
		}
	}
	openOn := func(deps owner.Deps, p int, lease *ownership.Lease) *owner.Partition {
		var part *owner.Partition
		// A takeover waits for the quorum's side to elect leaders for
		// the streams and consumers the cut server led: seconds, more
		// on a loaded machine.
		if err := poll.Check(60*time.Second, 250*time.Millisecond, func() (err error) {
			part, err = owner.Open(ctx, p, deps, lease)
			return err
		}); err != nil {
			t.Fatalf("open partition %d: %v", p, err)
		}
		return part
	}
	busyP := lanes.Partition("orders", partitions)
	idleP := 1 - busyP
	deps0, locker0 := depsOn(0), ownership.NewLocal()
	lease := func(l *ownership.Local, p int) *ownership.Lease {
		lease, err := l.TryAcquire(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return lease
	}
	busy := openOn(deps0, busyP, lease(locker0, busyP))
	idle := openOn(deps0, idleP, lease(locker0, idleP))
	runErrs := make(chan error, 2)
	for _, part := range []*owner.Partition{busy, idle} {
		go func() { runErrs <- part.Run(ctx) }()
	}
	seq := 0
	appendOne := func(part *owner.Partition) error {
		seq++
		id := "ev-" + strconv.Itoa(seq)
		ev := &rivorav1.Event{EventId: id, DestinationId: "orders", CustomerId: "acme", LaneKey: "u1", Type: "t", Payload: []byte(`{}`), AcceptedAt: timestamppb.Now()}
		data, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		_, err = part.Append(ctx, []owner.Item{{Event: ev, Data: data, MsgID: id}})
		return err
	}

	// Healthy, for twice the stall timeout: the busy partition writes, the
	// idle one only probes; neither gives up.
	started := time.Now()
	for time.Since(started) < 2*stall {
		if err := appendOne(busy); err != nil {
			t.Fatalf("append in a healthy cell: %v", err)
		}
		select {
		case err := <-runErrs:
			t.Fatalf("a partition stopped in a healthy cell: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}

	// The hard case for the takeover below: the mover consumer's leader
	// is on the server about to be cut, so deleting the consumer is done
	// by the quorum's side but answered by no one.
	leadMoverFrom(t, ctx, c.Servers[0].JetStream(), busyP, cutcell.Name(0))

	c.Net.Isolate(cutcell.Name(0))
	cutAt := time.Now()
	appended := make(chan error, 1)
	go func() { appended <- appendOne(busy) }()
	for range 2 {
		select {
		case err := <-runErrs:
			if !errors.Is(err, owner.ErrStoreStalled) {
				t.Fatalf("a cut-off partition stopped with %v, want ErrStoreStalled", err)
			}
			t.Logf("partition gave up %s after the cut (stall timeout %s)", time.Since(cutAt).Round(time.Millisecond), stall)
		case <-time.After(stall + 20*time.Second):
			t.Fatalf("a cut-off partition still runs %s after the cut (stall timeout %s)", time.Since(cutAt), stall)
		}
	}
	select {
	case err := <-appended:
		if err == nil {
			t.Fatal("an append of a cut-off owner succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an append waiting for a stalled store was not answered once the partition gave up")
	}
	if owner.Writable(ctx, c.Servers[0].JetStream(), busyP) {
		t.Fatal("the cut-off server finds the store writable")
	}

	// The side with the quorum takes the partition over and writes it.
	js1 := c.Servers[1].JetStream()
	poll.True(t, "the store is writable from the quorum's side", 30*time.Second, func() bool { return owner.Writable(ctx, js1, busyP) })
	deps1 := depsOn(1)
	takeoverAt := time.Now()
	taken := openOn(deps1, busyP, lease(ownership.NewLocal(), busyP))
	t.Logf("the quorum's side opened the partition in %s", time.Since(takeoverAt).Round(time.Millisecond))
	takenCtx, stopTaken := context.WithCancel(ctx)
	takenDone := make(chan error, 1)
	go func() { takenDone <- taken.Run(takenCtx) }()
	if err := appendOne(taken); err != nil {
		t.Fatalf("append by the new owner on the quorum's side: %v", err)
	}
	stopTaken()
	if err := <-takenDone; err != nil {
		t.Fatalf("the new owner's run: %v", err)
	}

	c.Net.Heal()
	poll.True(t, "the store is writable again from the healed server", 30*time.Second, func() bool {
		return owner.Writable(ctx, c.Servers[0].JetStream(), busyP)
	})
}

// leadMoverFrom moves the leadership of partition p's mover consumer to
// the named server (a leader stepdown with that server preferred).
func leadMoverFrom(t *testing.T, ctx context.Context, js jetstream.JetStream, p int, server string) {
	t.Helper()
	consumer := owner.MoverName(p)
	// "" while unknown: an info request goes unanswered during the
	// consumer's election.
	leader := func() string {
		c, err := js.Consumer(ctx, lanes.IngestStream, consumer)
		if err != nil || c.CachedInfo().Cluster == nil {
			return ""
		}
		return c.CachedInfo().Cluster.Leader
	}
	if leader() == server {
		return
	}
	req, err := json.Marshal(map[string]any{"placement": map[string]string{"preferred": server}})
	if err != nil {
		t.Fatal(err)
	}
	subject := fmt.Sprintf("$JS.API.CONSUMER.LEADER.STEPDOWN.%s.%s", lanes.IngestStream, consumer)
	var resp struct {
		Error *struct{ Description string } `json:"error"`
	}
	msg, err := js.Conn().RequestWithContext(ctx, subject, req)
	if err == nil {
		err = json.Unmarshal(msg.Data, &resp)
	}
	if err == nil && resp.Error != nil {
		err = errors.New(resp.Error.Description)
	}
	if err != nil {
		t.Fatalf("move the mover's leadership to %s: %v", server, err)
	}
	poll.True(t, "the mover's leader is "+server, 10*time.Second, func() bool { return leader() == server })
}
