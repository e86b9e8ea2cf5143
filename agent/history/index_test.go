package history_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/history"
	"github.com/rivora/rivora/agent/natsd"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
)

// acceptedFailed is an attempt outcome of an event accepted at accepted.
func acceptedFailed(id string, n int32, accepted time.Time) *rivorav1.EventOutcome {
	o := failed(id, n)
	o.AcceptedAt = timestamppb.New(accepted)
	return o
}

// sameShard is n UUIDv7 ids of time at in the shard of id.
func sameShard(t *testing.T, id string, at time.Time, n int) []string {
	var out []string
	for len(out) < n {
		if other := v7At(t, at); history.Shard(other) == history.Shard(id) {
			out = append(out, other)
		}
	}
	return out
}

// lastMessage is the newest message of subject.
func lastMessage(t *testing.T, srv *natsd.Server, stream, subject string) []byte {
	t.Helper()
	ctx := context.Background()
	st, err := srv.JetStream().Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatalf("last message of %s: %v", subject, err)
	}
	return m.Data
}

// testClock is a write clock two histories share, moved by the test.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *testClock) later(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// startOn starts a history on srv writing by clock.
func startOn(t *testing.T, srv *natsd.Server, clock *testClock) *history.History {
	t.Helper()
	h, err := history.NewRunning(t, context.Background(), srv.JetStream(), history.Config{FlushInterval: time.Hour}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	history.SetNow(h, clock.Now)
	return h
}

// lookupReads runs f and returns how many subjects lookups read through
// an index and whole meanwhile.
func lookupReads(f func()) (indexed, whole float64) {
	i0, w0 := history.LookupReads()
	f()
	i1, w1 := history.LookupReads()
	return i1 - i0, w1 - w0
}

func wantAttempts(t *testing.T, got []*rivorav1.EventOutcome, id string, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("Lookup(%s) = %d outcomes, want %d", id, len(got), n)
	}
	for i, o := range got {
		if o.GetEventId() != id || o.GetAttempt().GetNumber() != int32(i+1) {
			t.Fatalf("Lookup(%s)[%d] = %s attempt %d, want attempt %d (oldest first)", id, i, o.GetEventId(), o.GetAttempt().GetNumber(), i+1)
		}
	}
}

