package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// 300 events over 30 lanes and 3 destinations: every one delivered, signed
// with its destination's secret, and FIFO within its lane.
func TestDeliveryAcrossLanesAndDestinations(t *testing.T) {
	d := startDev(t, devOptions{})
	c := d.SDK()

	type destCase struct {
		id      string
		p       *partner.Partner
		pub     *published
		lanes   []string
		generic bool // let the server generate the secret
	}
	var dests []*destCase
	for i := range 3 {
		dc := &destCase{id: fmt.Sprintf("dest-%d", i), p: newPartner(t), pub: newPublished(), generic: i == 2}
		secret := ""
		if !dc.generic {
			s, err := webhook.NewSecret()
			if err != nil {
				t.Fatal(err)
			}
			secret = s
		}
		createDestination(t, d, dc.id, dc.p, secret, nil)
		dc.lanes = lanesNamed(fmt.Sprintf("user%d", i), 10)
		dests = append(dests, dc)
	}

	var wg sync.WaitGroup
	errs := make(chan error, len(dests))
	ctx := ctxTimeout(t, 2*time.Minute)
	for _, dc := range dests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- publishLanesErr(ctx, c, plan{Destination: dc.id, Customer: "cust_" + dc.id, Lanes: dc.lanes, PerLane: 10, PayloadSize: 200}, dc.pub)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	total := 0
	for _, dc := range dests {
		ids := dc.pub.all()
		if len(ids) != 100 {
			t.Fatalf("%s: %d events acked, want 100", dc.id, len(ids))
		}
		total += len(ids)
		dc.p.WaitDelivered(t, ids, 60*time.Second)
	}
	for _, dc := range dests {
		rep := checkLaneOrder(t, dc.p, dc.pub.ByLane, dc.pub.Payloads, nil)
		if rep.Lanes != 10 || rep.Events != 100 {
			t.Errorf("%s: checked %d lanes / %d events, want 10 / 100", dc.id, rep.Lanes, rep.Events)
		}
		t.Logf("%s: %d events over %d lanes delivered in order, %d requests, %d duplicates",
			dc.id, rep.Events, rep.Lanes, dc.p.Count(), rep.Duplicates)
	}
	if total != 300 {
		t.Fatalf("published %d events, want 300", total)
	}

	// A graceful stop after the work is done exits 0.
	stopStart := time.Now()
	if err := d.Stop(30 * time.Second); err != nil {
		t.Errorf("SIGTERM: rivora dev exited with %v, want a clean exit", err)
	}
	t.Logf("SIGTERM: clean exit after %s", time.Since(stopStart).Round(time.Millisecond))
}

