package server

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/edge/edged"
	"github.com/rivora/rivora/internal/auth"
)

// A port already in use, the HTTP --listen or one of the agent's NATS
// ports, stops rivora dev, agent and edge at once with the flag, the
// address and the OS's reason. A NATS port in use waited 30 s, then said
// only "embedded nats: not ready after 30s".
func TestAPortInUseNamesItsFlag(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().String()
	cell := auth.CellTokenOf(strings.Repeat("c", auth.MinCellTokenBytes))
	dev := func(listen string, agentCfg func(*agent.Config)) func(string) error {
		return func(dir string) error {
			cfg := agent.Config{Name: "dev", DataDir: dir}
			agentCfg(&cfg)
			return RunDev(context.Background(), DevOptions{Log: slog.New(slog.DiscardHandler), HTTP: HTTP{Listen: listen},
				ControlPlane: controlplane.Config{StateDir: filepath.Join(dir, "controlplane")}, Agent: cfg, Cell: cell})
		}
	}
	runAgent := func(listen string, agentCfg func(*agent.Config)) func(string) error {
		return func(dir string) error {
			cfg := agent.Config{Name: "a1", DataDir: dir, ControlPlaneURL: "http://127.0.0.1:1", Keys: auth.NewKeys(cell)}
			agentCfg(&cfg)
			return RunAgent(context.Background(), AgentOptions{Log: slog.New(slog.DiscardHandler), HTTP: HTTP{Listen: listen}, Agent: cfg})
		}
	}
	none := func(*agent.Config) {}
	for _, tc := range []struct {
		name, flag string
		run        func(dir string) error
	}{
		{"dev", "--listen", dev(busy, none)},
		{"dev", "--nats-listen", dev("127.0.0.1:0", func(c *agent.Config) { c.NATSListen = busy })},
		{"dev", "--leaf-listen", dev("127.0.0.1:0", func(c *agent.Config) { c.LeafListen = busy })},
		{"agent", "--listen", runAgent(busy, none)},
		{"agent", "--nats-listen", runAgent("127.0.0.1:0", func(c *agent.Config) { c.NATSListen = busy })},
		{"agent", "--nats-cluster", runAgent("127.0.0.1:0", func(c *agent.Config) { c.NATSCluster = busy })},
		{"agent", "--leaf-listen", runAgent("127.0.0.1:0", func(c *agent.Config) { c.LeafListen = busy })},
		{"edge", "--listen", func(dir string) error {
			return RunEdge(context.Background(), EdgeOptions{Log: slog.New(slog.DiscardHandler), HTTP: HTTP{Listen: busy},
				Edge: edged.Config{Name: "shop-1", DataDir: dir, CellLeaf: []string{"nats-leaf://127.0.0.1:1"}, ControlPlanes: []string{"http://127.0.0.1:1"}, Keys: auth.NewKeys(cell)}})
		}},
	} {
		done := make(chan error, 1)
		go func() { done <- tc.run(t.TempDir()) }()
		select {
		case err := <-done:
			if want := tc.flag + " " + busy + ": bind: address already in use"; err == nil || err.Error() != want {
				t.Errorf("rivora %s with %s %s in use: %v, want %q", tc.name, tc.flag, busy, err, want)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("rivora %s with %s %s in use: still starting after 15s", tc.name, tc.flag, busy)
		}
	}
}
