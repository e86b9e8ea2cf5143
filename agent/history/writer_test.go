package history_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/history"
	"github.com/rivora/rivora/agent/natsd"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
)

func newHistory(t *testing.T, srv *natsd.Server, cfg history.Config) *history.History {
	t.Helper()
	h, err := history.NewRunning(t, context.Background(), srv.JetStream(), cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// messages is the count of messages (batches) in the outcome stream.
func messages(t *testing.T, srv *natsd.Server, stream string) uint64 {
	t.Helper()
	ctx := context.Background()
	st, err := srv.JetStream().Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// waitMessages polls until stream holds want messages.
func waitMessages(t *testing.T, srv *natsd.Server, stream string, want uint64) {
	t.Helper()
	var n uint64
	err := poll.Check(10*time.Second, 5*time.Millisecond, func() error {
		n = messages(t, srv, stream)
		switch {
		case n == want:
			return nil
		case n > want:
			return poll.GiveUp(poll.ErrTimeout)
		}
		return poll.ErrTimeout
	})
	if err != nil {
		t.Fatalf("%s holds %d messages, want %d", stream, n, want)
	}
}

// Without Flush or Close, records reach the stream after the flush
// interval, a subject's records in one message.
func TestRecordsFlushOnTime(t *testing.T) {
	srv := startNATS(t)
	h := newHistory(t, srv, history.Config{FlushInterval: 10 * time.Millisecond})
	for i := 1; i <= 3; i++ {
		h.Record(failed("ev-timed", int32(i)))
	}
	waitMessages(t, srv, history.Stream, 1) // fails if they come as more than one batch
	waitFor(t, h, "ev-timed", 3)
}

// A batch that reaches its record or byte bound is published at once,
// long before the flush interval; the rest waits for it (or Close).
func TestRecordsFlushOnSize(t *testing.T) {
	t.Run("records", func(t *testing.T) {
		srv := startNATS(t)
		h := newHistory(t, srv, history.Config{FlushInterval: time.Hour, MaxBatchRecords: 100})
		for i := 1; i <= 250; i++ {
			h.Record(failed("ev-sized", int32(i)))
		}
		waitMessages(t, srv, history.Stream, 2)
		if got, err := h.Lookup(context.Background(), "ev-sized"); err != nil || len(got) != 250 {
			t.Fatalf("Lookup before the interval = %d outcomes, %v; want the 2 full batches' 200 and the 50 queued", len(got), err)
		}
		history.Stop(h)
		waitMessages(t, srv, history.Stream, 3)
		waitFor(t, h, "ev-sized", 250)
	})
	t.Run("bytes", func(t *testing.T) {
		srv := startNATS(t)
		h := newHistory(t, srv, history.Config{FlushInterval: time.Hour, MaxBatchBytes: 4 << 10})
		payload := make([]byte, 1000)
		for range 10 {
			h.RecordBody(&rivorav1.Event{EventId: "ev-big", DestinationId: "d1", Payload: payload})
		}
		// ~1 KB a record: a batch reaches 4 KiB at its 5th record.
		waitMessages(t, srv, history.BodiesStream, 2)
		ev, err := h.Body(context.Background(), "ev-big")
		if err != nil || ev == nil || len(ev.GetPayload()) != 1000 {
			t.Fatalf("Body = %v, %v; want the event with its payload", ev, err)
		}
	})
}

// A record is in Lookup and Body the moment Record returns, before the
// batch is published, and once (not twice) after it is stored: an event
// leaving its lane never drops out of sight.
func TestLookupSeesRecordsNotYetStored(t *testing.T) {
	srv := startNATS(t)
	h := newHistory(t, srv, history.Config{FlushInterval: time.Hour})
	h.Record(failed("ev-fresh", 1))
	h.RecordBody(&rivorav1.Event{EventId: "ev-fresh", DestinationId: "d1", Payload: []byte("p")})
	ctx := context.Background()
	check := func(when string) {
		t.Helper()
		if got, err := h.Lookup(ctx, "ev-fresh"); err != nil || len(got) != 1 || got[0].GetAttempt().GetNumber() != 1 {
			t.Fatalf("Lookup %s = %v, %v; want the one outcome", when, got, err)
		}
		if ev, err := h.Body(ctx, "ev-fresh"); err != nil || string(ev.GetPayload()) != "p" {
			t.Fatalf("Body %s = %v, %v; want the event", when, ev, err)
		}
	}
	check("before the flush")
	if n := messages(t, srv, history.Stream); n != 0 {
		t.Fatalf("the outcome stream holds %d messages before the flush, want 0 (the test relies on it)", n)
	}
	h.Flush() // returns once the stream acked
	if n := messages(t, srv, history.Stream); n != 1 {
		t.Fatalf("the outcome stream holds %d messages after Flush, want 1", n)
	}
	check("after it is stored")
	if q := history.Queued(h); q != 0 {
		t.Fatalf("%d bytes still counted as queued after Flush", q)
	}
}

// Close publishes what is buffered; a record after Close is dropped and
// counted, not a panic.
func TestCloseFlushes(t *testing.T) {
	srv := startNATS(t)
	h := newHistory(t, srv, history.Config{FlushInterval: time.Hour})
	h.Record(failed("ev-closed", 1))
	history.Stop(h)
	waitFor(t, h, "ev-closed", 1)
	before := history.RecordErrors()
	h.Record(failed("ev-closed", 2))
	history.Stop(h) // twice is fine
	if got := history.RecordErrors() - before; got != 1 {
		t.Fatalf("record errors after a record past Close = +%v, want +1", got)
	}
	if got, err := h.Lookup(context.Background(), "ev-closed"); err != nil || len(got) != 1 {
		t.Fatalf("Lookup = %d outcomes, %v; want only the one before Close", len(got), err)
	}
}

// A lookup finds an event's records in every batch of its subject, in
// order, among other events' records.
func TestLookupAcrossBatches(t *testing.T) {
	r := newRigWith(t, history.Config{FlushInterval: time.Hour})
	accepted := r.now
	target, other := v7At(t, accepted), ""
	for other == "" || history.Shard(other) != history.Shard(target) {
		other = v7At(t, accepted)
	}
	const n = 40
	for i := 1; i <= n; i++ {
		r.record(failed(target, int32(i)))
		r.record(failed(other, int32(i)))
		if i%10 == 0 {
			r.stored() // a batch per 20 records
		}
	}
	if got := messages(t, r.srv, history.Stream); got != 4 {
		t.Fatalf("%d records in %d messages, want 4 batches (the test relies on several)", 2*n, got)
	}
	for _, id := range []string{target, other} {
		got, err := r.h.Lookup(context.Background(), id)
		if err != nil || len(got) != n {
			t.Fatalf("Lookup(%s) = %d outcomes, %v; want %d", id, len(got), err, n)
		}
		for i, o := range got {
			if o.GetEventId() != id || o.GetAttempt().GetNumber() != int32(i+1) {
				t.Fatalf("Lookup(%s)[%d] = %s attempt %d, want attempt %d", id, i, o.GetEventId(), o.GetAttempt().GetNumber(), i+1)
			}
		}
	}
}

// When NATS is gone, records are dropped and counted, Record never waits,
// and the memory held stays within MaxQueuedBytes.
func TestBoundedWhenNATSIsDown(t *testing.T) {
	srv := startNATS(t)
	const bound = 64 << 10
	h := newHistory(t, srv, history.Config{FlushInterval: time.Hour, MaxQueuedBytes: bound})
	srv.Shutdown()
	before := history.RecordErrors()
	payload := make([]byte, 1<<10)
	const n = 10_000 // ~10 MB of records
	for i := range n {
		h.RecordBody(&rivorav1.Event{EventId: "ev-lost", Payload: payload})
		if q := history.Queued(h); q > bound {
			t.Fatalf("after %d records %d bytes queued, want at most %d", i+1, q, bound)
		}
	}
	history.Stop(h)
	if got := history.RecordErrors() - before; got != n {
		t.Fatalf("record errors = +%v, want +%d (every record dropped or failed, and counted)", got, n)
	}
	if q := history.Queued(h); q != 0 {
		t.Fatalf("%d bytes queued after Close, want 0", q)
	}
}

// Records of one flush interval go to several subjects' batches; a
// listing still orders them as they were recorded, not by batch.
func TestListOrdersInterleavedBatches(t *testing.T) {
	r := newRigWith(t, history.Config{FlushInterval: time.Hour})
	// A second into a bucket: the records' 6 ms never straddle two
	// buckets' subjects, which would make them three batches (a run at
	// a bucket's last milliseconds failed so).
	r.mu.Lock()
	r.now = r.now.Truncate(history.BucketWidth).Add(time.Second)
	r.mu.Unlock()
	var a, b []string // ids of two shards
	for len(a) < 3 || len(b) < 3 {
		id := v7At(t, r.now)
		if s := history.Shard(id); s == 0 && len(a) < 3 {
			a = append(a, id)
		} else if s == 1 && len(b) < 3 {
			b = append(b, id)
		}
	}
	var want []string // newest first
	for i := range 3 {
		for _, id := range []string{a[i], b[i]} {
			r.record(terminal(rivorav1.EventOutcome_KIND_DELIVERED, id, "d1", "c1", "u1"))
			want = append([]string{id}, want...)
			r.later(time.Millisecond)
		}
	}
	r.stored()
	if n := messages(t, r.srv, history.Stream); n != 2 {
		t.Fatalf("6 records in %d messages, want 2 batches (the test relies on interleaved batches)", n)
	}
	l, err := r.h.List(context.Background(), history.Filter{Destination: "d1", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range l.Events {
		got = append(got, e.Outcome.GetEventId())
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("List = %v\nwant newest first %v", got, want)
	}
}
