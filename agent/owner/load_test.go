package owner

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/scheduler"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// loadRig is a partition of n stored events (event i, 1-based, at
// sequence i, with the headers a lane write carries) with just what Load
// needs wired.
func loadRig(t testing.TB, n int) (*Partition, jetstream.Stream) {
	t.Helper()
	ctx := context.Background()
	srv, err := natsd.Start(natsd.Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	js := srv.JetStream()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LANES_T", Subjects: []string{"lane.t.>"}, AllowDirect: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		data, _ := proto.Marshal(&rivorav1.Event{EventId: "ev-" + strconv.Itoa(i), Payload: make([]byte, 256)})
		msg := nats.NewMsg("lane.t.l" + strconv.Itoa(i%7))
		msg.Data = data
		msg.Header.Set(jetstream.MsgIDHeader, "ev-"+strconv.Itoa(i))
		msg.Header.Set("Rivora-Fingerprint", "0123456789abcdef0123456789abcdef")
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	return &Partition{deps: Deps{JS: js}, lanes: st, directGet: apiSubject(js, "DIRECT.GET.LANES_T"), msgGet: apiSubject(js, "STREAM.MSG.GET.LANES_T")}, st
}

// loadStored answers the stored bytes of an event without its headers,
// and "not found" for a deleted one.
func TestLoadStoredReadsTheEventWithoutItsHeaders(t *testing.T) {
	o, st := loadRig(t, 20)
	ctx := context.Background()
	for _, seq := range []uint64{1, 7, 20} {
		data, err := o.loadStored(ctx, seq)
		if err != nil {
			t.Fatalf("loadStored(%d): %v", seq, err)
		}
		raw, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != string(raw.Data) {
			t.Fatalf("loadStored(%d) = %d bytes unlike the stored %d", seq, len(data), len(raw.Data))
		}
	}
	if err := st.DeleteMsg(ctx, 7); err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{7, 21} {
		if _, err := o.loadStored(ctx, seq); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatalf("loadStored(%d) of no event: %v, want ErrMsgNotFound", seq, err)
		}
	}
	ev, err := o.Load(ctx, &scheduler.Attempt{Entry: scheduler.Entry{Seq: 11, EventID: "ev-11"}})
	if err != nil || ev.GetEventId() != "ev-11" {
		t.Fatalf("Load(11) = %v, %v; want ev-11", ev.GetEventId(), err)
	}
}

// A direct get may be answered by a replica that has not stored a write
// the leader acknowledged yet: its "not found" must not make a pending
// event gone (the dispatcher skips an event that cannot be loaded). The
// lagging replica is a responder on the direct get subject answering 404
// to everything; the leader's message get then finds what is stored, and
// only what is stored.
func TestLoadStoredAsksTheLeaderWhenAReplicaFindsNothing(t *testing.T) {
	o, st := loadRig(t, 5)
	ctx := context.Background()
	nc := o.deps.JS.Conn()
	lagging, err := nc.Subscribe("test.lagging.replica", func(m *nats.Msg) {
		answer := nats.NewMsg(m.Reply)
		answer.Header.Set("Status", "404")
		answer.Header.Set("Description", "Message Not Found")
		_ = nc.PublishMsg(answer)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lagging.Unsubscribe() })
	o.directGet = "test.lagging.replica"

	data, err := o.loadStored(ctx, 4)
	if err != nil {
		t.Fatalf("loadStored(4) with a replica that has not stored it: %v", err)
	}
	raw, err := st.GetMsg(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != string(raw.Data) {
		t.Fatalf("loadStored(4) = %d bytes unlike the stored %d", len(data), len(raw.Data))
	}
	if _, err := o.loadStored(ctx, 6); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("loadStored(6) of no event: %v, want ErrMsgNotFound from the leader", err)
	}
}

// A Load that fails for good (the leader says the event is not there, or
// its bytes do not decode) is told from one the store did not answer,
// which the dispatcher must try again rather than skip (verdict.Decide).
func TestLoadTellsAnEventGoneFromAStoreThatDidNotAnswer(t *testing.T) {
	o, st := loadRig(t, 3)
	ctx := context.Background()
	if _, err := o.deps.JS.Publish(ctx, "lane.t.garbage", []byte{0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, 2); err != nil {
		t.Fatal(err)
	}
	load := func(ctx context.Context, seq uint64) error {
		_, err := o.Load(ctx, &scheduler.Attempt{Entry: scheduler.Entry{Seq: seq, EventID: "ev"}})
		return err
	}
	if err := load(ctx, 2); err == nil || !loadGone(err) {
		t.Fatalf("Load of a deleted event: %v, gone %v; want gone", err, loadGone(err))
	}
	if err := load(ctx, 4); err == nil || !loadGone(err) {
		t.Fatalf("Load of undecodable bytes: %v, gone %v; want gone", err, loadGone(err))
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := load(cancelled, 1); err == nil || loadGone(err) {
		t.Fatalf("Load the store did not answer: %v, gone %v; want an error that is not gone", err, loadGone(err))
	}
	if err := load(ctx, 1); err != nil {
		t.Fatalf("Load of a stored event: %v", err)
	}
}

// BenchmarkLoadStored against BenchmarkLoadGetMsg (jetstream's GetMsg,
// which Load used): the CPU of a deep backlog's load per delivery.
func BenchmarkLoadStored(b *testing.B) {
	o, _ := loadRig(b, 1000)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := o.loadStored(ctx, uint64(i%1000+1)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLoadGetMsg(b *testing.B) {
	_, st := loadRig(b, 1000)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := st.GetMsg(ctx, uint64(i%1000+1)); err != nil {
			b.Fatal(err)
		}
	}
}

// A cached event is decoded from the entry's encoding, without a read of
// the lane store (this partition has none); an encoding that does not
// decode fails for good, as a stored one would.
func TestLoadDecodesACachedEncoding(t *testing.T) {
	ev := &rivorav1.Event{EventId: "ev-1", DestinationId: "orders", Type: "order.created", Payload: []byte(`{"id":1}`)}
	data, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var o Partition
	got, err := o.Load(context.Background(), &scheduler.Attempt{Entry: scheduler.Entry{Seq: 1, EventID: "ev-1", Data: string(data)}})
	if err != nil || !proto.Equal(got, ev) {
		t.Fatalf("Load = %v, %v; want %v", got, err, ev)
	}
	if c := Cached(scheduler.Entry{Data: string(data)}); !proto.Equal(c, ev) {
		t.Fatalf("Cached = %v, want %v", c, ev)
	}
	if c := Cached(scheduler.Entry{Seq: 1}); c != nil {
		t.Fatalf("Cached of an entry with nothing cached = %v, want nil", c)
	}
	garbled := scheduler.Entry{Seq: 1, EventID: "ev-1", Data: "\xff\xff\xff"}
	if _, err := o.Load(context.Background(), &scheduler.Attempt{Entry: garbled}); !loadGone(err) {
		t.Fatalf("Load of an undecodable encoding: %v, want a failure for good", err)
	}
	if c := Cached(garbled); c != nil {
		t.Fatalf("Cached of an undecodable encoding = %v, want nil", c)
	}
}
