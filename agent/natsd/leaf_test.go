package natsd_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/testkit/poll"
)

// The mechanics an edge rests on: an edge server with its own JetStream
// domain, joined to a cell as a leaf node, keeps a stream of its own; a
// cell stream sources it across the leaf connection (its API reached as
// "$JS.<domain>.API", its subjects rewritten into the cell's), in order,
// also after the cell was down while the edge kept accepting; and a
// message id the cell has already stored (a client that published the
// same event to the cell) is stored once.
func TestACellSourcesAnEdgeStreamAcrossALeafConnection(t *testing.T) {
	leafAddr := freeAddrs(t, 1)[0]
	leafPassword := password + "-leaf"
	cellDir := t.TempDir()
	cellCfg := natsd.Config{Name: "cell", DataDir: cellDir, LeafListen: leafAddr, LeafPassword: leafPassword}
	cell, err := natsd.Start(cellCfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	edge := start(t, natsd.Config{Name: "edge-a", Domain: "edge-a", LeafRemotes: []string{"nats-leaf://" + leafAddr}, LeafPassword: leafPassword})
	ctx := context.Background()

	if _, err := edge.JetStream().CreateStream(ctx, jetstream.StreamConfig{
		Name: "EDGE", Subjects: []string{"edge.a.ingest.>"}, Storage: jetstream.FileStorage, Duplicates: time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	sink := func(js jetstream.JetStream) {
		t.Helper()
		if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: "SINK", Subjects: []string{"ingest.>"}, Storage: jetstream.FileStorage, Duplicates: time.Minute,
			Sources: []*jetstream.StreamSource{{
				Name:              "EDGE",
				External:          &jetstream.ExternalStream{APIPrefix: "$JS.edge-a.API", DeliverPrefix: "rivora.edge-a.deliver"},
				SubjectTransforms: []jetstream.SubjectTransformConfig{{Source: "edge.a.ingest.>", Destination: "ingest.>"}},
			}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	sink(cell.JetStream())
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			msg := nats.NewMsg("edge.a.ingest.3.d1")
			msg.Data = []byte(strconv.Itoa(i))
			msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("evt-%d", i))
			if _, err := edge.JetStream().PublishMsg(ctx, msg); err != nil {
				t.Fatalf("publish %d at the edge: %v", i, err)
			}
		}
	}
	inSink := func(js jetstream.JetStream, want int) {
		t.Helper()
		poll.True(t, fmt.Sprintf("%d messages sourced into the cell", want), 120*time.Second, func() bool {
			s, err := js.Stream(ctx, "SINK")
			if err != nil {
				return false
			}
			info, err := s.Info(ctx)
			return err == nil && info.State.Msgs == uint64(want)
		})
	}
	publish(0, 100)
	inSink(cell.JetStream(), 100)

	// The cell goes away; the edge keeps accepting on its own. Once the
	// cell is back, the source resumes by itself where it stopped, but
	// only after nats-server's source retry back-off: about 35 s here
	// (the edge's leaf reconnects within a second).
	cell.Shutdown()
	publish(100, 200)
	cell, err = natsd.Start(cellCfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cell.Shutdown)
	inSink(cell.JetStream(), 200)

	// In order, with the cell's subjects.
	s, err := cell.JetStream().Stream(ctx, "SINK")
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 200; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != "ingest.3.d1" || string(m.Data) != strconv.Itoa(int(seq-1)) {
			t.Fatalf("seq %d: %s %q, want ingest.3.d1 %q", seq, m.Subject, m.Data, strconv.Itoa(int(seq-1)))
		}
	}
	// The same event published to the cell directly is a duplicate.
	msg := nats.NewMsg("ingest.3.d1")
	msg.Header.Set(jetstream.MsgIDHeader, "evt-7")
	ack, err := cell.JetStream().PublishMsg(ctx, msg)
	if err != nil || !ack.Duplicate {
		t.Fatalf("the edge's event published again to the cell: duplicate %v, %v", ack != nil && ack.Duplicate, err)
	}
}
