package natsd_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/natsd"
)

func burstStream(t *testing.T) (*natsd.Server, *natsd.Publisher) {
	t.Helper()
	srv := start(t, natsd.Config{})
	if _, err := srv.JetStream().CreateStream(context.Background(), jetstream.StreamConfig{
		Name: "BURST", Subjects: []string{"burst.>"}, Storage: jetstream.FileStorage, Duplicates: time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	pub, err := natsd.NewPublisher(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Close)
	return srv, pub
}

func msgID(id string) nats.Header { return nats.Header{jetstream.MsgIDHeader: []string{id}} }

// A burst answers each message's sequence in the stream, and flags a
// duplicate with its original's sequence, as a JetStream future would.
func TestBurstAnswersEachMessagesSequence(t *testing.T) {
	srv, pub := burstStream(t)
	const n = 3000 // more than one socket buffer of acknowledgements
	b, err := pub.Start(n)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		id := "id-" + strconv.Itoa(i)
		if i == n-1 {
			id = "id-7" // the same id as message 7: a duplicate
		}
		if err := b.Publish(i, "burst."+strconv.Itoa(i%5), msgID(id), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	acks, err := b.Wait(context.Background(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(acks) != n {
		t.Fatalf("%d acks for %d messages", len(acks), n)
	}
	for i, a := range acks[:n-1] {
		if a != (natsd.Ack{Stream: "BURST", Seq: uint64(i + 1)}) {
			t.Fatalf("message %d answered %+v, want sequence %d, not a duplicate", i, a, i+1)
		}
	}
	if last := acks[n-1]; last != (natsd.Ack{Stream: "BURST", Seq: 8, Duplicate: true}) {
		t.Fatalf("the repeated id answered %+v, want a duplicate of sequence 8", last)
	}
	info, err := srv.JetStream().Stream(context.Background(), "BURST")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo().State.Msgs; got != n-1 {
		t.Fatalf("stream holds %d messages, want %d", got, n-1)
	}
}

// A refusal ends the answer at the first refused message, with the
// stream's reason; a subject no stream takes answers no responders.
func TestBurstStopsAtTheFirstRefusal(t *testing.T) {
	_, pub := burstStream(t)
	b, err := pub.Start(4)
	if err != nil {
		t.Fatal(err)
	}
	refused := nats.Header{jetstream.ExpectedLastMsgIDHeader: []string{"not-the-last"}}
	for i, h := range []nats.Header{msgID("a"), msgID("b"), refused, msgID("c")} {
		if err := b.Publish(i, "burst.x", h, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	acks, err := b.Wait(context.Background(), 10*time.Second)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10070 {
		t.Fatalf("err %v, want the stream's wrong-last-msg-id refusal (10070)", err)
	}
	if len(acks) != 2 || acks[0].Seq != 1 || acks[1].Seq != 2 {
		t.Fatalf("acks %+v, want the two before the refusal", acks)
	}

	nobody, err := pub.Start(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := nobody.Publish(0, "nobody.listens", nil, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := nobody.Wait(context.Background(), 10*time.Second); !errors.Is(err, nats.ErrNoResponders) || !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("err %v, want no responders", err)
	}
}

// A burst whose publishing failed part way answers once the messages sent
// were acknowledged; one whose acknowledgements never come gives up at the
// timeout; Close answers the bursts still waiting.
func TestBurstAbandonTimeoutAndClose(t *testing.T) {
	_, pub := burstStream(t)
	b, err := pub.Start(3)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(0, "burst.x", msgID("p0"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	failure := errors.New("connection closed")
	b.Abandon(1, failure)
	acks, err := b.Wait(context.Background(), 10*time.Second)
	if !errors.Is(err, failure) || len(acks) != 1 || acks[0].Seq != 1 {
		t.Fatalf("abandoned burst answered %+v, %v; want the first message's ack and the failure", acks, err)
	}

	// No message sent: nothing will answer.
	silent, err := pub.Start(1)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if acks, err := silent.Wait(context.Background(), 50*time.Millisecond); err == nil || len(acks) != 0 {
		t.Fatalf("a burst nobody answered returned %+v, %v; want a timeout", acks, err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("gave up after %s, before the timeout", waited)
	}

	waiting, err := pub.Start(1)
	if err != nil {
		t.Fatal(err)
	}
	pub.Close()
	if _, err := waiting.Wait(context.Background(), 10*time.Second); !errors.Is(err, natsd.ErrPublisherClosed) {
		t.Fatalf("err %v after Close, want ErrPublisherClosed", err)
	}
	if _, err := pub.Start(1); !errors.Is(err, natsd.ErrPublisherClosed) {
		t.Fatalf("Start after Close: %v, want ErrPublisherClosed", err)
	}
}

// When the stream elects a leader, a burst with a message sent before
// then and still unanswered a grace later is answered ErrLeaderChanged,
// at once rather than at its timeout — also when its later messages are
// answered; a burst whose messages sent before the election are all
// answered is waited for, and so are messages sent after it.
func TestBurstGivesUpWhatAnOldLeaderLeftUnanswered(t *testing.T) {
	srv, pub := burstStream(t)
	if err := pub.FailOnLeaderChange("BURST"); err != nil {
		t.Fatal(err)
	}
	// A subject no stream takes, whose messages a subscriber swallows:
	// never answered, as a write the old leader dropped.
	swallow, err := srv.Conn().Subscribe("swallow.>", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = swallow.Unsubscribe() })
	if err := srv.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	straddling, err := pub.Start(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := straddling.Publish(0, "swallow.x", msgID("s0"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	answered, err := pub.Start(3)
	if err != nil {
		t.Fatal(err)
	}
	if err := answered.Publish(0, "burst.x", msgID("a0"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	// Not yet sent at the election: not judged.
	late, err := pub.Start(1)
	if err != nil {
		t.Fatal(err)
	}
	natsd.LeaderElected(pub)
	// Answered after the election: the straddling burst's unanswered
	// first message still fails it.
	if err := straddling.Publish(1, "burst.x", msgID("s1"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := answered.Publish(1, "burst.x", msgID("a1"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if acks, err := straddling.Wait(context.Background(), time.Minute); !errors.Is(err, natsd.ErrLeaderChanged) || len(acks) != 0 {
		t.Fatalf("a burst with a message unanswered since the election returned %+v, %v; want ErrLeaderChanged", acks, err)
	}
	if waited := time.Since(start); waited > 30*time.Second {
		t.Fatalf("gave up after %s, not after the grace", waited)
	}
	// The grace has run out (every waiting burst is judged before any is
	// answered): the others are still waited for.
	if err := answered.Publish(2, "burst.x", msgID("a2"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if acks, err := answered.Wait(context.Background(), 10*time.Second); err != nil || len(acks) != 3 {
		t.Fatalf("a burst answered since the election returned %+v, %v; want its three acks", acks, err)
	}
	if err := late.Publish(0, "burst.x", msgID("l0"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if acks, err := late.Wait(context.Background(), 10*time.Second); err != nil || len(acks) != 1 {
		t.Fatalf("a burst sent after the election returned %+v, %v; want its ack", acks, err)
	}

	// The stream's advisory does the same (TestBurstsAcrossAStepDown: a
	// real election).
	silent, err := pub.Start(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := silent.Publish(0, "swallow.y", msgID("q0"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := srv.Conn().Publish(natsd.LeaderElectedSubject("BURST"), []byte(`{"stream":"BURST"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := silent.Wait(context.Background(), time.Minute); !errors.Is(err, natsd.ErrLeaderChanged) {
		t.Fatalf("after the stream's advisory: %v, want ErrLeaderChanged", err)
	}
	if err := pub.FailOnLeaderChange("OTHER"); err == nil {
		t.Fatal("a second FailOnLeaderChange was taken")
	}
}

func TestParseAck(t *testing.T) {
	for _, tc := range []struct {
		data string
		want natsd.Ack
		bad  bool
	}{
		{data: `{"stream":"LANES_3","seq":42}`, want: natsd.Ack{Stream: "LANES_3", Seq: 42}},
		{data: `{"stream":"LANES_3","domain":"hub","seq":7,"duplicate": true}`, want: natsd.Ack{Stream: "LANES_3", Seq: 7, Duplicate: true}},
		{data: `{"stream":"S", "seq": 9, "duplicate":false}`, want: natsd.Ack{Stream: "S", Seq: 9}},
		{data: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"S","seq":0}`, bad: true},
		{data: `{"stream":"S"}`, bad: true},
		{data: `{"stream":"S","seq":0}`, bad: true},
		{data: `{"stream":"S","seq":99999999999999999999999}`, bad: true},
	} {
		got, err := natsd.ParseAck(&nats.Msg{Data: []byte(tc.data)})
		if (err != nil) != tc.bad || (!tc.bad && got != tc.want) {
			t.Errorf("ParseAck(%s) = %+v, %v; want %+v (error %v)", tc.data, got, err, tc.want, tc.bad)
		}
	}
}
