package owner_test

import (
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
)

// A 410 Gone is not counted against the event: answered more often than
// max_attempts, the head is neither dead-lettered nor charged, and it is
// delivered, before the rest of its lane, once the partner takes it. (The
// agent pauses the destination on a 410; this node's worker does not, so
// the head is offered again at once.)
func TestGoneDoesNotCountAttempts(t *testing.T) {
	const gone = 5
	var mu sync.Mutex
	var head string
	p := newPartner(t, http.StatusGone, func(id string, n int) bool {
		mu.Lock()
		defer mu.Unlock()
		return id == head && n <= gone
	})
	archRoot := t.TempDir()
	n := open(t, t.TempDir(), mustDir(t, archRoot), []*rivorav1.Destination{dest("orders", p.URL(), 2)})
	mu.Lock()
	head = n.publish("orders", "u1")
	mu.Unlock()
	next := n.publish("orders", "u1")
	n.run(true)
	poll.True(t, "both events delivered in lane order", 10*time.Second, func() bool {
		return slices.Equal(p.DeliveredByLane()["u1"], []string{head, next})
	})
	if r := p.Sent(head); r != gone+1 {
		t.Fatalf("head sent %d times, want %d answers 410 then one 2xx", r, gone+1)
	}
	if objs := findObjects(t, archRoot); len(objs) != 0 {
		t.Fatalf("a 410 dead-lettered events: %v", objs)
	}
}
