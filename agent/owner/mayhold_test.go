package owner_test

import (
	"context"
	"fmt"
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

// MayHold may answer "certainly not stored" (the ingest gateway then
// stores a batch's keyed event without probing for its original) only
// when nothing the partition took waits in INGEST: an append forwarded
// there, not yet moved into the lanes, is held too. Forwarded are the
// appends of a partition just opened (its gate is closed until INGEST is
// drained) and those behind another agent's event of the partition still
// in INGEST. A batch reusing the key of such an event was found out only
// by the store, after its other events were stored (issue 26: parallel
// opens made it likely right after a start).
func TestMayHoldAnAppendWaitingInIngest(t *testing.T) {
	n := open(t, t.TempDir(), mustDir(t, t.TempDir()), []*rivorav1.Destination{dest("orders", "http://127.0.0.1:1", 5)})
	ctx := context.Background()
	js := n.srv.JetStream()
	p := lanes.Partition("orders", partitions)
	part := n.parts[p]
	item := func() owner.Item {
		t.Helper()
		ev := edgeEvent(uuid.NewString(), "orders", "", "L", `{}`)
		data, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		return owner.Item{Event: ev, Data: data, MsgID: ev.GetEventId()}
	}
	appendOne := func(it owner.Item) owner.Stored {
		t.Helper()
		at, err := part.Append(ctx, []owner.Item{it})
		if err != nil {
			t.Fatalf("append: %v", err)
		}
		return at[0]
	}

	// Opened, not running: the gate is closed, the mover does not move.
	early := item()
	if at := appendOne(early); at.Stream != lanes.IngestStream {
		t.Fatalf("an append before the partition runs stored in %s, want INGEST", at.Stream)
	}
	if !part.MayHold(early.MsgID) {
		t.Fatal("MayHold of an append waiting in INGEST (gate closed) is false")
	}

	n.run(false) // no delivery: the lanes keep every event
	poll.True(t, "appends go straight into the lanes", 10*time.Second, func() bool {
		return appendOne(item()).Stream == lanes.LanesStream(p)
	})
	if !part.MayHold(early.MsgID) {
		t.Fatal("MayHold of an append moved into the lanes is false")
	}
	poll.True(t, "an id never stored is certainly not held once INGEST is drained", 10*time.Second, func() bool {
		return !part.MayHold(uuid.NewString())
	})
	waits := func() bool {
		t.Helper()
		w, err := part.WaitsInIngest(ctx)
		if err != nil {
			t.Fatalf("WaitsInIngest: %v", err)
		}
		return w
	}
	if waits() {
		t.Fatal("WaitsInIngest with INGEST drained is true")
	}

	// Another agent's event of the partition waits in INGEST (the mover is
	// paused): the owner's next append goes there too, behind it.
	mover := fmt.Sprintf("mover-%d", p)
	if _, err := js.PauseConsumer(ctx, lanes.IngestStream, mover, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("pause the mover: %v", err)
	}
	other := item()
	msg := nats.NewMsg(lanes.IngestSubject(p, "orders"))
	msg.Data = other.Data
	msg.Header.Set(jetstream.MsgIDHeader, other.MsgID)
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatalf("publish into INGEST: %v", err)
	}
	// The writer never saw it (MayHold may say "certainly not"): only a
	// look at INGEST finds it, and a batch's check asks.
	if !waits() {
		t.Fatal("WaitsInIngest with another agent's event waiting in INGEST (mover paused) is false")
	}
	behind := item()
	if at := appendOne(behind); at.Stream != lanes.IngestStream {
		t.Fatalf("an append behind another agent's event in INGEST stored in %s, want INGEST", at.Stream)
	}
	if !part.MayHold(behind.MsgID) {
		t.Fatal("MayHold of an append forwarded behind another agent's event is false")
	}
	if _, err := js.ResumeConsumer(ctx, lanes.IngestStream, mover); err != nil {
		t.Fatalf("resume the mover: %v", err)
	}
	poll.True(t, "once moved, an id never stored is certainly not held again", 10*time.Second, func() bool {
		return !part.MayHold(uuid.NewString())
	})
	if waits() {
		t.Fatal("WaitsInIngest once the mover moved everything is true")
	}
	if !part.MayHold(behind.MsgID) {
		t.Fatal("MayHold of the forwarded append, moved, is false")
	}
}
