package e2e

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/history"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
)

// A publisher choosing idempotency keys cannot make the history's subjects
// grow per event: 20,000 publishes with UUIDv7 keys of random times add
// no more HISTORY and HISTORY_BODIES subjects than 20,000 publishes
// without a key do (subjects grow with time, never with events), and the
// keyed events are still found by id.
func TestHistorySubjectsDoNotGrowWithKeyTimes(t *testing.T) {
	const n, batch = 20_000, 1_000
	natsAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	d := startDev(t, devOptions{Args: []string{"--nats-listen", natsAddr}})
	p := newPartner(t)
	createDestination(t, d, "hs", p, "", &rivorav1.Limits{RatePerSecond: 100_000, Burst: 100_000, MaxInFlight: 512})
	ctx := ctxTimeout(t, 8*time.Minute)

	// subjects counts the literal subjects of both history streams; the
	// records buffered by the writer are published by a graceful stop.
	subjects := func() int {
		t.Helper()
		if err := d.Stop(30 * time.Second); err != nil {
			t.Fatalf("stop rivora dev: %v", err)
		}
		d.Restart()
		nc, err := nats.Connect("nats://"+natsAddr, nats.Timeout(5*time.Second))
		if err != nil {
			t.Fatalf("connect to the embedded NATS: %v", err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, name := range []string{history.Stream, history.BodiesStream} {
			st, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatalf("stream %s: %v", name, err)
			}
			info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
			if err != nil {
				t.Fatalf("stream %s info: %v", name, err)
			}
			total += len(info.State.Subjects)
		}
		return total
	}
	// publish publishes n events, key(i) their idempotency keys, and
	// waits for the partner to have all of them.
	delivered := 0
	publish := func(what string, key func(i int) string) (ids []string, took time.Duration) {
		t.Helper()
		start := time.Now()
		for from := 0; from < n; from += batch {
			req := &rivorav1.PublishBatchRequest{}
			for i := from; i < from+batch; i++ {
				req.Events = append(req.Events, &rivorav1.PublishRequest{
					DestinationId: "hs", CustomerId: "acme", LaneKey: "l" + strconv.Itoa(i%500), Type: "t",
					Payload: []byte(`{}`), IdempotencyKey: key(i),
				})
			}
			resp, err := d.Ingest().PublishBatch(ctx, connect.NewRequest(req))
			if err != nil {
				t.Fatalf("%s: publish batch at %d: %v", what, from, err)
			}
			ids = append(ids, resp.Msg.GetEventIds()...)
		}
		delivered += n
		if err := poll.Check(5*time.Minute, 50*time.Millisecond, func() error {
			if got := p.Delivered(); got < delivered {
				return fmt.Errorf("%s: the partner has %d of %d events", what, got, delivered)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return ids, time.Since(start)
	}

	before := subjects()
	_, unkeyedTook := publish("unkeyed", func(int) string { return "" })
	unkeyed := subjects()
	rng := rand.New(rand.NewPCG(22, 1))
	now := time.Now()
	keyed, keyedTook := publish("keyed", func(int) string {
		// A UUIDv7 key of a random time in the retention (7 days back).
		return v7KeyAt(t, now.Add(-time.Duration(rng.Int64N(int64(history.DefaultRetention)))))
	})
	after := subjects()
	t.Logf("history subjects: %d before, +%d for %d unkeyed publishes (%s), +%d for %d keyed with random-time UUIDv7 keys (%s)",
		before, unkeyed-before, n, unkeyedTook.Round(time.Millisecond), after-unkeyed, n, keyedTook.Round(time.Millisecond))
	// Subjects grow with the write buckets a run spans (5 s outcome, 1 min
	// body buckets, × shards): a run may straddle one more bucket per
	// stream, and a longer run spans more.
	slack := 2 * history.Shards
	if longer := keyedTook - unkeyedTook; longer > 0 {
		slack += history.Shards * int((longer+history.BucketWidth-1)/history.BucketWidth)
	}
	if after-unkeyed > unkeyed-before+slack {
		t.Fatalf("%d keyed publishes added %d history subjects, %d unkeyed ones %d: the keys' times choose subjects", n, after-unkeyed, n, unkeyed-before)
	}

	// The keyed events are still found by id, with their attempt.
	for _, id := range []string{keyed[0], keyed[n/2], keyed[n-1]} {
		start := time.Now()
		resp, err := d.Events().GetEvent(ctx, connect.NewRequest(&rivorav1.GetEventRequest{EventId: id}))
		t.Logf("events get of a keyed event: %s", time.Since(start).Round(time.Millisecond))
		if err != nil {
			t.Fatalf("events get %s: %v", id, err)
		}
		if resp.Msg.GetState() != rivorav1.EventState_EVENT_STATE_DELIVERED || len(resp.Msg.GetAttempts()) != 1 {
			t.Fatalf("events get %s: state %v, %d attempts; want delivered after 1", id, resp.Msg.GetState(), len(resp.Msg.GetAttempts()))
		}
	}
	// And listed: the newest delivered are the keyed ones, newest last.
	list, err := d.Events().ListEvents(ctx, connect.NewRequest(&rivorav1.ListEventsRequest{
		DestinationId: "hs", CustomerId: "acme", State: rivorav1.EventState_EVENT_STATE_DELIVERED, Limit: 50,
	}))
	if err != nil {
		t.Fatalf("events list: %v", err)
	}
	isKeyed := make(map[string]bool, n)
	for _, id := range keyed {
		isKeyed[id] = true
	}
	if got := list.Msg.GetEvents(); len(got) != 50 || !isKeyed[got[0].GetEventId()] || !isKeyed[got[49].GetEventId()] {
		t.Fatalf("events list --state delivered --limit 50: %d events, want 50 of the keyed ones (the newest)", len(got))
	}
}

// v7KeyAt is a UUIDv7 whose time is at.
func v7KeyAt(t testing.TB, at time.Time) string {
	u, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	ms := at.UnixMilli()
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	return u.String()
}
