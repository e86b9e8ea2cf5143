package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/poll"
)

// The SDK's retries (same idempotency key) carry an app through a crash and
// restart of the server: no publish fails, nothing acked is lost or
// reordered, and a retried publish is not stored twice.
func TestSDKPublishRidesOutKill9(t *testing.T) {
	d := startDev(t, devOptions{})
	p := newPartner(t)
	createDestination(t, d, "sdk", p, "", &rivorav1.Limits{RatePerSecond: 5000, Burst: 1000})

	// Enough retry budget to span a restart.
	c := sdk.New(d.URL(), sdk.WithHTTPClient(authedHTTP), sdk.WithRetry(12, 100*time.Millisecond))
	pub := newPublished()
	var (
		acked  atomic.Int64
		stop   = make(chan struct{})
		wg     sync.WaitGroup
		errMu  sync.Mutex
		errs   []string
		failed = map[string]bool{}
	)
	for _, lane := range lanesNamed("app", 8) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 400; i++ {
				select {
				case <-stop:
					return
				default:
				}
				payload := payloadFor("sdk", lane, i, 64)
				// Our own key (the SDK would assign one the same way) lets
				// the test recognise an event whose publish failed.
				key := fmt.Sprintf("sdk-%s-%d", lane, i)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				id, err := c.Publish(ctx, sdk.Event{Destination: "sdk", Customer: "app", Lane: lane, Type: "t", Payload: payload, IdempotencyKey: key})
				cancel()
				if err != nil {
					errMu.Lock()
					errs = append(errs, fmt.Sprintf("%s #%d: [%v] %v", lane, i, connect.CodeOf(err), err))
					id := sdk.EventID("sdk", "app", key)
					failed[id] = true
					errMu.Unlock()
					// The event may be stored or not: allowed at the lane's
					// tail, and the lane stops here.
					pub.add("app/"+lane, id, payload)
					return
				}
				pub.add("app/"+lane, id, payload)
				acked.Add(1)
			}
		}()
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	stopAll := sync.OnceFunc(func() { close(stop); <-allDone })
	t.Cleanup(stopAll)

	poll.True(t, "400 acked publishes", 30*time.Second, func() bool { return acked.Load() >= 400 })
	atKill := acked.Load()
	d.Kill9()
	d.Restart()
	poll.True(t, "publishing to go on after the restart", 60*time.Second, func() bool {
		select {
		case <-allDone:
			return true
		default:
			return acked.Load() >= atKill+400
		}
	})
	stopAll()

	errMu.Lock()
	if len(errs) > 0 {
		t.Errorf("%d of 8 publishing loops got an error from the SDK across the kill -9 and restart (the SDK should retry transport failures with the same idempotency key), e.g.:\n  %s",
			len(errs), errs[0])
		for _, e := range errs[1:min(len(errs), 4)] {
			t.Logf("  also: %s", e)
		}
	}
	errMu.Unlock()

	var ids []string
	for _, id := range pub.all() {
		if !failed[id] {
			ids = append(ids, id)
		}
	}
	p.WaitDelivered(t, ids, 60*time.Second)
	rep := checkLaneOrder(t, p, pub.ByLane, pub.Payloads, failed)
	t.Logf("%d events acked (%d before the kill), delivered in order; %d duplicate deliveries", len(ids), atKill, rep.Duplicates)
}