// 200 events published while their destination answers 503 are all acked; a
// second, healthy destination keeps flowing meanwhile; after recovery the 200
// arrive in lane order within 40 s.
func TestFailingDestinationIsolatedAndRecovers(t *testing.T) {
	d := startDev(t, devOptions{})
	c := d.SDK()

	down, up := newPartner(t), newPartner(t)
	down.SetStatus(http.StatusServiceUnavailable)
	createDestination(t, d, "down", down, "", nil)
	createDestination(t, d, "up", up, "", nil)

	// 200 events over 20 lanes, sent as 10 batches holding one event per
	// lane, so publish order within each lane is the batch order.
	lanes := lanesNamed("acct", 20)
	downPub := newPublished()
	ctx := ctxTimeout(t, 2*time.Minute)
	for round := range 10 {
		batch := make([]sdk.Event, len(lanes))
		for i, lane := range lanes {
			batch[i] = sdk.Event{
				Destination: "down", Customer: "cust-down", Lane: lane, Type: "order.updated",
				Payload: payloadFor("down", lane, round, 128), ContentType: "application/json",
			}
		}
		ids, err := c.PublishBatch(ctx, batch)
		if err != nil {
			t.Fatalf("PublishBatch round %d while destination answers 503: %v", round, err)
		}
		if len(ids) != len(batch) {
			t.Fatalf("PublishBatch round %d: %d ids for %d events", round, len(ids), len(batch))
		}
		for i, id := range ids {
			if id == "" {
				t.Fatalf("PublishBatch round %d: empty id at %d", round, i)
			}
			downPub.add("cust-down/"+lanes[i], id, batch[i].Payload)
		}
	}
	downIDs := downPub.all()
	if len(downIDs) != 200 {
		t.Fatalf("%d events acked, want 200", len(downIDs))
	}

	// The failing destination is being tried (and failing) while the
	// healthy one flows: a first wave right away, a second at the end of a
	// 10 s outage in which every lane head failed at least twice (long
	// enough for backoff, halved budget and probe mode to set in).
	poll.True(t, "first attempts at the failing destination", 30*time.Second, func() bool { return down.Count() > 0 })
	outage := time.Now()
	upPub := newPublished()
	wave := func(n int) {
		t.Helper()
		before := len(upPub.all())
		start := time.Now()
		publishLanes(t, c, plan{Destination: "up", Customer: "cust-up", Lanes: lanesNamed(fmt.Sprintf("w%d-u", n), 10), PerLane: 5, PayloadSize: 128}, upPub)
		ids := upPub.all()[before:]
		up.WaitDelivered(t, ids, 15*time.Second)
		t.Logf("healthy destination, wave %d: %d events published and delivered in %s while the other answered 503 (%d failed attempts so far)",
			n, len(ids), time.Since(start).Round(time.Millisecond), down.Count())
	}
	wave(1)
	heads := make([]string, 0, len(lanes))
	for _, lane := range lanes {
		heads = append(heads, downPub.ByLane["cust-down/"+lane][0])
	}
	poll.True(t, "a 10 s outage with every lane head failing twice", 60*time.Second, func() bool {
		for _, h := range heads {
			if down.Sent(h) < 2 {
				return false
			}
		}
		return time.Since(outage) >= 10*time.Second
	})
	wave(2)
	checkLaneOrder(t, up, upPub.ByLane, upPub.Payloads, nil)

	// Recovery.
	failedAttempts := down.Count()
	down.SetHealthy()
	recovered := time.Now()
	down.WaitDelivered(t, downIDs, 40*time.Second)
	t.Logf("failing destination: %d failed attempts while down; all 200 delivered %s after recovery",
		failedAttempts, time.Since(recovered).Round(time.Millisecond))
	rep := checkLaneOrder(t, down, downPub.ByLane, downPub.Payloads, nil)
	t.Logf("failing destination: %d lanes in order, %d duplicates", rep.Lanes, rep.Duplicates)
}

