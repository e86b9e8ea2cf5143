package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/subscriptions"
	"github.com/rivora/rivora/edge"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/ports"
	"github.com/rivora/rivora/testkit/rig"
)

// cutEdge is an edge joined to a cell's leaf port that has not
// registered with the control plane yet: the cell does not source its
// buffer, so what it accepts stays there, as during a cut, until
// register. Its gateway accepts by reg and stamps applied, the config it
// last applied (the cell's may have moved on meanwhile).
type cutEdge struct {
	t       *testing.T
	d       *rig.Dev
	name    string
	reg     *destinations.Registry
	applied atomic.Uint64
	gw      *ingest.Gateway
}

// startCutEdge starts edge name beside d, which listens for edges on
// leaf.
func startCutEdge(t *testing.T, d *rig.Dev, leaf, name string) *cutEdge {
	t.Helper()
	ctx := context.Background()
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
	e := &cutEdge{t: t, d: d, name: name, reg: destinations.NewRegistry()}
	e.gw, err = ingest.New(ctx, srv.JetStream(), e.reg, ingest.Config{
		Partitions: ingest.FixedCount(4), Subscriptions: subscriptions.NewTable(), Applied: e.applied.Load,
		Edge: &ingest.EdgeTarget{Name: name, Buffer: buf.Incarnation()},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// knows makes the edge's config, version v, the destination id at url,
// made by version created (as the control plane's feed has it).
func (e *cutEdge) knows(v uint64, id, url string, created uint64) {
	e.t.Helper()
	e.reg.Replace(time.Now(), []*rivorav1.Destination{{Id: id, Url: url, Secret: secret, CreatedVersion: created}})
	e.applied.Store(v)
}

// publish publishes n events to dest through the edge, over lanes l0..l3,
// and returns their ids.
func (e *cutEdge) publish(dest string, n int) []string {
	e.t.Helper()
	var ids []string
	for i := range n {
		resp, err := e.gw.Publish(context.Background(), connect.NewRequest(&rivorav1.PublishRequest{
			DestinationId: dest, CustomerId: "acme", LaneKey: fmt.Sprint("l", i%4), Type: "t", Payload: fmt.Appendf(nil, `{"n":%d}`, i),
		}))
		if err != nil {
			e.t.Fatalf("publish %d to %s at the edge: %v", i, dest, err)
		}
		ids = append(ids, resp.Msg.GetEventId())
	}
	return ids
}

// register has the edge watch the control plane, as it does once its
// link is back: the cell sources its buffer from then on.
func (e *cutEdge) register() {
	e.t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	e.t.Cleanup(stop)
	edges := rivorav1connect.NewEdgeServiceClient(e.d.HTTPClient(), e.d.URL, e.d.As(e.d.Cell.String()))
	stream, err := edges.WatchEdge(ctx, connect.NewRequest(&rivorav1.WatchEdgeRequest{EdgeName: e.name}))
	if err != nil {
		e.t.Fatal(err)
	}
	if !stream.Receive() {
		e.t.Fatalf("WatchEdge: %v", stream.Err())
	}
	poll.True(e.t, "INGEST sources the registered edge", 15*time.Second, func() bool { return edgeSourced(e.t, e.d.Agent, e.name) })
}

// startEdgeCell is `rivora dev` with a leaf port for edges.
func startEdgeCell(t *testing.T) (*rig.Dev, string) {
	t.Helper()
	leaf, err := ports.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return rig.StartDev(t, t.TempDir(), rig.Options{Agent: func(c *agent.Config) { c.LeafListen = leaf }}), leaf
}

// configVersion is the control plane's config version now.
func configVersion(t *testing.T, d *rig.Dev) uint64 {
	t.Helper()
	resp, err := d.Admin.GetConfigStatus(context.Background(), connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg.GetVersion()
}

// deleteDestination deletes id at the cell and waits for the agent.
func deleteDestination(t *testing.T, d *rig.Dev, id string) {
	t.Helper()
	resp, err := d.Admin.DeleteDestination(context.Background(), connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: id}))
	if err != nil {
		t.Fatalf("delete %s: %v", id, err)
	}
	d.WaitApplied(resp.Msg.GetVersion())
}

// awaitDeadDeleted waits until every event of ids is a dead letter with
// reason deleted, as `events get` tells.
func awaitDeadDeleted(t *testing.T, d *rig.Dev, ids []string) {
	t.Helper()
	left := slices.Clone(ids)
	var last *rivorav1.GetEventResponse
	err := poll.Check(30*time.Second, 50*time.Millisecond, func() error {
		for len(left) > 0 {
			resp, err := d.Events.GetEvent(context.Background(), connect.NewRequest(&rivorav1.GetEventRequest{EventId: left[0]}))
			if err != nil {
				return err
			}
			last = resp.Msg
			if last.GetState() != rivorav1.EventState_EVENT_STATE_DEAD {
				return fmt.Errorf("%d of %d events not dead yet (%s: %v, %q)", len(left), len(ids), left[0], last.GetState(), last.GetWaiting())
			}
			if last.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_DELETED {
				t.Fatalf("event %s died with reason %v, want deleted", left[0], last.GetDeadReason())
			}
			left = left[1:]
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the events of a deleted destination are not dead letters (reason deleted): %v", err)
	}
}

// An edge accepts events for a destination that was deleted at the cell
// while the edge was cut off (it still had it in its config). Once the
// edge's link returns they reach the cell, and each becomes a dead letter
// with reason deleted, archived: not stranded in lanes nobody delivers,
// and never delivered to a destination made later under the same id (it
// may be another customer's). An operator who makes it again on purpose
// replays them to it.
func TestEdgeEventsOfADestinationDeletedDuringACutAreDeadLetters(t *testing.T) {
	d, leaf := startEdgeCell(t)
	old := partner.New(t, partner.Options{})
	v := d.Create(&rivorav1.CreateDestinationRequest{Id: "d2", Url: old.URL()})
	e := startCutEdge(t, d, leaf, "lyon")
	e.knows(v, "d2", old.URL(), v)

	deleteDestination(t, d, "d2")
	ids := e.publish("d2", 40)
	e.register()
	awaitDeadDeleted(t, d, ids)
	poll.True(t, "the dead letters archived", 20*time.Second, func() bool {
		_, letters := deadLetters(t, d.Dir, "d2")
		return len(letters) == len(ids)
	})

	fresh := partner.New(t, partner.Options{})
	d.Create(&rivorav1.CreateDestinationRequest{Id: "d2", Url: fresh.URL()})
	resp, err := d.Ingest.Publish(context.Background(), connect.NewRequest(&rivorav1.PublishRequest{DestinationId: "d2", CustomerId: "acme", LaneKey: "l0", Type: "t", Payload: []byte(`{}`)}))
	if err != nil {
		t.Fatal(err)
	}
	fresh.WaitDelivered(t, []string{resp.Msg.GetEventId()}, 15*time.Second)
	if n, m := old.Count(), fresh.Count(); n != 0 || m != 1 {
		t.Fatalf("the old partner got %d requests, the new one %d: want none of the edge's events anywhere, and the new destination's own", n, m)
	}

	archive := rivorav1connect.NewArchiveServiceClient(d.HTTPClient(), d.URL, d.As(d.AdminToken))
	stream, err := archive.Replay(context.Background(), connect.NewRequest(&rivorav1.ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "d2"}}))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("replay: %v", err)
	}
	fresh.WaitDelivered(t, ids, 30*time.Second)
}

// A destination deleted and made again under the same id while an edge
// was cut off: what the edge accepted under its older config was for
// the deleted one. It becomes a dead letter (reason deleted); the new
// destination gets none of it, only what is published for it.
func TestEdgeEventsOfADestinationMadeAgainDuringACutAreNotDeliveredToIt(t *testing.T) {
	d, leaf := startEdgeCell(t)
	old := partner.New(t, partner.Options{})
	v := d.Create(&rivorav1.CreateDestinationRequest{Id: "d3", Url: old.URL()})
	e := startCutEdge(t, d, leaf, "lyon")
	e.knows(v, "d3", old.URL(), v)

	deleteDestination(t, d, "d3")
	fresh := partner.New(t, partner.Options{})
	d.Create(&rivorav1.CreateDestinationRequest{Id: "d3", Url: fresh.URL()})
	ids := e.publish("d3", 20)
	e.register()
	awaitDeadDeleted(t, d, ids)
	resp, err := d.Ingest.Publish(context.Background(), connect.NewRequest(&rivorav1.PublishRequest{DestinationId: "d3", CustomerId: "acme", LaneKey: "l0", Type: "t", Payload: []byte(`{}`)}))
	if err != nil {
		t.Fatal(err)
	}
	fresh.WaitDelivered(t, []string{resp.Msg.GetEventId()}, 15*time.Second)
	if n, m := old.Count(), fresh.Count(); n != 0 || m != 1 {
		t.Fatalf("the old partner got %d requests, the new one %d: want none of the edge's events anywhere, and the new destination's own", n, m)
	}
}

// An edge's event for a destination the cell has not heard of yet (the
// edge applied a newer config than the cell's agent: it was made there
// first) is not taken for a deleted destination's: it waits, judged and
// not dead, and is delivered once the cell's agent has the config.
func TestEdgeEventOfADestinationNotKnownYetWaitsForIt(t *testing.T) {
	d, leaf := startEdgeCell(t)
	p := partner.New(t, partner.Options{})
	e := startCutEdge(t, d, leaf, "lyon")
	e.register()
	next := configVersion(t, d) + 1
	e.knows(next, "later", p.URL(), next)
	ids := e.publish("later", 1)
	poll.True(t, "the owner judged the event and let it wait", 20*time.Second, func() bool {
		loc, ok := d.Agent.Scheduler().Find(ids[0])
		return ok && !loc.Head.NotBefore.IsZero()
	})
	if got, err := d.Events.GetEvent(context.Background(), connect.NewRequest(&rivorav1.GetEventRequest{EventId: ids[0]})); err != nil || got.Msg.GetState() != rivorav1.EventState_EVENT_STATE_PENDING {
		t.Fatalf("events get of the waiting event: %v, %v; want pending", got, err)
	}
	if v := d.Create(&rivorav1.CreateDestinationRequest{Id: "later", Url: p.URL()}); v != next {
		t.Fatalf("the destination was made by config version %d, the test expected %d", v, next)
	}
	p.WaitDelivered(t, ids, 15*time.Second)
}
