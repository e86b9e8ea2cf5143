package owner_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
)

// An event acknowledged through INGEST (another agent accepted it for a
// partition it does not own) is never overtaken by a later event of its
// lane that the owner appends on its fast path, even while the owner's
// mover has not moved the first one yet. The mover is held back by
// pausing its INGEST consumer, which makes the race deterministic.
func TestAnEventInIngestIsNotOvertakenByTheFastPath(t *testing.T) {
	n := open(t, t.TempDir(), mustDir(t, t.TempDir()), []*rivorav1.Destination{dest("orders", "http://127.0.0.1:1", 5)})
	n.run(false) // no delivery: the lane store keeps every event
	ctx := context.Background()
	js := n.srv.JetStream()
	p := lanes.Partition("orders", partitions)
	part := n.parts[p]
	encode := func(ev *rivorav1.Event) owner.Item {
		t.Helper()
		data, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		return owner.Item{Event: ev, Data: data, MsgID: ev.GetEventId()}
	}
	poll.True(t, "appends go straight into the lanes", 10*time.Second, func() bool {
		at, err := part.Append(ctx, []owner.Item{encode(edgeEvent(uuid.NewString(), "orders", "", "filler", `{}`))})
		if err != nil {
			t.Fatalf("append: %v", err)
		}
		return at[0].Stream == lanes.LanesStream(p)
	})

	mover := fmt.Sprintf("mover-%d", p)
	if _, err := js.PauseConsumer(ctx, lanes.IngestStream, mover, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("pause the mover: %v", err)
	}
	// #1 through another agent: stored in INGEST and acknowledged.
	first := edgeEvent(uuid.NewString(), "orders", "", "L", `{"n":1}`)
	msg := nats.NewMsg(lanes.IngestSubject(p, "orders"))
	msg.Data = encode(first).Data
	msg.Header.Set(jetstream.MsgIDHeader, first.GetEventId())
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatalf("publish #1 into INGEST: %v", err)
	}
	// #2 of the same lane through the owner, after #1 was acknowledged.
	second := edgeEvent(uuid.NewString(), "orders", "", "L", `{"n":2}`)
	if _, err := part.Append(ctx, []owner.Item{encode(second)}); err != nil {
		t.Fatalf("append #2: %v", err)
	}
	if _, err := js.ResumeConsumer(ctx, lanes.IngestStream, mover); err != nil {
		t.Fatalf("resume the mover: %v", err)
	}

	laneSubject := lanes.ID{Destination: "orders", Customer: "acme", Key: "L"}.Subject(p)
	want := []string{first.GetEventId(), second.GetEventId()}
	var got []string
	poll.True(t, "the lane holds both events", 10*time.Second, func() bool {
		got = laneEvents(t, js, lanes.LanesStream(p), laneSubject)
		return len(got) >= len(want)
	})
	if !slices.Equal(got, want) {
		t.Fatalf("lane L holds %v, want publish order %v", got, want)
	}
}

// laneEvents are the ids of the events stored on subject, in stream order.
func laneEvents(t *testing.T, js jetstream.JetStream, stream, subject string) []string {
	t.Helper()
	ctx := context.Background()
	c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatalf("read %s: %v", subject, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("read %s: %v", subject, err)
	}
	var ids []string
	if info.NumPending == 0 {
		return ids
	}
	batch, err := c.Fetch(int(info.NumPending), jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatalf("read %s: %v", subject, err)
	}
	for m := range batch.Messages() {
		ev := &rivorav1.Event{}
		if err := proto.Unmarshal(m.Data(), ev); err != nil {
			t.Fatalf("decode %s: %v", subject, err)
		}
		ids = append(ids, ev.GetEventId())
	}
	return ids
}

// When INGEST elects a leader, the one it replaced may still answer the
// direct path's look at INGEST from its stale copy (until it sees it lost
// its quorum): the running partition's appends go through INGEST again.
// (The advisory is sent here by hand: one server elects no leader.)
func TestAnIngestLeaderElectionClosesTheFastPath(t *testing.T) {
	n := open(t, t.TempDir(), mustDir(t, t.TempDir()), []*rivorav1.Destination{dest("orders", "http://127.0.0.1:1", 5)})
	n.run(false)
	ctx := context.Background()
	p := lanes.Partition("orders", partitions)
	appendOne := func() string {
		t.Helper()
		ev := edgeEvent(uuid.NewString(), "orders", "", "L", `{}`)
		data, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		at, err := n.parts[p].Append(ctx, []owner.Item{{Event: ev, Data: data, MsgID: ev.GetEventId()}})
		if err != nil {
			t.Fatalf("append: %v", err)
		}
		return at[0].Stream
	}
	poll.True(t, "appends go straight into the lanes", 10*time.Second, func() bool { return appendOne() == lanes.LanesStream(p) })
	if err := n.srv.JetStream().Conn().Publish("$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED."+lanes.IngestStream, []byte(`{"stream":"INGEST"}`)); err != nil {
		t.Fatal(err)
	}
	poll.True(t, "appends go through INGEST after the election", 10*time.Second, func() bool { return appendOne() == lanes.IngestStream })
	for range 20 {
		if got := appendOne(); got != lanes.IngestStream {
			t.Fatalf("an append within the stale leader window went to %s", got)
		}
	}
}
