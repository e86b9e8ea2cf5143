package owner

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent/natsd"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// readAheadStore is a lane store of n events, event i (1-based) at
// sequence i, with id "ev-i".
func readAheadStore(t *testing.T, n int) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	ctx := context.Background()
	srv, err := natsd.Start(natsd.Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	js := srv.JetStream()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LANES_T", Subjects: []string{"lanes.t.>"}, AllowDirect: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		data, _ := proto.Marshal(&rivorav1.Event{EventId: "ev-" + strconv.Itoa(i), Payload: make([]byte, 200)})
		if _, err := js.Publish(ctx, "lanes.t.lane"+strconv.Itoa(i%7), data); err != nil {
			t.Fatal(err)
		}
	}
	return js, st
}

func wantEvent(t *testing.T, ev *rivorav1.Event, ok bool, seq uint64) {
	t.Helper()
	if !ok || ev.GetEventId() != "ev-"+strconv.FormatUint(seq, 10) {
		t.Fatalf("load(%d) = %v, %v; want ev-%d", seq, ev.GetEventId(), ok, seq)
	}
}

// A miss fetches the events after it in one batch; the next loads are
// answered from it, and each event is handed out once.
func TestReadAheadFetchesTheEventsAfterAMissInOneBatch(t *testing.T) {
	js, _ := readAheadStore(t, 200)
	r := newReadAhead(js, "LANES_T")
	ctx := context.Background()

	ev, ok := r.load(ctx, 10)
	wantEvent(t, ev, ok, 10)
	if len(r.events) != readAheadBatch-1 {
		t.Fatalf("kept %d events after a miss, want the batch's other %d", len(r.events), readAheadBatch-1)
	}
	for seq := uint64(11); seq < 10+readAheadBatch; seq++ {
		r.mu.Lock()
		ev, ok := r.take(seq)
		r.mu.Unlock()
		wantEvent(t, ev, ok, seq)
	}
	if len(r.events) != 0 {
		t.Fatalf("%d events left after every one was taken", len(r.events))
	}
	// Past the store's end the batch ends early; past it nothing is found.
	ev, ok = r.load(ctx, 190)
	wantEvent(t, ev, ok, 190)
	if len(r.events) != 10 {
		t.Fatalf("kept %d events from a batch at the store's end, want 10", len(r.events))
	}
	if ev, ok := r.load(ctx, 500); ok {
		t.Fatalf("load past the end = %v, want a miss", ev)
	}
}

// A deleted event is a miss (the caller's own get reports it); the batch
// steps over it.
func TestReadAheadStepsOverDeletedEvents(t *testing.T) {
	js, st := readAheadStore(t, 100)
	ctx := context.Background()
	for _, seq := range []uint64{5, 6} {
		if err := st.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	r := newReadAhead(js, "LANES_T")
	if ev, ok := r.load(ctx, 5); ok {
		t.Fatalf("load of a deleted event = %v, want a miss", ev)
	}
	r.mu.Lock()
	_, has6 := r.events[6]
	ev, ok := r.take(7)
	r.mu.Unlock()
	if has6 {
		t.Fatal("kept a deleted event")
	}
	wantEvent(t, ev, ok, 7)
}

// Loads that miss together on nearby sequences share one batch, and the
// events kept stay within readAheadKeep.
func TestReadAheadSharesABatchAndStaysBounded(t *testing.T) {
	js, _ := readAheadStore(t, 3*readAheadKeep)
	r := newReadAhead(js, "LANES_T")
	ctx := context.Background()

	var wg sync.WaitGroup
	for seq := uint64(1); seq <= 16; seq++ {
		wg.Go(func() {
			ev, ok := r.load(ctx, seq)
			wantEvent(t, ev, ok, seq)
		})
	}
	wg.Wait()
	// One batch of readAheadBatch from 1 (a load that came first at a
	// later seq fetches its own: at most 16 batches, never overlapping
	// ones for a seq being fetched).
	if n := len(r.events); n < readAheadBatch-16 || n > 16*readAheadBatch {
		t.Fatalf("kept %d events after 16 nearby loads", n)
	}
	for seq := uint64(100); seq < 3*readAheadKeep; seq += readAheadBatch {
		ev, ok := r.load(ctx, seq)
		wantEvent(t, ev, ok, seq)
		if len(r.events) > readAheadKeep || len(r.order) > readAheadKeep {
			t.Fatalf("kept %d events (%d in order), more than %d", len(r.events), len(r.order), readAheadKeep)
		}
	}
	if len(r.events) < readAheadKeep-readAheadBatch {
		t.Fatalf("kept %d events, want about %d", len(r.events), readAheadKeep)
	}
}
