package owner

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// eventKey reads exactly what a whole decode gives of an event's id and
// acceptance, whatever else the event holds.
func TestEventKeyMatchesDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		ev := &rivorav1.Event{
			EventId: strings.Repeat("e", rng.IntN(40)), DestinationId: "orders", CustomerId: "acme",
			LaneKey: "u1", Type: "t", Payload: make([]byte, rng.IntN(300)), Traceparent: "00-x",
			Replayed: rng.IntN(2) == 0, ConfigVersion: rng.Uint64N(1 << 40), SubscriptionId: "sub",
		}
		switch i % 4 {
		case 0: // unset: the epoch, as AsTime gives it
		case 1:
			ev.AcceptedAt = &timestamppb.Timestamp{}
		case 2:
			ev.AcceptedAt = timestamppb.New(time.Unix(0, rng.Int64N(1<<62)))
		case 3:
			ev.AcceptedAt = timestamppb.New(time.Unix(rng.Int64N(1<<33), 0).Add(-time.Duration(rng.Int64N(1e9))))
		}
		data, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if i%5 == 0 { // a field this build does not know
			data = protowire.AppendTag(data, 99, protowire.BytesType)
			data = protowire.AppendBytes(data, []byte("later"))
		}
		id, at, err := eventKey(data)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if string(id) != ev.GetEventId() || at != ev.GetAcceptedAt().AsTime().UnixNano() {
			t.Fatalf("event %d: eventKey = %q, %d; decode gives %q, %d", i, id, at, ev.GetEventId(), ev.GetAcceptedAt().AsTime().UnixNano())
		}
	}
}

func TestEventKeyRefusesMalformedEvents(t *testing.T) {
	good, err := proto.Marshal(&rivorav1.Event{EventId: "ev-1", AcceptedAt: timestamppb.Now(), Payload: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"truncated":       good[:len(good)-1],
		"bad tag":         {0x00},
		"length too long": append(protowire.AppendTag(nil, 1, protowire.BytesType), 0x7f, 'x'),
		"bad timestamp":   protowire.AppendBytes(protowire.AppendTag(nil, 8, protowire.BytesType), []byte{0x08}),
	} {
		if _, _, err := eventKey(data); err == nil {
			t.Errorf("%s: eventKey accepted %x", name, data)
		}
	}
}
