package edged_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/edge/edged"
	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
)

// An edge joined to a real cell (`rivora dev` in process, its leaf port
// open): it registers with the control plane by its WatchEdge, accepts by
// the redacted config and a publisher token created in the cell, and its
// events are forwarded into the cell and delivered; the control plane
// lists it connected with its buffer empty.
func TestEdgeWithARealCell(t *testing.T) {
	ctx := context.Background()
	leaf, natsAddr := freeAddr(t), freeAddr(t)
	d := rig.StartDev(t, t.TempDir(), rig.Options{Agent: func(c *agent.Config) { c.LeafListen, c.NATSListen = leaf, natsAddr }})
	p := partner.New(t, partner.Options{})
	d.Create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: p.URL()})
	token := d.Token(rivorav1.Role_ROLE_PUBLISHER, "acme")

	e := startEdgeWithKeys(t, edged.Config{
		Name: "edge-cell", DataDir: t.TempDir(), CellLeaf: []string{"nats-leaf://" + leaf}, ControlPlanes: []string{d.URL},
		MaxBuffer: 1 << 20, BufferMaxAge: time.Hour,
	}, auth.NewKeys(d.Cell))
	poll.True(t, "the edge applied the control plane's config", 10*time.Second, func() bool { return e.Healthy() == nil })
	ids := map[string]bool{}
	for range 3 {
		resp, err := e.publish(token, "user-1", []byte(`{"from":"edge"}`))
		if err != nil {
			t.Fatalf("publish through the edge: %v", err)
		}
		ids[resp.GetEventId()] = true
	}
	// The cell forwards the edge's buffer once INGEST has its source
	// (the partition-0 agent keeps INGEST's sources to the registered
	// edges; added here too, which is a no-op when it did). Adding it
	// reads the edge's consumer across the leaf connection, which a
	// healthy edge (its config applied) need not have up yet: under load
	// the read found no responders, so await the cell reaching the edge.
	nc, err := nats.Connect("nats://" + natsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	addSourceOnceReachable(t, js, "edge-cell")
	poll.True(t, "the partner received every event published through the edge", 30*time.Second, func() bool {
		for id := range ids {
			if p.OK(id) == 0 {
				return false
			}
		}
		return true
	})
	poll.True(t, "the control plane lists the edge connected, its buffer empty", 15*time.Second, func() bool {
		resp, err := d.Admin.GetEdge(ctx, connect.NewRequest(&rivorav1.GetEdgeRequest{Name: "edge-cell"}))
		if err != nil {
			return false
		}
		st := resp.Msg.GetEdge()
		return st.GetConnected() && st.GetBuffer().GetBufferedEvents() == 0 && st.GetBuffer().GetForwardedTotal() == 3
	})
}
