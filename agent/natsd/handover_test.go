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

// Bursts written to a replicated stream while its leader steps down are
// each answered well before their timeout — acknowledged, refused, or
// ErrLeaderChanged for a message the old leader left unanswered — and a
// burst given up on, sent again with the same ids, is answered in full:
// nothing waits for a deadline, nothing is lost.
func TestBurstsAcrossAStepDown(t *testing.T) {
	servers := startCell(t, []natsd.Config{{Password: password}, {Password: password}, {Password: password}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stream jetstream.Stream
	if err := poll.Within(15*time.Second, func() bool {
		var err error
		stream, err = servers[0].JetStream().CreateStream(ctx, jetstream.StreamConfig{Name: "ACROSS", Subjects: []string{"across.>"}, Replicas: 3, Duplicates: 5 * time.Minute})
		return err == nil
	}); err != nil {
		t.Fatalf("create an R3 stream: %v", err)
	}
	var leader *natsd.Server
	var writer *natsd.Server // a member that does not lead the stream
	if err := poll.Within(10*time.Second, func() bool {
		si, err := stream.Info(ctx)
		if err != nil || si.Cluster == nil || si.Cluster.Leader == "" {
			return false
		}
		for i, s := range servers {
			if fmt.Sprintf("a%d", i+1) == si.Cluster.Leader {
				leader = s
			} else {
				writer = s
			}
		}
		return leader != nil
	}); err != nil {
		t.Fatal("the stream elected no leader")
	}
	pub, err := natsd.NewPublisher(writer.Conn())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.FailOnLeaderChange("ACROSS"); err != nil {
		t.Fatal(err)
	}

	const perBurst, timeout = 256, 20 * time.Second
	type sent struct {
		id    int
		burst *natsd.Burst
	}
	type answer struct {
		id   int
		acks int
		err  error
		took time.Duration
	}
	flights := make(chan sent, 64)
	answers := make(chan answer, 1024)
	go func() {
		defer close(answers)
		for f := range flights {
			start := time.Now()
			acks, err := f.burst.Wait(ctx, timeout)
			answers <- answer{f.id, len(acks), err, time.Since(start)}
		}
	}()
	publish := func(b *natsd.Burst, id int) error {
		for i := range perBurst {
			if err := b.Publish(i, "across.x", msgID(fmt.Sprintf("m-%d-%d", id, i)), make([]byte, 128)); err != nil {
				b.Abandon(i, err)
				return err
			}
		}
		return nil
	}
	// The leader steps down while the bursts flow (the step-down a
	// handover asks for, without waiting for a caught-up peer).
	handed := make(chan error, 1)
	handOverAt := time.Now().Add(time.Second)
	go func() {
		time.Sleep(time.Until(handOverAt))
		_, err := leader.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN.ACROSS", nil, 5*time.Second)
		handed <- err
	}()
	bursts := 0
	for stop := handOverAt.Add(2 * time.Second); time.Now().Before(stop) && bursts < 1000; bursts++ {
		b, err := pub.Start(perBurst)
		if err != nil {
			t.Fatal(err)
		}
		_ = publish(b, bursts)
		flights <- sent{bursts, b}
	}
	close(flights)
	if err := <-handed; err != nil {
		t.Fatalf("the leader's step-down: %v", err)
	}
	var failed []int
	for a := range answers {
		if a.took >= timeout {
			t.Errorf("burst %d waited its whole timeout (%s) across the step-down: %d acks, %v", a.id, a.took, a.acks, a.err)
		}
		if a.err != nil {
			failed = append(failed, a.id)
		}
	}
	t.Logf("%d bursts of %d, %d given up on", bursts, perBurst, len(failed))
	// Each burst given up on, sent again: every message answered.
	for _, id := range failed {
		b, err := pub.Start(perBurst)
		if err != nil {
			t.Fatal(err)
		}
		if err := publish(b, id); err != nil {
			t.Fatal(err)
		}
		if acks, err := b.Wait(ctx, timeout); err != nil || len(acks) != perBurst {
			t.Fatalf("burst %d sent again: %d acks, %v", id, len(acks), err)
		}
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := info.State.Msgs, uint64(bursts*perBurst); got != want {
		t.Fatalf("the stream holds %d messages, want %d (every burst's, once)", got, want)
	}
}
