package agent_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/internal/eventually"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// TestBrokenPartitionIsUnhealthyUntilBack breaks a partition's lane store
// for real (the stream is sealed: writes fail, and it cannot be created
// again as a lane store): the partition fails, /healthz's answer
// (Agent.Healthy) names it while it cannot reopen, and once the store can
// be made again (the sealed stream removed, as an operator would) the
// partition reopens by itself and the agent is healthy and delivering.
func TestBrokenPartitionIsUnhealthyUntilBack(t *testing.T) {
	partner := newPartner(t, func(request, int) int { return 200 })
	r := startAgent(t, t.TempDir())
	r.create(destination("hz", partner.srv.URL, 5))
	if err := r.Agent.Healthy(); err != nil {
		t.Fatalf("Healthy before anything broke: %v", err)
	}
	p := lanes.Partition("hz", 4)
	js := r.Agent.JetStream()
	ctx := context.Background()
	stream, err := js.Stream(ctx, lanes.LanesStream(p))
	if err != nil {
		t.Fatalf("lane store of partition %d: %v", p, err)
	}
	cfg := stream.CachedInfo().Config
	cfg.Sealed = true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("seal %s: %v", cfg.Name, err)
	}

	// The next write into the partition fails (the publish answers
	// Unavailable, or lands in INGEST if the partition already stopped),
	// and so does every reopen.
	_, _ = r.Ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{
		DestinationId: "hz", CustomerId: "acme", LaneKey: "u1", Type: "test.event", Payload: []byte(`{}`),
	}))
	want := "partition " + strconv.Itoa(p)
	var reason string
	eventually.True(t, "healthz reports the broken partition", 10*time.Second, func() bool {
		err := r.Agent.Healthy()
		if err != nil {
			reason = err.Error()
		}
		return err != nil && strings.Contains(reason, want)
	})
	t.Logf("healthz while broken: %s", reason)
	if err := r.Agent.Healthy(); err == nil {
		t.Fatalf("healthy again while the lane store is still sealed")
	}
	if err := js.DeleteStream(ctx, cfg.Name); err != nil && err != jetstream.ErrStreamNotFound {
		t.Fatalf("remove the sealed stream: %v", err)
	}
	eventually.True(t, "healthy once the partition reopened by itself", 10*time.Second, func() bool { return r.Agent.Healthy() == nil })
	id := r.publish("hz", "acme", "u2")
	r.waitEvent(id, "delivered after the partition came back", func(ev *rivorav1.GetEventResponse) bool {
		return ev.GetState() == rivorav1.EventState_EVENT_STATE_DELIVERED
	})
}
