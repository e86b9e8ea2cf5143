package owner_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/internal/fingerprint"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/eventid"
	"github.com/rivora/rivora/testkit/poll"
)

// The owner stores a keyed event straight into its lane while another
// agent, racing it, puts a copy of the key with another payload into
// INGEST (its probe of the lanes ran before the owner's write). The lanes
// take the copy for a duplicate; the mover compares it with the original
// and does not drop it silently: it becomes a dead letter
// (idempotency_conflict, never sent), and the original is delivered once.
func TestACopyRacingTheOwnersOriginalBecomesADeadLetter(t *testing.T) {
	p := newPartner(t, http.StatusOK, nil)
	archRoot := t.TempDir()
	n := openDraining(t, t.TempDir(), mustDir(t, archRoot), []*rivorav1.Destination{dest("orders", p.URL(), 5)})
	n.run(true)
	ctx := context.Background()
	part := lanes.Partition("orders", partitions)
	appendOne := func(ev *rivorav1.Event, fp []byte) owner.Stored {
		t.Helper()
		data, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		at, err := n.parts[part].Append(ctx, []owner.Item{{Event: ev, Data: data, MsgID: ev.GetEventId(), Fingerprint: fp}})
		if err != nil {
			t.Fatalf("append %s: %v", ev.GetEventId(), err)
		}
		return at[0]
	}
	// Until INGEST is drained, appends go through it: wait for the lanes.
	var fillers []string
	poll.True(t, "appends go straight into the lanes", 10*time.Second, func() bool {
		filler := edgeEvent(uuid.NewString(), "orders", "", "f", `{}`)
		fillers = append(fillers, filler.GetEventId())
		return appendOne(filler, nil).Stream == lanes.LanesStream(part)
	})
	id := eventid.FromKey("orders", "acme", "order-5")
	original := edgeEvent(id, "orders", "", "u5", `{"v":"owner"}`)
	if at := appendOne(original, fingerprint.Of(original)); at.Stream != lanes.LanesStream(part) || at.Duplicate {
		t.Fatalf("the owner's original stored at %+v, want new in the lanes", at)
	}
	racing := edgeEvent(id, "orders", "", "u5", `{"v":"racing"}`)
	data, err := proto.Marshal(racing)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(lanes.IngestSubject(part, "orders"))
	msg.Data = data
	msg.Header.Set(jetstream.MsgIDHeader, id)
	fingerprint.Set(msg, fingerprint.Of(racing))
	if ack, err := n.srv.JetStream().PublishMsg(ctx, msg); err != nil || ack.Duplicate {
		t.Fatalf("the racing copy into INGEST: %+v, %v; want stored", ack, err)
	}
	next := n.publish("orders", "u5")
	p.WaitDelivered(t, append([]string{id, next}, fillers...), 15*time.Second)
	n.waitDrained()
	if got := p.DeliveredByLane()["u5"]; !slices.Equal(got, []string{id, next}) {
		t.Fatalf("lane u5 delivered %v, want %v", got, []string{id, next})
	}
	for _, r := range p.Requests() {
		if r.ID == id && string(r.Payload) != `{"v":"owner"}` {
			t.Fatalf("event %s delivered with %s, want the owner's payload", id, r.Payload)
		}
	}
	letters := archived(t, archRoot)
	if len(letters) != 1 {
		t.Fatalf("archive holds %d dead letters (%v), want the racing copy", len(letters), letters)
	}
	dl := letters[0]
	if ev := dl.GetEvent(); ev.GetEventId() != id || string(ev.GetPayload()) != `{"v":"racing"}` || dl.GetReason() != rivorav1.DeadReason_DEAD_REASON_IDEMPOTENCY_CONFLICT || dl.GetAttempts() != 0 {
		t.Fatalf("dead letter %v, want the racing copy of %s with reason idempotency_conflict and no attempt", dl, id)
	}
	if !strings.Contains(dl.GetLastError(), "was not delivered") || !strings.Contains(dl.GetLastError(), id) {
		t.Fatalf("dead letter's last error %q does not say why", dl.GetLastError())
	}
}
