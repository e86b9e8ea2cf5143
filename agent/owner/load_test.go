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
	return &Partition{deps: Deps{JS: js}, lanes: st, directGet: directGetSubject(js, "LANES_T")}, st
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
