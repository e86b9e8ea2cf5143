package agent_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
)

// Two partners that hold every request, each allowed as many in flight as
// there are delivery workers, do not take every worker: a third
// destination's event is delivered while they still hold theirs.
func TestSlowPartnersLeaveWorkersToOthers(t *testing.T) {
	const workers = 8
	r := &running{Dev: rig.StartDev(t, t.TempDir(), rig.Options{Name: agentName, Workers: workers}), t: t}
	release := make(chan struct{})
	var held atomic.Int32
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		held.Add(1)
		select {
		case <-release:
		case <-req.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	fast := newPartner(t, func(partner.Request) int { return 200 })
	for _, id := range []string{"slow1", "slow2"} {
		d := destination(id, slow.URL+"/"+id, 3)
		d.Limits.MaxInFlight = workers
		d.Limits.Timeout = nil // the default, 10 s: longer than the fast event may take
		r.create(d)
	}
	r.create(destination("fast", fast.URL(), 3))
	for i := range 2 * workers {
		r.publish("slow1", "c1", fmt.Sprintf("u%d", i))
		r.publish("slow2", "c1", fmt.Sprintf("u%d", i))
	}
	poll.True(t, "the slow partners hold their requests", 10*time.Second, func() bool {
		return held.Load() >= workers-workers/8
	})
	id := r.publish("fast", "c1", "u1")
	fast.WaitDelivered(t, []string{id}, 5*time.Second)
	if n := held.Load(); n > workers-workers/8 {
		t.Errorf("the slow partners got %d requests; want at most %d, the rest of the %d workers kept for others", n, workers-workers/8, workers)
	}
}
