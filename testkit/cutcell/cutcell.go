// Package cutcell starts a JetStream cluster of embedded servers
// (agent/natsd) in process whose every route runs through its own proxy
// (testkit/faultnet: server aI dialing aJ), so a test can cut a server
// from its peers silently while it lives on. Each server advertises the
// net's sink, so gossip cannot open a route around the proxies.
package cutcell

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/testkit/faultnet"
	"github.com/rivora/rivora/testkit/ports"
)

// Cell is the running cluster: Servers[i] is named Name(i).
type Cell struct {
	Servers []*natsd.Server
	Net     *faultnet.Net
}

// Name is server i's name (a1, a2, …), its name in Net too.
func Name(i int) string { return fmt.Sprintf("a%d", i+1) }

// Start starts n servers routed to each other through Net; they and the
// net stop when the test ends.
func Start(t *testing.T, n int) *Cell {
	t.Helper()
	c := &Cell{Net: faultnet.New()}
	t.Cleanup(c.Net.Close)
	sink, err := c.Net.Sink()
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for range n {
		// Outside the kernel's ephemeral range, where no connection or
		// listen on port 0 takes it before the server binds it.
		addr, err := ports.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, addr)
	}
	c.Servers = make([]*natsd.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		var routes []string
		for j := range n {
			if i != j {
				addr, err := c.Net.Route(Name(i), Name(j), addrs[j])
				if err != nil {
					t.Fatal(err)
				}
				routes = append(routes, "nats://"+addr)
			}
		}
		cfg := natsd.Config{Name: Name(i), DataDir: t.TempDir(), ClusterListen: addrs[i], ClusterAdvertise: sink, Routes: routes}
		wg.Go(func() { c.Servers[i], errs[i] = natsd.Start(cfg, slog.New(slog.DiscardHandler)) })
	}
	wg.Wait()
	for i, srv := range c.Servers {
		if srv != nil {
			t.Cleanup(srv.Shutdown)
		}
		if errs[i] != nil {
			t.Fatalf("start %s: %v", Name(i), errs[i])
		}
	}
	return c
}
