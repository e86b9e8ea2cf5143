package natsd_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/testkit/poll"
)

// A stopping member hands the leaderships of its streams and consumers
// to its peers while it still runs, and the stream takes writes through
// it afterwards.
func TestHandOverLeadershipsMovesThemToPeers(t *testing.T) {
	servers := startCell(t, []natsd.Config{{Password: password}, {Password: password}, {Password: password}})
	byName := map[string]*natsd.Server{}
	for i, s := range servers {
		byName[fmt.Sprintf("a%d", i+1)] = s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := servers[0].JetStream()
	var stream jetstream.Stream
	if err := poll.Within(15*time.Second, func() bool {
		var err error
		stream, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "HANDOVER", Subjects: []string{"handover.>"}, Replicas: 3})
		return err == nil
	}); err != nil {
		t.Fatalf("create an R3 stream: %v", err)
	}
	if _, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "reader", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	leaderOf := func() (streamLeader, consumerLeader string) {
		si, err := stream.Info(ctx)
		if err != nil || si.Cluster == nil {
			return "", ""
		}
		c, err := stream.Consumer(ctx, "reader")
		if err != nil {
			return si.Cluster.Leader, ""
		}
		ci, err := c.Info(ctx)
		if err != nil || ci.Cluster == nil {
			return si.Cluster.Leader, ""
		}
		return si.Cluster.Leader, ci.Cluster.Leader
	}
	var leader string
	if err := poll.Within(10*time.Second, func() bool { leader, _ = leaderOf(); return leader != "" }); err != nil {
		t.Fatal("the stream elected no leader")
	}

	// A group kept (the stopping agent's own partitions' streams, which
	// its drain goes on writing) stays led here.
	keepStream := func(stream, consumer string) bool { return stream == "HANDOVER" && consumer == "" }
	kept := byName[leader].HandOverLeaderships(5*time.Second, keepStream)
	if s, _ := leaderOf(); s != leader || kept.Streams != 0 {
		t.Fatalf("handed %+v with the stream kept; the stream is led by %q, want still %q", kept, s, leader)
	}

	got := byName[leader].HandOverLeaderships(5*time.Second, nil)
	if s, c := leaderOf(); s == "" || s == leader || c == "" || c == leader {
		t.Fatalf("%s still leads after its handover (%+v): stream led by %q, consumer by %q", leader, got, s, c)
	}
	if got.Streams != 1 || got.Left != 0 {
		t.Errorf("handed %+v, want the stream counted and nothing left", got)
	}
	// Writes through the member that handed its leaderships over reach
	// the new leader.
	if _, err := byName[leader].JetStream().Publish(ctx, "handover.x", []byte("after")); err != nil {
		t.Fatalf("publish through %s after its handover: %v", leader, err)
	}
}

// A lone server has nobody to hand its leaderships to: the call returns
// at once.
func TestHandOverLeadershipsAloneReturnsAtOnce(t *testing.T) {
	srv := start(t, natsd.Config{})
	done := make(chan natsd.Handed, 1)
	go func() { done <- srv.HandOverLeaderships(time.Hour, nil) }()
	select {
	case got := <-done:
		if got != (natsd.Handed{}) {
			t.Fatalf("handed %+v alone, want nothing", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a lone server waited to hand its leaderships over")
	}
}