// kill -9 mid-delivery, restart on the same data dir: every acked event is
// delivered and no lane is reordered. Besides a backlog of 1000 events being
// delivered, a few lanes keep publishing through the kill and the restart:
// what was acked must arrive, in order.
func TestKill9MidDeliveryLosesNothing(t *testing.T) {
	d := startDev(t, devOptions{})
	c := d.SDK()

	p := newPartner(t)
	p.SetDelay(10 * time.Millisecond)
	createDestination(t, d, "crashy", p, "", &rivorav1.Limits{RatePerSecond: 150, Burst: 20})
	lp := newPartner(t)
	createDestination(t, d, "crashy-live", lp, "", &rivorav1.Limits{RatePerSecond: 2000, Burst: 100})

	pub := newPublished()
	publishLanes(t, c, plan{Destination: "crashy", Customer: "cust", Lanes: lanesNamed("lane", 50), PerLane: 20, PayloadSize: 256}, pub)
	ids := pub.all()
	if len(ids) != 1000 {
		t.Fatalf("%d events acked, want 1000", len(ids))
	}

	// Live lanes: publish every 25 ms until told to stop. A publish that
	// fails may or may not have stored its event: it is allowed to be
	// missing, and the lane goes on with the next event.
	live := newPublished()
	var (
		maybeMu  sync.Mutex
		maybe    = map[string]bool{}
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		firstErr atomic.Value
	)
	// Retries span a restart (the default budget is about a second).
	lc := sdk.New(d.URL(), sdk.WithHTTPClient(authedHTTP), sdk.WithRetry(12, 100*time.Millisecond))
	for _, lane := range lanesNamed("live", 10) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(25 * time.Millisecond)
			defer tick.Stop()
			for i := 0; i < 2000; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				key := fmt.Sprintf("live-%s-%d", lane, i)
				payload := payloadFor("crashy-live", lane, i, 64)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				id, err := lc.Publish(ctx, sdk.Event{Destination: "crashy-live", Customer: "live", Lane: lane, Type: "t", Payload: payload, IdempotencyKey: key})
				cancel()
				if err != nil {
					firstErr.CompareAndSwap(nil, err.Error())
					id = sdk.EventID("crashy-live", "live", key)
					maybeMu.Lock()
					maybe[id] = true
					maybeMu.Unlock()
				}
				live.add("live/"+lane, id, payload)
			}
		}()
	}
	stopLive := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopLive)

	poll.True(t, "a third of the events to arrive", 60*time.Second, func() bool { return p.Delivered() >= len(ids)/3 })
	liveAtKill := len(live.all())
	d.Kill9()
	atKill := p.Delivered()
	if atKill >= len(ids) {
		t.Fatalf("all %d events were delivered before the kill; the test did not crash mid-delivery", len(ids))
	}
	t.Logf("killed with SIGKILL after %d of %d backlog events delivered, %d live events published", atKill, len(ids), liveAtKill)

	d.Restart()
	poll.True(t, "live publishing to go on after the restart", 30*time.Second, func() bool { return len(live.all()) >= liveAtKill+100 })
	stopLive()

	p.WaitDelivered(t, ids, 90*time.Second)
	rep := checkLaneOrder(t, p, pub.ByLane, pub.Payloads, nil)
	t.Logf("backlog after restart: %d events over %d lanes delivered, %d requests, %d duplicate deliveries",
		rep.Events, rep.Lanes, p.Count(), p.Duplicates())

	var liveAcked []string
	for _, id := range live.all() {
		if !maybe[id] {
			liveAcked = append(liveAcked, id)
		}
	}
	lp.WaitDelivered(t, liveAcked, 60*time.Second)
	lrep := checkLaneOrder(t, lp, live.ByLane, live.Payloads, maybe)
	maybeDelivered := 0
	for id := range maybe {
		if lp.OK(id) > 0 {
			maybeDelivered++
		}
	}
	t.Logf("live lanes: %d acked events delivered in order across the kill, %d publishes failed (%d of those stored anyway; first error: %v), %d duplicate deliveries",
		len(liveAcked), len(maybe), maybeDelivered, firstErr.Load(), lrep.Duplicates)
}

// waitEventState polls GetEvent until the event reaches want.
func waitEventState(t testing.TB, d *devProc, id string, want rivorav1.EventState, timeout time.Duration) *rivorav1.GetEventResponse {
	t.Helper()
	var last *rivorav1.GetEventResponse
	var lastErr error
	err := poll.Check(timeout, 50*time.Millisecond, func() error {
		resp, err := d.Events().GetEvent(ctxTimeout(t, 5*time.Second), connect.NewRequest(&rivorav1.GetEventRequest{EventId: id}))
		if err != nil {
			lastErr = err
			return err
		}
		last, lastErr = resp.Msg, nil
		if resp.Msg.GetState() != want {
			return errNotYet
		}
		return nil
	})
	if err != nil {
		t.Fatalf("GetEvent %s: state %v (err %v), want %v within %s", id, last.GetState(), lastErr, want, timeout)
	}
	return last
}
