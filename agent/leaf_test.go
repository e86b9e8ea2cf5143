package agent_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/ports"
	"github.com/rivora/rivora/testkit/rig"
)

// An agent with LeafListen accepts an edge's NATS server as a leaf node
// when it presents the credential derived from the cell token.
func TestAnEdgeJoinsTheAgentsLeafPort(t *testing.T) {
	addr, err := ports.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	d := rig.StartDev(t, t.TempDir(), rig.Options{Agent: func(c *agent.Config) { c.LeafListen = addr }})
	edge, err := natsd.Start(natsd.Config{
		Name: "edge-a", Domain: "edge-a", DataDir: t.TempDir(),
		LeafRemotes: []string{"nats-leaf://" + addr}, LeafPassword: agent.LeafPassword(d.Cell),
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(edge.Shutdown)
	poll.True(t, "the edge connected to the agent's leaf port", 20*time.Second, func() bool { return edge.LeafConnections() == 1 })
}