// Once a subject's bucket is over and its batches are stored, the writer
// appends its index; a lookup then reads the index and the batches it
// names — its event's records, oldest first, or none for an id the
// subject does not hold — and a delivered event's body the same way.
func TestLookupReadsThroughTheIndex(t *testing.T) {
	r := newRigWith(t, history.Config{FlushInterval: time.Hour})
	accepted := r.now
	target := v7At(t, accepted)
	others := sameShard(t, target, accepted, 31)
	missing, others := others[0], others[1:]
	for i := 1; i <= 3; i++ { // three batches, other events' records among the target's
		r.record(acceptedFailed(target, int32(i), accepted))
		for _, id := range others[(i-1)*10 : i*10] {
			r.record(acceptedFailed(id, 1, accepted))
		}
		r.stored()
	}
	r.body(&rivorav1.Event{EventId: target, DestinationId: "d1", Payload: []byte("p"), AcceptedAt: timestamppb.New(accepted)})
	r.stored()
	subject := history.OutcomeSubject(accepted, target, accepted)
	if history.IsIndex(lastMessage(t, r.srv, history.Stream, subject)) {
		t.Fatal("the subject is indexed while its bucket is open")
	}

	// Both buckets over: the next round of the writer indexes them.
	r.later(history.BodyBucketWidth + 3*time.Second)
	r.record(failed("ev-later", 1))
	r.stored()
	if !history.IsIndex(lastMessage(t, r.srv, history.Stream, subject)) {
		t.Fatalf("the last message of %s is not an index once its bucket is over", subject)
	}
	if !history.IsIndex(lastMessage(t, r.srv, history.BodiesStream, history.BodySubject(accepted, target, accepted))) {
		t.Fatal("the delivered event's subject is not indexed once its bucket is over")
	}

	ctx := context.Background()
	indexed, whole := lookupReads(func() {
		got, err := r.h.Lookup(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		wantAttempts(t, got, target, 3)
		for _, id := range others {
			if got, err := r.h.Lookup(ctx, id); err != nil || len(got) != 1 || got[0].GetEventId() != id {
				t.Fatalf("Lookup(%s) = %v, %v; want its one outcome", id, got, err)
			}
		}
		if got, err := r.h.Lookup(ctx, missing); err != nil || got != nil {
			t.Fatalf("Lookup(an id never recorded, same subject) = %v, %v; want nil", got, err)
		}
		if ev, err := r.h.Body(ctx, target); err != nil || string(ev.GetPayload()) != "p" {
			t.Fatalf("Body = %v, %v; want the delivered event", ev, err)
		}
	})
	// Each lookup reads the one subject of its acceptance bucket.
	if want := float64(1 + len(others) + 1 + 1); indexed != want || whole != 0 {
		t.Fatalf("lookups read %v subjects through an index and %v whole, want %v and 0", indexed, whole, want)
	}
}

// History written before the index (or whose writer never wrote one) is
// found by reading its subject whole.
func TestLookupReadsHistoryWithoutAnIndex(t *testing.T) {
	r := newRig(t)
	accepted := r.now.Add(-time.Hour)
	target := v7At(t, accepted)
	subject := history.OutcomeSubject(accepted, target, accepted)
	ctx := context.Background()
	for i := int32(1); i <= 2; i++ { // as an older version wrote it: batches, no index
		data, err := proto.Marshal(&rivorav1.HistoryBatch{Outcomes: []*rivorav1.EventOutcome{acceptedFailed(target, i, accepted)}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.srv.JetStream().Publish(ctx, subject, data); err != nil {
			t.Fatal(err)
		}
	}
	indexed, whole := lookupReads(func() {
		got, err := r.h.Lookup(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		wantAttempts(t, got, target, 2)
	})
	if indexed != 0 || whole != 1 {
		t.Fatalf("lookup read %v subjects through an index and %v whole, want 0 and 1", indexed, whole)
	}
}

// An agent that stops between storing a subject's batches and writing its
// index (a crash) leaves them unindexed; when it comes back in the same
// bucket, its index covers only its own batches. Lookups must not trust
// it: they read the subject whole and find every record.
func TestLookupAfterACrashBetweenBatchesAndIndex(t *testing.T) {
	srv := startNATS(t)
	clock := &testClock{now: time.Now()}
	start := func() *history.History { return startOn(t, srv, clock) }
	accepted := clock.Now()
	target := v7At(t, accepted)
	subject := history.OutcomeSubject(accepted, target, accepted)
	before := start()
	before.Record(acceptedFailed(target, 1, accepted))
	before.Flush()
	history.Stop(before) // gone before the bucket is over: no index

	after := start()
	after.Record(acceptedFailed(target, 2, accepted))
	after.Flush()
	clock.later(history.BucketWidth + 3*time.Second)
	after.Record(failed("ev-later", 1))
	after.Flush()
	if !history.IsIndex(lastMessage(t, srv, history.Stream, subject)) {
		t.Fatalf("the restarted writer did not index %s (the test relies on an index that misses the first batch)", subject)
	}
	indexed, whole := lookupReads(func() {
		got, err := after.Lookup(context.Background(), target)
		if err != nil {
			t.Fatal(err)
		}
		wantAttempts(t, got, target, 2)
	})
	if indexed != 0 || whole != 1 {
		t.Fatalf("lookup read %v subjects through an index and %v whole, want 0 and 1 (the index misses a batch)", indexed, whole)
	}
}

// In a cell two agents write one subject: the agent whose batch is last
// indexes first, the other chains its index to it, and a lookup reads
// both agents' records through the indexes.
func TestCellWritersChainTheirIndexes(t *testing.T) {
	srv := startNATS(t)
	clock := &testClock{now: time.Now()}
	start := func() *history.History { return startOn(t, srv, clock) }
	accepted := clock.Now()
	target := v7At(t, accepted)
	first, second := start(), start()
	first.Record(acceptedFailed(target, 1, accepted))
	first.Flush()
	second.Record(acceptedFailed(target, 2, accepted))
	second.Flush()
	clock.later(history.BucketWidth + 3*time.Second)

	subject := history.OutcomeSubject(accepted, target, accepted)
	ctx := context.Background()
	// Each agent's next rounds index: the first finds the second's batch
	// after its own and waits for the second's index to chain to it.
	err := poll.Within(15*time.Second, func() bool {
		first.Record(failed("ev-first", 1))
		first.Flush()
		second.Record(failed("ev-second", 1))
		second.Flush()
		indexed, _ := lookupReads(func() {
			if _, err := first.Lookup(ctx, target); err != nil {
				t.Fatal(err)
			}
		})
		return indexed == 1
	})
	if err != nil {
		t.Fatalf("no complete index of %s after 15s (last message an index: %v)", subject, history.IsIndex(lastMessage(t, srv, history.Stream, subject)))
	}
	indexed, whole := lookupReads(func() {
		for _, h := range []*history.History{first, second} {
			got, err := h.Lookup(ctx, target)
			if err != nil {
				t.Fatal(err)
			}
			wantAttempts(t, got, target, 2)
		}
	})
	if indexed != 2 || whole != 0 {
		t.Fatalf("lookups read %v subjects through an index and %v whole, want 2 and 0", indexed, whole)
	}
	st, err := srv.JetStream().Stream(ctx, history.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[subject]; n != 4 {
		t.Fatalf("%s holds %d messages, want 4 (two batches, two chained indexes)", subject, n)
	}
}

// A keyed event's records sit in a subject per bucket it was written in:
// a lookup gets the indexes of all of them, in requests of a bounded
// number of subjects, and reads each through its index.
func TestLookupThroughManyIndexes(t *testing.T) {
	r := newRigWith(t, history.Config{FlushInterval: time.Hour})
	const buckets = 1100 // more subjects than one multi-last request may ask for (1024)
	for i := 1; i <= buckets; i++ {
		r.record(failed("order-42", int32(i)))
		r.record(failed("order-43", int32(i)))
		r.stored()
		r.later(history.BucketWidth + 3*time.Second) // the next round indexes this bucket
	}
	r.record(failed("ev-later", 1))
	r.stored()
	indexed, whole := lookupReads(func() {
		got, err := r.h.Lookup(context.Background(), "order-42")
		if err != nil {
			t.Fatal(err)
		}
		wantAttempts(t, got, "order-42", buckets)
	})
	if indexed != buckets || whole != 0 {
		t.Fatalf("lookup read %v subjects through an index and %v whole, want %d and 0", indexed, whole, buckets)
	}
}

// A batch stored in a subject after its index (a record that took its
// subject before the bucket ended and reached the stream after the
// index) is found: the index no longer ends the subject, so the lookup
// reads the subject whole.
func TestLookupFindsABatchAfterTheIndex(t *testing.T) {
	r := newRigWith(t, history.Config{FlushInterval: time.Hour})
	accepted := r.now
	target := v7At(t, accepted)
	subject := history.OutcomeSubject(accepted, target, accepted)
	r.record(acceptedFailed(target, 1, accepted))
	r.stored()
	r.later(history.BucketWidth + 3*time.Second)
	r.record(failed("ev-later", 1))
	r.stored()
	if !history.IsIndex(lastMessage(t, r.srv, history.Stream, subject)) {
		t.Fatalf("%s is not indexed (the test relies on it)", subject)
	}
	data, err := proto.Marshal(&rivorav1.HistoryBatch{Outcomes: []*rivorav1.EventOutcome{acceptedFailed(target, 2, accepted)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.srv.JetStream().Publish(context.Background(), subject, data); err != nil {
		t.Fatal(err)
	}
	indexed, whole := lookupReads(func() {
		got, err := r.h.Lookup(context.Background(), target)
		if err != nil {
			t.Fatal(err)
		}
		wantAttempts(t, got, target, 2)
	})
	if indexed != 0 || whole != 1 {
		t.Fatalf("lookup read %v subjects through an index and %v whole, want 0 and 1", indexed, whole)
	}
}
