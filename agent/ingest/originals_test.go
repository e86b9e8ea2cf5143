package ingest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/edge"
	"github.com/rivora/rivora/internal/fingerprint"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
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

// The mover's question (DuplicateConflict) about a copy whose original
// the lanes named at a sequence: read from the stream's leader, a
// present original is compared (with its fingerprint header, or without
// one), and an original already delivered and reclaimed from its lane
// counts as the same event at once. Looking again for it cost ~370 ms per
// copy: a batch of copies of delivered events (INGEST redelivering what a
// previous owner moved but never acked) held the mover minutes, past
// INGEST's AckWait, and its partition never moved again (issue 27).
func TestDuplicateOfAReclaimedOriginalIsAnsweredAtOnce(t *testing.T) {
	srv, err := natsd.Start(natsd.Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx := context.Background()
	js := srv.JetStream()
	const p = 6
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: lanes.LanesStream(p), Subjects: []string{lanes.LanesFilter(p)}, Duplicates: time.Minute, AllowDirect: true})
	if err != nil {
		t.Fatal(err)
	}
	check, err := NewForwardedCheck(ctx, js, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	event := func(id, payload string) *rivorav1.Event {
		return &rivorav1.Event{EventId: id, DestinationId: "fast5", CustomerId: "acme", LaneKey: "u5", Type: "t", Payload: []byte(payload), ContentType: "application/json"}
	}
	store := func(ev *rivorav1.Event, withFingerprint bool) uint64 {
		t.Helper()
		data, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		msg := nats.NewMsg(lanes.EventLane(ev).Subject(p))
		msg.Data = data
		msg.Header.Set(jetstream.MsgIDHeader, ev.GetEventId())
		if withFingerprint {
			fingerprint.Set(msg, fingerprint.Of(ev))
		}
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	ask := func(ev *rivorav1.Event, seq uint64) string {
		t.Helper()
		why, err := check.DuplicateConflict(ctx, edge.Forwarded{Event: ev, Partition: p}, fingerprint.Of(ev), lanes.LanesStream(p), seq)
		if err != nil {
			t.Fatalf("DuplicateConflict(%s at %d): %v", ev.GetEventId(), seq, err)
		}
		return why
	}
	for _, withFingerprint := range []bool{true, false} {
		id := uuid.NewString()
		seq := store(event(id, `{"v":1}`), withFingerprint)
		if why := ask(event(id, `{"v":1}`), seq); why != "" {
			t.Fatalf("the same event (fingerprint header %v) judged a conflict: %s", withFingerprint, why)
		}
		if why := ask(event(id, `{"v":2}`), seq); !strings.Contains(why, id) {
			t.Fatalf("another payload under id %s (fingerprint header %v) judged %q, want a conflict naming it", id, withFingerprint, why)
		}
	}

	// Were the mover to look again, each copy would wait these out.
	saved := findRetries
	findRetries = []time.Duration{2 * time.Second, 2 * time.Second, 2 * time.Second}
	t.Cleanup(func() { findRetries = saved })
	const copies = 5
	seqs := make(map[string]uint64)
	for range copies {
		id := uuid.NewString()
		seqs[id] = store(event(id, `{"v":1}`), true)
	}
	// Delivered and reclaimed: the reclaimer purges the lane store below
	// its low-water mark.
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for id, seq := range seqs {
		if why := ask(event(id, `{"v":1}`), seq); why != "" {
			t.Fatalf("a copy of reclaimed event %s judged a conflict: %s", id, why)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("judging %d copies of reclaimed originals took %v, want well under a second (no looking again)", copies, took)
	}

	// An edge's copy (CheckForwarded) whose cell's copy INGEST named: gone
	// from INGEST (moved), gone from its lane (delivered, reclaimed).
	ingestStream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: lanes.IngestStream, Subjects: []string{lanes.IngestFilter(p)}, Duplicates: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var moved []*rivorav1.Event
	for range copies {
		ev := event(uuid.NewString(), `{"v":1}`)
		data, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		msg := nats.NewMsg(lanes.IngestSubject(p, ev.GetDestinationId()))
		msg.Data = data
		msg.Header.Set(jetstream.MsgIDHeader, ev.GetEventId())
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.DeleteMsg(ctx, store(ev, true)); err != nil {
			t.Fatal(err)
		}
		if err := ingestStream.DeleteMsg(ctx, ack.Sequence); err != nil {
			t.Fatal(err)
		}
		moved = append(moved, ev)
	}
	start = time.Now()
	for _, ev := range moved {
		got, err := check.CheckForwarded(ctx, []edge.Forwarded{{Event: ev, Edge: "edge-1", Partition: p}})
		if err != nil || got[0] != "" {
			t.Fatalf("an edge's copy of moved and reclaimed event %s judged %q, %v; want stored", ev.GetEventId(), got, err)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("judging %d edges' copies of moved and reclaimed originals took %v, want well under a second (no looking again)", copies, took)
	}
}

// A probe nobody answers (a stream leader that stopped with it, in a
// rolling restart) ends the probes after probeWait, not at the caller's
// deadline.
func TestAnUnansweredProbeEndsTheWait(t *testing.T) {
	srv, err := natsd.Start(natsd.Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	// No stream takes the subject; a subscriber swallows the probe, as a
	// leader that stopped would.
	swallow, err := srv.Conn().Subscribe("swallowed.>", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = swallow.Unsubscribe() }()
	if err := srv.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	o := &originals{js: srv.JetStream()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err = o.probeAll(ctx, []probe{{stream: "SWALLOWED", subject: "swallowed.a", msgID: "id"}})
	if !errors.Is(err, errProbeUnanswered) {
		t.Fatalf("unanswered probe: %v, want errProbeUnanswered", err)
	}
	if waited := time.Since(start); waited > 30*time.Second {
		t.Fatalf("gave up after %s, not after probeWait", waited)
	}
}
