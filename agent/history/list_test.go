package history_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/history"
	"github.com/rivora/rivora/agent/natsd"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
)

// rig is a history on a real embedded NATS whose write clock the test moves.
type rig struct {
	t   *testing.T
	srv *natsd.Server
	h   *history.History
	mu  sync.Mutex
	now time.Time
}

func newRig(t *testing.T) *rig { return newRigWith(t, history.Config{}) }

func newRigWith(t *testing.T, cfg history.Config) *rig {
	srv := startNATS(t)
	h, err := history.NewRunning(t, context.Background(), srv.JetStream(), cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, srv: srv, h: h, now: time.Now()}
	history.SetNow(h, func() time.Time { r.mu.Lock(); defer r.mu.Unlock(); return r.now })
	return r
}

// later moves the write clock on.
func (r *rig) later(d time.Duration) { r.mu.Lock(); r.now = r.now.Add(d); r.mu.Unlock() }

func (r *rig) record(o *rivorav1.EventOutcome) { r.h.Record(o) }

func (r *rig) body(ev *rivorav1.Event) { r.h.RecordBody(ev) }

// stored flushes the writer and waits until every batch it published is
// in the streams.
func (r *rig) stored() {
	r.t.Helper()
	r.h.Flush()
	want := history.Published(r.h)
	ctx := context.Background()
	var n uint64
	err := poll.Check(10*time.Second, 5*time.Millisecond, func() error {
		n = 0
		for _, name := range []string{history.Stream, history.BodiesStream} {
			st, err := r.srv.JetStream().Stream(ctx, name)
			if err != nil {
				r.t.Fatal(err)
			}
			info, err := st.Info(ctx)
			if err != nil {
				r.t.Fatal(err)
			}
			n += info.State.Msgs
		}
		if n != want {
			return poll.ErrTimeout
		}
		return nil
	})
	if err != nil {
		r.t.Fatalf("%d batches stored after 10s, want %d", n, want)
	}
}

func terminal(kind rivorav1.EventOutcome_Kind, id, dest, customer, lane string) *rivorav1.EventOutcome {
	o := &rivorav1.EventOutcome{Kind: kind, EventId: id, DestinationId: dest, CustomerId: customer, LaneKey: lane}
	if kind == rivorav1.EventOutcome_KIND_DELIVERED {
		o.Attempt = &rivorav1.Attempt{Number: 1, StatusCode: 200}
	} else {
		o.Attempts, o.LastStatus, o.LastError = 3, 500, "HTTP 500"
	}
	return o
}

// Lookup finds an event's records in every minute they were written in
// (a retry hours after acceptance), oldest first, and none of the events
// sharing its acceptance minute and shard.
func TestLookupAcrossWriteBuckets(t *testing.T) {
	r := newRig(t)
	accepted := r.now
	var ids []string
	for range 300 { // same minute: many share a shard
		ids = append(ids, v7At(t, accepted))
	}
	target := ids[0]
	for _, id := range ids {
		r.record(failed(id, 1))
	}
	r.later(90 * time.Minute)
	r.record(failed(target, 2))
	r.later(3 * time.Hour)
	r.record(&rivorav1.EventOutcome{Kind: rivorav1.EventOutcome_KIND_DELIVERED, EventId: target, Attempt: &rivorav1.Attempt{Number: 3, StatusCode: 204}})
	r.stored()

	got, err := r.h.Lookup(context.Background(), target)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("Lookup = %d outcomes, want 3 (attempts 1 and 2, then delivered)", len(got))
	}
	for i, o := range got {
		if o.GetEventId() != target || o.GetAttempt().GetNumber() != int32(i+1) {
			t.Fatalf("outcome %d = %s attempt %d; want %s attempt %d", i, o.GetEventId(), o.GetAttempt().GetNumber(), target, i+1)
		}
	}
	sameShard := 0
	for _, id := range ids[1:] {
		if history.Shard(id) == history.Shard(target) {
			sameShard++
			if got, err := r.h.Lookup(context.Background(), id); err != nil || len(got) != 1 {
				t.Fatalf("Lookup(%s, same shard) = %d outcomes, %v; want 1", id, len(got), err)
			}
		}
	}
	if sameShard == 0 {
		t.Fatal("no id shares the target's shard: the test checks nothing")
	}
}

