package e2e

// The wiring of a cell whose links can each be cut (clusterOptions.Net):
// every connection a process of the cell makes to another one goes
// through its own proxy of a faultnet.Net, one per directed link, so a
// test cuts exactly the link it means.
//
//	dialer           dials                    through proxy (from->to)
//	agent aN         Consul HTTP API          aN->consul     (--consul)
//	control plane i  Consul HTTP API          cpI->consul    (--consul)
//	agent aN         agent aM's NATS routes   aN->aM         (--nats-routes)
//	agent aN         control plane i (Watch)  aN->cpI        (--controlplane)
//	control planes   agent aN's API           cp->aN         (aN's --advertise)
//	agent aN         MinIO (dead letters)     aN->minio      (--s3-endpoint)
//
// Not proxied: the test itself (publishers, rivoractl, the checker's
// reads) and the agents' deliveries to the partners. The partners are
// the observers: a delivery an agent makes when it must not is recorded
// at once, which is the stricter check.
//
// NATS gossip: an agent that accepts a route tells its other peers where
// the new server is (its advertised route address), and a peer without a
// route to it dials that address directly. That would go around a cut
// link, so every agent advertises the Net's sink (--nats-cluster-
// advertise), which closes what reaches it: routes are only ever the
// explicit ones, through the proxies.

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/testkit/faultnet"
)

// newFaultNet is a Net closed when the test ends.
func newFaultNet(t testing.TB) *faultnet.Net {
	n := faultnet.New()
	t.Cleanup(n.Close)
	return n
}

// cpNode names control plane i (0-based) in the Net.
func cpNode(i int) string { return "cp" + strconv.Itoa(i+1) }

// via returns the URL from uses to reach to at target (a URL or
// HOST:PORT): target itself without a Net, else its proxy's address.
func (c *clusterCell) via(from, to, target string) string {
	if c.net == nil {
		return target
	}
	host, rebuild := target, func(h string) string { return h }
	if u, err := url.Parse(target); err == nil && u.Host != "" {
		host = u.Host
		rebuild = func(h string) string {
			v := *u
			v.Host = h
			return v.String()
		}
	}
	addr, err := c.net.Route(from, to, host)
	if err != nil {
		c.t.Fatal(err)
	}
	return rebuild(addr)
}

// netRoutes is agent name's --nats-routes: its proxy to each other
// agent's route port (routes[j] is agent a<j+1>'s).
func (c *clusterCell) netRoutes(name string, routes []string) []string {
	var out []string
	for j, r := range routes {
		peer := "a" + strconv.Itoa(j+1)
		if peer != name {
			out = append(out, c.via(name, peer, r))
		}
	}
	return out
}

// netControlPlanes is agent name's --controlplane list.
func (c *clusterCell) netControlPlanes(name string, cpURLs []string) []string {
	out := make([]string, len(cpURLs))
	for i, u := range cpURLs {
		out[i] = c.via(name, cpNode(i), u)
	}
	return out
}

// netAgentArgs are agent name's flags that put its other links on the
// Net: the sink as its gossiped route address, the control planes'
// proxy to its API as its advertised URL, its proxy to MinIO.
func (c *clusterCell) netAgentArgs(name, addr string) []string {
	sink, err := c.net.Sink()
	if err != nil {
		c.t.Fatal(err)
	}
	scheme := "http://"
	if servesTLS(tlsArgs()) {
		scheme = "https://"
	}
	return []string{"--nats-cluster-advertise", sink,
		"--advertise", c.via("cp", name, scheme+addr),
		"--s3-endpoint", c.via(name, "minio", c.minio.Addr)}
}

// TestFaultCellWiring: in a cell started on a Net, every link the wiring
// table names carries the cell's traffic (a process that went around its
// proxy would leave it idle), and a cell so wired owns every partition.
func TestFaultCellWiring(t *testing.T) {
	n := newFaultNet(t)
	c := startClusterWith(t, clusterOptions{ControlPlanes: 1, Agents: 3, Partitions: 4, Net: n})
	t.Logf("links:\n%s", strings.Join(n.Links(), "\n"))
	r := c.rig("a1")
	load := newClusterLoad(t, r, []string{"w1"}, 5)
	if err := load.publishRound(ctxTimeout(t, time.Minute), c, c.names, 0); err != nil {
		t.Fatal(err)
	}
	load.check(t, c, time.Minute)
	// Reading dead letters makes each agent read MinIO, and the control
	// plane ask an agent.
	for _, a := range c.names {
		ctlAt(t, c.agents[a].URL(), "dlq", "list")
	}
	ctlAt(t, c.cp.URL(), "dlq", "list")
	asked := 0
	for _, a := range c.names {
		if p := n.Proxy("cp", a); p != nil && p.Forwarded() > 0 {
			asked++
		}
	}
	if asked == 0 {
		t.Errorf("no cp->agent link carried the control plane's call: it goes around the proxies")
	}
	want := []string{"cp1->consul"}
	for _, a := range c.names {
		want = append(want, a+"->consul", a+"->cp1", a+"->minio")
		for _, b := range c.others(a) {
			want = append(want, a+"->"+b)
		}
	}
	for _, l := range want {
		from, to, _ := strings.Cut(l, "->")
		p := n.Proxy(from, to)
		if p == nil {
			t.Errorf("link %s is not on the Net", l)
			continue
		}
		if p.Forwarded() == 0 {
			t.Errorf("link %s carried nothing: its dialer goes around the proxy", l)
		}
	}
}
