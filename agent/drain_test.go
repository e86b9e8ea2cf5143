package agent_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rivora/rivora/agent"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/rig"
)

// A stop waits for attempts in flight only so long (DrainAttemptsWait):
// a partner holding a request for the whole of a long attempt timeout
// does not hold the agent's stop past its supervisor's kill timeout. The
// abandoned attempt's event is sent again after the restart.
func TestAStopDoesNotWaitOutAHangingPartner(t *testing.T) {
	var hang atomic.Bool
	hang.Store(true)
	var answered atomic.Int32
	arrived, release := make(chan string, 8), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang.Load() {
			arrived <- r.Header.Get("Webhook-Id")
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		answered.Add(1)
	}))
	defer srv.Close()
	defer close(release)

	dir := t.TempDir()
	opts := rig.Options{Name: agentName, Workers: 8, Agent: func(c *agent.Config) { c.DrainAttemptsWait = 200 * time.Millisecond }}
	r := &running{Dev: rig.StartDev(t, dir, opts), t: t}
	d := destination("slow", srv.URL, 5)
	d.Limits.Timeout = durationpb.New(5 * time.Minute)
	r.create(d)
	id := r.publish("slow", "c1", "u1")
	if got := <-arrived; got != id {
		t.Fatalf("the partner got %q, want %s", got, id)
	}
	// The partner holds the request until the test ends: a stop that
	// waited for it would not return within the minute (its timeout is
	// five), far above the 200 ms the drain waits.
	stopped := make(chan struct{})
	go func() {
		r.stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(time.Minute):
		t.Fatal("the stop waited for an attempt the partner holds (its timeout is 5 minutes; the drain waits 200 ms)")
	}
	if n := answered.Load(); n != 0 {
		t.Fatalf("the partner answered %d requests before the stop returned", n)
	}

	hang.Store(false)
	r = &running{Dev: rig.StartDev(t, dir, opts), t: t}
	defer r.stop()
	r.waitEvent(id, "delivered after the restart", func(e *rivorav1.GetEventResponse) bool {
		return e.GetState() == rivorav1.EventState_EVENT_STATE_DELIVERED
	})
}