func TestBodyIsTheLatestDelivery(t *testing.T) {
	r := newRig(t)
	id := v7At(t, r.now)
	r.body(&rivorav1.Event{EventId: id, DestinationId: "d1", Payload: []byte(`{"n":1}`)})
	r.body(&rivorav1.Event{EventId: v7At(t, r.now), DestinationId: "d1", Payload: []byte(`{"other":true}`)})
	r.later(2 * time.Hour)
	r.body(&rivorav1.Event{EventId: id, DestinationId: "d1", Payload: []byte(`{"n":2}`), Resent: true})
	r.stored()
	ev, err := r.h.Body(context.Background(), id)
	if err != nil || ev == nil {
		t.Fatalf("Body = %v, %v", ev, err)
	}
	if string(ev.GetPayload()) != `{"n":2}` {
		t.Fatalf("Body payload = %s, want the latest delivery's", ev.GetPayload())
	}
	if ev, err := r.h.Body(context.Background(), v7At(t, r.now)); ev != nil || err != nil {
		t.Fatalf("Body(never delivered) = %v, %v; want nil, nil", ev, err)
	}
}

func TestListNewestFirstWithFilters(t *testing.T) {
	r := newRig(t)
	// A minute apart (in distinct buckets): d1/c1/u1 delivered, d1/c2/u1 dead, d2 delivered,
	// d1/c1/u2 failed (not terminal).
	var want []string // d1 terminal, newest first
	for i := range 5 {
		id := v7At(t, r.now)
		r.record(terminal(rivorav1.EventOutcome_KIND_DELIVERED, id, "d1", "c1", "u1"))
		dead := v7At(t, r.now)
		r.record(terminal(rivorav1.EventOutcome_KIND_DEAD, dead, "d1", "c2", "u1"))
		r.record(terminal(rivorav1.EventOutcome_KIND_DELIVERED, v7At(t, r.now), "d2", "c1", "u1"))
		r.record(failed(v7At(t, r.now), 1))
		want = append([]string{dead, id}, want...)
		if i < 4 {
			r.later(time.Minute)
		}
	}
	r.stored()
	list := func(f history.Filter) history.Listing {
		t.Helper()
		f.Destination = "d1"
		if f.Limit == 0 {
			f.Limit = 100
		}
		l, err := r.h.List(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ids := func(l history.Listing) []string {
		var out []string
		for _, e := range l.Events {
			out = append(out, e.Outcome.GetEventId())
		}
		return out
	}
	if got := ids(list(history.Filter{})); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("List(d1) = %v\nwant newest first %v", got, want)
	}
	if l := list(history.Filter{Delivered: true}); len(l.Events) != 5 || l.Events[0].Outcome.GetEventId() != want[1] {
		t.Fatalf("List(d1, delivered) = %v; want the 5 delivered, newest %s first", ids(l), want[1])
	}
	l := list(history.Filter{Dead: true, Customer: "c2"})
	if len(l.Events) != 5 || l.Events[0].Outcome.GetLastStatus() != 500 || l.Events[0].Outcome.GetAttempts() != 3 {
		t.Fatalf("List(d1, c2, dead) = %v", ids(l))
	}
	if l := list(history.Filter{Customer: "c1", Lane: "u2"}); len(l.Events) != 0 {
		t.Fatalf("List(d1, c1, u2) = %v; want none (only failed attempts there)", ids(l))
	}
	l = list(history.Filter{Limit: 3})
	if !l.Truncated || fmt.Sprint(ids(l)) != fmt.Sprint(want[:3]) {
		t.Fatalf("List(d1, limit 3) = %v truncated %v; want %v truncated", ids(l), l.Truncated, want[:3])
	}
	if l := list(history.Filter{}); l.Truncated || !l.SearchedBackTo.IsZero() {
		t.Fatalf("List(d1) truncated %v, searched back to %v; want the whole history searched", l.Truncated, l.SearchedBackTo)
	}
	// Bounding the records read stops the search at a minute boundary
	// and says where.
	l = list(history.Filter{MaxRecords: 9})
	if len(l.Events) != 4 || l.SearchedBackTo.IsZero() {
		t.Fatalf("List(d1, 9 records) = %v, searched back to %v; want the 2 newest minutes' 4 events and a bound", ids(l), l.SearchedBackTo)
	}
	if got, want := l.SearchedBackTo, history.BucketStart(history.Bucket(r.now.Add(-2*time.Minute))+1); !got.Equal(want) {
		t.Fatalf("SearchedBackTo = %v, want %v", got, want)
	}
	// Until before every record: nothing.
	if l := list(history.Filter{Until: time.Now().Add(-time.Hour)}); len(l.Events) != 0 {
		t.Fatalf("List(until an hour ago) = %v, want none", ids(l))
	}
}

// An event listed by kind is listed by its latest end: one that died and
// was then replayed and delivered is delivered, not dead.
func TestListByKindGoesByTheLatestEnd(t *testing.T) {
	r := newRig(t)
	revived := v7At(t, r.now)
	r.record(terminal(rivorav1.EventOutcome_KIND_DEAD, revived, "d1", "c1", "u1"))
	stillDead := v7At(t, r.now)
	r.record(terminal(rivorav1.EventOutcome_KIND_DEAD, stillDead, "d1", "c1", "u2"))
	r.later(time.Minute)
	r.record(terminal(rivorav1.EventOutcome_KIND_DELIVERED, revived, "d1", "c1", "u1"))
	r.stored()
	ids := func(f history.Filter) []string {
		t.Helper()
		f.Destination, f.Limit = "d1", 100
		l, err := r.h.List(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range l.Events {
			out = append(out, e.Outcome.GetEventId())
		}
		return out
	}
	if got := ids(history.Filter{Dead: true}); !slices.Equal(got, []string{stillDead}) {
		t.Errorf("dead events %v, want only %s (the other was delivered since)", got, stillDead)
	}
	if got := ids(history.Filter{Delivered: true}); !slices.Equal(got, []string{revived}) {
		t.Errorf("delivered events %v, want %s", got, revived)
	}
}

func TestNewDropsTheOldEventsStream(t *testing.T) {
	srv := startNATS(t)
	js := srv.JetStream()
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := history.NewRunning(t, ctx, js, history.Config{}, quiet); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, "EVENTS"); err == nil {
		t.Fatal("EVENTS stream still there after New; want it dropped")
	}
	if _, err := history.NewRunning(t, ctx, js, history.Config{}, quiet); err != nil {
		t.Fatalf("New again (no EVENTS stream): %v", err)
	}
}

// The listing walks back hour by hour: records hours apart come newest
// first, and Since excludes the older ones.
func TestListAcrossHours(t *testing.T) {
	r := newRig(t)
	var ids []string
	for i := range 3 {
		id := v7At(t, r.now)
		r.record(terminal(rivorav1.EventOutcome_KIND_DELIVERED, id, "d1", "c1", "u1"))
		ids = append([]string{id}, ids...)
		if i < 2 {
			r.later(90 * time.Minute)
		}
	}
	r.stored()
	l, err := r.h.List(context.Background(), history.Filter{Destination: "d1", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range l.Events {
		got = append(got, e.Outcome.GetEventId())
	}
	if fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Fatalf("List over 3 hours = %v, want newest first %v", got, ids)
	}
}
