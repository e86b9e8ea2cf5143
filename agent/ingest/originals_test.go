package ingest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/natsd"
)

// The probe the one-write idempotency check relies on (originals.go): on
// the NATS server in go.mod, a probe of an id the stream stored answers a
// duplicate naming the original's sequence, a probe of a new id is
// refused, and neither stores anything nor leaves a trace in the dedup
// window (the new id is then stored as new).
func TestProbeStoresNothing(t *testing.T) {
	srv, err := natsd.Start(natsd.Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx := context.Background()
	js := srv.JetStream()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "PROBED", Subjects: []string{"probed.>"}, Duplicates: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	store := func(id string) *jetstream.PubAck {
		t.Helper()
		msg := nats.NewMsg("probed.a")
		msg.Header.Set(jetstream.MsgIDHeader, id)
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		return ack
	}
	store("other")
	first := store("stored")
	o := &originals{js: js}
	got, err := o.probeAll(ctx, []probe{{stream: "PROBED", subject: "probed.b", msgID: "stored"}, {stream: "PROBED", subject: "probed.b", msgID: "new"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Stored{Stream: "PROBED", Seq: first.Sequence, Duplicate: true}); got[0] != want {
		t.Fatalf("probe of a stored id = %+v, want %+v", got[0], want)
	}
	if got[1].Duplicate {
		t.Fatalf("probe of a new id = %+v, want no duplicate", got[1])
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages after the probes, want the 2 stored", info.State.Msgs)
	}
	if ack := store("new"); ack.Duplicate || ack.Sequence != 3 {
		t.Fatalf("storing the probed new id: %+v, want stored as new at 3", ack)
	}
	// A partition whose lanes were never opened has no stream: nothing
	// there is a duplicate.
	got, err = o.probeAll(ctx, []probe{{stream: "NONE", subject: "nowhere.a", msgID: "stored"}})
	if err != nil || got[0].Duplicate {
		t.Fatalf("probe where no stream is: %+v, %v; want no duplicate, no error", got, err)
	}
}
