package owner_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/budget"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// A destination that answers nothing but a server error is down, not the
// events' fault, whatever the status: 503, a crashed app's 500 behind a
// load balancer, a CDN's 520. Its events are retried far beyond
// max_attempts without being charged one, and all arrive once it answers
// 2xx.
func TestDestinationDownCostsNoAttempt(t *testing.T) {
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusInternalServerError, 520} {
		t.Run(strconv.Itoa(status), func(t *testing.T) { destinationDownCostsNoAttempt(t, status) })
	}
}

func destinationDownCostsNoAttempt(t *testing.T, status int) {
	var mu sync.Mutex
	down := true
	p := newPartner(t, status, func(string, int) bool {
		mu.Lock()
		defer mu.Unlock()
		return down
	})
	n := open(t, t.TempDir(), mustDir(t, t.TempDir()), []*rivorav1.Destination{dest("orders", p.URL(), 2)})
	ids := []string{n.publish("orders", "u1"), n.publish("orders", "u1"), n.publish("orders", "u2")}
	n.run(true)
	poll.True(t, "both lane heads sent 4 times (twice max_attempts)", 20*time.Second, func() bool {
		return p.Sent(ids[0]) >= 4 && p.Sent(ids[2]) >= 4
	})
	for _, id := range []string{ids[0], ids[2]} {
		loc, ok := n.sched.Find(id)
		if !ok {
			t.Fatalf("event %s is no longer pending after %d attempts at a destination that is down", id, p.Sent(id))
		}
		if h := loc.Head; h.Attempts != 0 || !h.HeldByDestination || h.LastStatus != status || h.WindowEnd.IsZero() {
			t.Fatalf("event %s head after %d failed tries: %+v; want 0 attempts charged, held by its destination, last status %d, a window end", id, p.Sent(id), h, status)
		}
	}
	if snap := n.sched.Snapshot("orders"); len(snap) != 1 || snap[0].State == budget.Healthy {
		t.Fatalf("a destination failing every request is %v; want degraded or parked", snap)
	}
	mu.Lock()
	down = false
	mu.Unlock()
	poll.True(t, "every event delivered once the destination is back", 20*time.Second, func() bool {
		d := p.DeliveredByLane()
		return len(d["u1"]) == 2 && len(d["u2"]) == 1
	})
	if got := p.DeliveredByLane()["u1"]; got[0] != ids[0] || got[1] != ids[1] {
		t.Fatalf("lane u1 delivered %v, want %v in order", got, ids[:2])
	}
}

// A partner that 503s (or 500s) one payload while it accepts the others
// is otherwise healthy: that event's failures count and it dies after
// max_attempts, reason max attempts.
func TestOnePayloadRefusedOnHealthyDestinationCounts(t *testing.T) {
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusInternalServerError} {
		t.Run(strconv.Itoa(status), func(t *testing.T) { onePayloadRefusedCounts(t, status) })
	}
}

func onePayloadRefusedCounts(t *testing.T, status int) {
	var mu sync.Mutex
	var badID string
	p := newPartner(t, status, func(id string, _ int) bool {
		mu.Lock()
		defer mu.Unlock()
		return id == badID
	})
	archRoot := t.TempDir()
	n := open(t, t.TempDir(), mustDir(t, archRoot), []*rivorav1.Destination{dest("orders", p.URL(), 3)})
	n.run(true)
	// Traffic that the partner accepts, before and between the bad event's
	// attempts.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			n.publish("orders", "good")
			time.Sleep(20 * time.Millisecond)
		}
	}()
	defer wg.Wait()
	defer cancel()
	poll.True(t, "the partner accepting other events", 10*time.Second, func() bool { return len(p.DeliveredByLane()["good"]) >= 10 })
	mu.Lock()
	badID = n.publish("orders", "bad")
	mu.Unlock()
	after := n.publish("orders", "bad")
	poll.True(t, "the bad event dead and its lane moved on", 30*time.Second, func() bool {
		d := p.DeliveredByLane()["bad"]
		return len(d) == 1 && d[0] == after
	})
	if r := p.Sent(badID); r != 3 {
		t.Fatalf("the refused event was sent %d times, want max_attempts = 3", r)
	}
	poll.True(t, "its dead letter archived", 20*time.Second, func() bool {
		return len(findObjects(t, archRoot)) > 0
	})
	var letters []*rivorav1.DeadLetter
	for _, o := range findObjects(t, archRoot) {
		letters = append(letters, readObject(t, o)...)
	}
	if len(letters) != 1 || letters[0].GetEvent().GetEventId() != badID || letters[0].GetAttempts() != 3 ||
		letters[0].GetReason() != rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS || !strings.HasPrefix(letters[0].GetLastError(), fmt.Sprintf("HTTP %d", status)) {
		t.Fatalf("dead letters %v, want one for %s: 3 attempts, max attempts, last error HTTP %d", letters, badID, status)
	}
}

// An event that cannot be sent (a control character in its content type,
// as a dead letter archived before ingest refused one comes back from a
// replay) is the event's fault: it dies after max_attempts without a
// request, while its destination stays healthy at its configured rate and
// another customer's events on it flow.
func TestUnsendableEventIsTheEventsFault(t *testing.T) {
	p := newPartner(t, http.StatusBadRequest, nil)
	archRoot := t.TempDir()
	n := open(t, t.TempDir(), mustDir(t, archRoot), []*rivorav1.Destination{dest("orders", p.URL(), 3)})
	n.run(true)
	poison := &rivorav1.Event{
		EventId: "evt_poison", DestinationId: "orders", CustomerId: "mallory", LaneKey: "m", Type: "t",
		Payload: []byte(`{}`), ContentType: "application/json; x=\"\x01\"", AcceptedAt: timestamppb.Now(),
	}
	if _, _, err := n.gw.Reingest(context.Background(), []*rivorav1.DeadLetter{{Event: poison, DeadAt: timestamppb.Now()}}); err != nil {
		t.Fatalf("reingest: %v", err)
	}
	var others []string
	for range 20 {
		others = append(others, n.publish("orders", "neighbour"))
	}
	poll.True(t, "the neighbour's 20 events delivered", 10*time.Second, func() bool {
		return slices.Equal(p.DeliveredByLane()["neighbour"], others)
	})
	poll.True(t, "the unsendable event dead-lettered", 20*time.Second, func() bool {
		return len(findObjects(t, archRoot)) > 0
	})
	letters := readObject(t, findObjects(t, archRoot)[0])
	if len(letters) != 1 || letters[0].GetEvent().GetEventId() != "evt_poison" || letters[0].GetAttempts() != 3 ||
		letters[0].GetReason() != rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS || letters[0].GetLastStatus() != 0 ||
		!strings.Contains(letters[0].GetLastError(), "Content-Type") {
		t.Fatalf("dead letters %v, want evt_poison after 3 attempts, max attempts, no status, an error naming Content-Type", letters)
	}
	if r := p.Sent("evt_poison"); r != 0 {
		t.Fatalf("the partner got the unsendable event %d times, want 0", r)
	}
	snap := n.sched.Snapshot("orders")
	if len(snap) != 1 || snap[0].State != budget.Healthy || snap[0].CurrentRate != snap[0].ConfiguredRate || snap[0].LastTransition != nil {
		t.Fatalf("destination after an unsendable event: %+v; want healthy at its configured rate, no transition", snap)
	}
}
