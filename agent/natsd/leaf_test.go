package natsd_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/testkit/poll"
)

// The mechanics an edge rests on: an edge server with its own JetStream
// domain, joined to a cell as a leaf node, keeps a stream of its own, and
// a cell stream sources it across the leaf connection (its API reached as
// "$JS.<domain>.API", its subjects rewritten into the cell's), in order,
// also after the cell was down while the edge kept accepting. With
// durable sourcing (nats-server 2.14+) the edge's stream keeps only what
// the cell has not yet taken: its work-queue retention and a durable
// consumer acked by flow control let the cell's source remove each message
// once stored, so the edge's buffer is exactly its unforwarded events. A
// message id the cell already holds (a client that published the same
// event to the cell) is stored once. (An ephemeral source, without the
// durable consumer, also resumes after a cell restart, but only after
// nats-server's source back-off, about 35 s; the durable one within
// seconds.)
func TestACellSourcesAnEdgeStreamAcrossALeafConnection(t *testing.T) {
	leafAddr := freeAddrs(t, 1)[0]
	cellCfg := natsd.Config{Name: "cell", DataDir: t.TempDir(), LeafListen: leafAddr, LeafPassword: password}
	cell, err := natsd.Start(cellCfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	edge := start(t, natsd.Config{Name: "edge-a", Domain: "edge-a", LeafRemotes: []string{"nats-leaf://" + leafAddr}, LeafPassword: password})
	ctx := context.Background()
	buffer, err := edge.JetStream().CreateStream(ctx, jetstream.StreamConfig{
		Name: "EDGE", Subjects: []string{"edge.a.ingest.>"}, Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := edge.JetStream().CreateOrUpdatePushConsumer(ctx, "EDGE", jetstream.ConsumerConfig{
		Durable: "TO_CELL", DeliverSubject: "edge.a.forward", AckPolicy: jetstream.AckFlowControlPolicy,
		FlowControl: true, IdleHeartbeat: time.Second,
	}); err != nil {
		t.Fatal(err)
	}
	sink := func(js jetstream.JetStream) {
		t.Helper()
		if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: "SINK", Subjects: []string{"ingest.>"}, Storage: jetstream.FileStorage, Duplicates: time.Minute,
			Sources: []*jetstream.StreamSource{{
				Name:              "EDGE",
				External:          &jetstream.ExternalStream{APIPrefix: "$JS.edge-a.API"},
				Consumer:          &jetstream.StreamConsumerSource{Name: "TO_CELL", DeliverSubject: "edge.a.forward"},
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
			msg := nats.NewMsg("edge.a.ingest.1.d1")
			msg.Data = []byte(strconv.Itoa(i))
			msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("evt-%d", i))
			if _, err := edge.JetStream().PublishMsg(ctx, msg); err != nil {
				t.Fatalf("publish %d at the edge: %v", i, err)
			}
		}
	}
	state := func(s jetstream.Stream) uint64 {
		info, err := s.Info(ctx)
		if err != nil {
			return ^uint64(0)
		}
		return info.State.Msgs
	}
	settled := func(js jetstream.JetStream, want uint64) {
		t.Helper()
		poll.True(t, fmt.Sprintf("%d in the cell and an empty edge buffer", want), 120*time.Second, func() bool {
			s, err := js.Stream(ctx, "SINK")
			return err == nil && state(s) == want && state(buffer) == 0
		})
	}
	publish(0, 100)
	settled(cell.JetStream(), 100)
	cell.Shutdown()
	publish(100, 150)
	if n := state(buffer); n != 50 {
		t.Fatalf("the edge buffers %d events while the cell is down, want 50", n)
	}
	cell, err = natsd.Start(cellCfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cell.Shutdown)
	settled(cell.JetStream(), 150)
	s, err := cell.JetStream().Stream(ctx, "SINK")
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 150; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil || m.Subject != "ingest.1.d1" || string(m.Data) != strconv.Itoa(int(seq-1)) {
			t.Fatalf("seq %d: %v %v, want ingest.1.d1 %d in order", seq, m, err, seq-1)
		}
	}
	msg := nats.NewMsg("ingest.1.d1")
	msg.Header.Set(jetstream.MsgIDHeader, "evt-7")
	ack, err := cell.JetStream().PublishMsg(ctx, msg)
	if err != nil || !ack.Duplicate {
		t.Fatalf("the edge's event published again to the cell: duplicate %v, %v", ack != nil && ack.Duplicate, err)
	}
}

// The edge's leaf connection says how it ended: one that was up and then
// lost (the cell stopped) says so, with the reason, where it used to say
// "closed before it was up" like a port that hangs up on the handshake,
// which still says that.
func TestLeafErrorSaysWhetherTheLinkWasUp(t *testing.T) {
	leafAddr := freeAddrs(t, 1)[0]
	cell, err := natsd.Start(natsd.Config{Name: "cell", DataDir: t.TempDir(), LeafListen: leafAddr, LeafPassword: password}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	edge := start(t, natsd.Config{Name: "edge-up", Domain: "edge-up", LeafRemotes: []string{"nats-leaf://" + leafAddr}, LeafPassword: password})
	poll.True(t, "the leaf connection is up", 10*time.Second, func() bool { return edge.LeafConnections() == 1 })
	cut := time.Now()
	cell.Shutdown()
	// The close is the first thing said after the cut: the next dial
	// comes a reconnect interval (1 s) later.
	msg := awaitLeafError(t, edge, cut)
	if !strings.Contains(msg, "lost after it was up: ") || strings.Contains(msg, "before it was up") || !strings.Contains(msg, leafAddr) {
		t.Fatalf("after the cell stopped, the edge says %q; want the connection to %s lost after it was up, with the reason", msg, leafAddr)
	}
	// As the edge reports it: the same words, without the connection's
	// id and the cell's server name.
	if cause := natsd.LeafCause(msg); !strings.HasPrefix(cause, "leaf connection "+leafAddr+" lost after it was up: ") || strings.Contains(cause, " - ") {
		t.Fatalf("LeafCause(%q) = %q", msg, cause)
	}

	// A port that accepts and hangs up before the NATS handshake.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	other := start(t, natsd.Config{Name: "edge-never", Domain: "edge-never", LeafRemotes: []string{"nats-leaf://" + ln.Addr().String()}, LeafPassword: password})
	msg = awaitLeafError(t, other, time.Time{})
	if !strings.Contains(msg, "closed before it was up: ") {
		t.Fatalf("against a port that hangs up, the edge says %q; want closed before it was up", msg)
	}
}

// awaitLeafError is srv's first LeafError said after since.
func awaitLeafError(t *testing.T, srv *natsd.Server, since time.Time) string {
	t.Helper()
	var msg string
	poll.True(t, "the edge says why its leaf connection is down", 10*time.Second, func() bool {
		m, at := srv.LeafError()
		msg = m
		return m != "" && at.After(since)
	})
	return msg
}

// A server started with its leaf held does not dial the cell until
// JoinLeaf, and LeaveLeaf closes the connection and dials no more: an
// edge joins the cell only once its control plane confirmed its name.
func TestLeafHeldUntilJoined(t *testing.T) {
	leafAddr := freeAddrs(t, 1)[0]
	cell := start(t, natsd.Config{Name: "cell", LeafListen: leafAddr, LeafPassword: password})
	edge := start(t, natsd.Config{Name: "edge-held", Domain: "edge-held", LeafRemotes: []string{"nats-leaf://" + leafAddr}, LeafPassword: password, LeafHeld: true})
	// Another edge, not held, joins at once: by then the held one would
	// have dialled too.
	start(t, natsd.Config{Name: "edge-free", Domain: "edge-free", LeafRemotes: []string{"nats-leaf://" + leafAddr}, LeafPassword: password})
	poll.True(t, "the edge not held joins the cell", 10*time.Second, func() bool { return cell.LeafConnections() == 1 })
	if edge.LeafJoined() || edge.LeafConnections() != 0 {
		t.Fatalf("a held leaf: joined %t, %d connections; want none before JoinLeaf", edge.LeafJoined(), edge.LeafConnections())
	}
	if err := edge.JoinLeaf(); err != nil {
		t.Fatal(err)
	}
	poll.True(t, "the held edge joins the cell once released", 10*time.Second, func() bool { return edge.LeafConnections() == 1 && cell.LeafConnections() == 2 })
	if err := edge.LeaveLeaf(); err != nil {
		t.Fatal(err)
	}
	poll.True(t, "the edge leaves the cell", 10*time.Second, func() bool { return edge.LeafConnections() == 0 && cell.LeafConnections() == 1 })
	if edge.LeafJoined() {
		t.Fatal("LeafJoined after LeaveLeaf")
	}
	if err := edge.JoinLeaf(); err != nil {
		t.Fatal(err)
	}
	poll.True(t, "the edge joins the cell again", 10*time.Second, func() bool { return edge.LeafConnections() == 1 && cell.LeafConnections() == 2 })
}
