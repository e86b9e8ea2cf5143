package agent_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/subscriptions"
	"github.com/rivora/rivora/edge"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/ports"
	"github.com/rivora/rivora/testkit/rig"
)

// edgeSourced tells whether the agent's INGEST sources edge name's buffer.
func edgeSourced(t *testing.T, a *agent.Agent, name string) bool {
	t.Helper()
	s, err := a.JetStream().Stream(context.Background(), lanes.IngestStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(info.Config.Sources, func(src *jetstream.StreamSource) bool {
		n, ok := edge.SourceEdge(src)
		return ok && n == name
	})
}

// A cell's agent (partition 0's) gives INGEST a source for an edge once
// the edge registered with the control plane (its first WatchEdge), and
// takes it away once the edge is removed. Through that source, across a
// real leaf connection, the edge's events reach the partition owner: a
// key published at the cell and again through the edge is one event, and
// the edge's events of a lane are delivered in publish order.
func TestTheCellSourcesARegisteredEdge(t *testing.T) {
	ctx := context.Background()
	leaf, err := ports.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	d := rig.StartDev(t, t.TempDir(), rig.Options{Agent: func(c *agent.Config) { c.LeafListen = leaf }})
	p := partner.New(t, partner.Options{})
	d.Create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: p.URL()})
	publish := func(ingest interface {
		Publish(context.Context, *connect.Request[rivorav1.PublishRequest]) (*connect.Response[rivorav1.PublishResponse], error)
	}, key, payload string) string {
		t.Helper()
		resp, err := ingest.Publish(ctx, connect.NewRequest(&rivorav1.PublishRequest{
			DestinationId: "orders", CustomerId: "acme", LaneKey: "u1", Type: "t", Payload: []byte(payload), IdempotencyKey: key,
		}))
		if err != nil {
			t.Fatalf("publish %s: %v", key, err)
		}
		return resp.Msg.GetEventId()
	}
	first := publish(d.Ingest, "k-1", `{"n":1}`)
	p.WaitDelivered(t, []string{first}, 15*time.Second)

	// The edge: its own server and domain, joined to the cell's leaf port,
	// its buffer, and a gateway in edge mode.
	const name = "edge-x"
	srv, err := natsd.Start(natsd.Config{
		Name: name, Domain: edge.Domain(name), DataDir: t.TempDir(),
		LeafRemotes: []string{"nats-leaf://" + leaf}, LeafPassword: agent.LeafPassword(d.Cell),
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	poll.True(t, "the edge joined the cell", 20*time.Second, func() bool { return srv.LeafConnections() == 1 })
	buf, err := edge.Open(ctx, srv.JetStream(), edge.Config{Name: name, MaxBytes: 1 << 20, DedupWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	reg := destinations.NewRegistry()
	reg.Replace(time.Now(), []*rivorav1.Destination{{Id: "orders", Url: p.URL(), Secret: secret}})
	gw, err := ingest.New(ctx, srv.JetStream(), reg, ingest.Config{
		Partitions: ingest.FixedCount(4), Subscriptions: subscriptions.NewTable(), Edge: &ingest.EdgeTarget{Name: name, Buffer: buf.Incarnation()},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	again := publish(gw, "k-1", `{"n":1}`)
	if again != first {
		t.Fatalf("the edge named k-1 %s, the cell %s", again, first)
	}
	var ids []string
	for _, k := range []string{"k-2", "k-3", "k-4"} {
		ids = append(ids, publish(gw, k, `{"from":"edge"}`))
	}
	if edgeSourced(t, d.Agent, name) {
		t.Fatal("INGEST sources an edge that never registered")
	}

	// The edge registers: it watches the control plane.
	watchCtx, stopWatch := context.WithCancel(ctx)
	t.Cleanup(stopWatch)
	edges := rivorav1connect.NewEdgeServiceClient(d.HTTPClient(), d.URL, d.As(d.Cell.String()))
	stream, err := edges.WatchEdge(watchCtx, connect.NewRequest(&rivorav1.WatchEdgeRequest{EdgeName: name}))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatalf("WatchEdge: %v", stream.Err())
	}
	poll.True(t, "INGEST sources the registered edge", 15*time.Second, func() bool { return edgeSourced(t, d.Agent, name) })
	p.WaitDelivered(t, ids, 30*time.Second)
	if got, want := p.DeliveredByLane()["u1"], append([]string{first}, ids...); !slices.Equal(got, want) {
		t.Fatalf("lane u1 delivered %v, want %v: once each, in publish order", got, want)
	}
	poll.True(t, "the edge's buffer emptied", 15*time.Second, func() bool { return bufferEmpty(ctx, srv) })

	stopWatch()
	if _, err := d.Admin.RemoveEdge(ctx, connect.NewRequest(&rivorav1.RemoveEdgeRequest{Name: name, Force: true})); err != nil {
		t.Fatal(err)
	}
	poll.True(t, "INGEST no longer sources the removed edge", 15*time.Second, func() bool { return !edgeSourced(t, d.Agent, name) })
}

// bufferEmpty reads the edge's buffer's message count afresh.
func bufferEmpty(ctx context.Context, srv *natsd.Server) bool {
	s, err := srv.JetStream().Stream(ctx, edge.StreamName)
	if err != nil {
		return false
	}
	info, err := s.Info(ctx)
	return err == nil && info.State.Msgs == 0
}
