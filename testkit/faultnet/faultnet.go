// Package faultnet is the network between a test cell's processes, made
// of one cutproxy per directed link: process A reaches process B at the
// address Route(A, B, …) gives, a proxy that forwards to B and that a
// test can cut (silently, both ways or one way), slow down or flap. Every
// fault is logged with its time, so a test or the chaos run can say what
// happened when.
//
// A link between A and B is the pair of proxies A→B (A dials B) and B→A
// (B dials A): NATS routes are dialled from both sides and either
// connection may carry the traffic, so a fault on the link applies to
// both proxies, each in the right direction.
//
// It owns: every proxy it started, the sink, and the fault log.
package faultnet

import (
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rivora/rivora/testkit/cutproxy"
)

// Fault is one change of the network, as logged.
type Fault struct {
	At   time.Time
	Kind string // cut, one-way, isolate, latency, flap, heal
	What string // the link or process, e.g. "a1<->consul", "a1->consul"
}

func (f Fault) String() string {
	return fmt.Sprintf("%s %s %s", f.At.UTC().Format("15:04:05.000"), f.Kind, f.What)
}

type link struct{ from, to string }

// Net is a set of directed links; see the package doc.
type Net struct {
	mu     sync.Mutex
	links  map[link]*cutproxy.Proxy
	faults []Fault
	sink   net.Listener
	flaps  sync.WaitGroup
	done   chan struct{}
	closed bool
}

// New returns an empty network; Close stops its proxies.
func New() *Net {
	return &Net{links: map[link]*cutproxy.Proxy{}, done: make(chan struct{})}
}

// Route returns the address from dials to reach to, which listens on
// target (HOST:PORT): a proxy of its own, started on the first call.
// Asking again for the same pair returns the same address.
func (n *Net) Route(from, to, target string) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := link{from, to}
	if p, ok := n.links[k]; ok {
		if p.Target() != target {
			return "", fmt.Errorf("faultnet: %s->%s already routed to %s, not %s", from, to, p.Target(), target)
		}
		return p.Addr(), nil
	}
	p, err := cutproxy.Start(target)
	if err != nil {
		return "", fmt.Errorf("faultnet %s->%s: %w", from, to, err)
	}
	n.links[k] = p
	return p.Addr(), nil
}

// Proxy is the proxy from uses to reach to (nil: not routed).
func (n *Net) Proxy(from, to string) *cutproxy.Proxy {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.links[link{from, to}]
}

// Sink is an address that accepts connections and closes them at once:
// what a process advertises where it must not be reached directly
// (rivora agent --nats-cluster-advertise), so that a peer learning of it
// by gossip cannot go around the proxies.
func (n *Net) Sink() (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sink != nil {
		return n.sink.Addr().String(), nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("faultnet sink: %w", err)
	}
	n.sink = l
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().String(), nil
}

// Cut cuts the link between a and b silently, both ways.
func (n *Net) Cut(a, b string) {
	n.apply("cut", a+"<->"+b, func() {
		n.each(a, b, func(p *cutproxy.Proxy, _ bool) { p.Cut() })
	})
}

// CutOneWay lets from's bytes reach to and holds to's answers: to acts on
// what from sends, from hears nothing back.
func (n *Net) CutOneWay(from, to string) {
	n.apply("one-way", from+"->"+to+" (answers held)", func() {
		n.each(from, to, func(p *cutproxy.Proxy, fromDials bool) {
			if fromDials {
				p.CutDirection(cutproxy.Down)
			} else {
				p.CutDirection(cutproxy.Up)
			}
		})
	})
}

// Isolate cuts every link of name, both ways.
func (n *Net) Isolate(name string) {
	n.apply("isolate", name, func() {
		for k, p := range n.snapshot() {
			if k.from == name || k.to == name {
				p.Cut()
			}
		}
	})
}

// Delay adds d of latency each way on the link between a and b (0 takes
// it away).
func (n *Net) Delay(a, b string, d time.Duration) {
	n.apply("latency", fmt.Sprintf("%s<->%s %s", a, b, d), func() {
		n.each(a, b, func(p *cutproxy.Proxy, _ bool) { p.SetLatency(d) })
	})
}

// Flap cuts the link between a and b for period, restores it for period,
// and so on for duration, then leaves it restored. It returns at once;
// the returned channel is closed when the flapping is over. Close ends a
// flapping early.
func (n *Net) Flap(a, b string, period, duration time.Duration) <-chan struct{} {
	over := make(chan struct{})
	n.apply("flap", fmt.Sprintf("%s<->%s every %s for %s", a, b, period, duration), func() {})
	n.flaps.Add(1)
	go func() {
		defer n.flaps.Done()
		defer close(over)
		end := time.Now().Add(duration)
		for cut := true; time.Now().Before(end); cut = !cut {
			n.each(a, b, func(p *cutproxy.Proxy, _ bool) {
				if cut {
					p.Cut()
				} else {
					p.Restore()
				}
			})
			select {
			case <-time.After(min(period, time.Until(end))):
			case <-n.done:
				return
			}
		}
		n.each(a, b, func(p *cutproxy.Proxy, _ bool) { p.Restore() })
	}()
	return over
}

// Heal restores every link and takes all latency away.
func (n *Net) Heal() {
	n.apply("heal", "all", func() {
		for _, p := range n.snapshot() {
			p.Restore()
			p.SetLatency(0)
		}
	})
}

// Restore restores the link between a and b both ways (latency stays).
func (n *Net) Restore(a, b string) {
	n.apply("heal", a+"<->"+b, func() {
		n.each(a, b, func(p *cutproxy.Proxy, _ bool) { p.Restore() })
	})
}

// Faults is the log of every fault so far, in order.
func (n *Net) Faults() []Fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.faults)
}

// Links lists the routed links, "from->to target via proxy", sorted: the
// wiring, for logs.
func (n *Net) Links() []string {
	var out []string
	for k, p := range n.snapshot() {
		out = append(out, fmt.Sprintf("%s->%s: %s via %s", k.from, k.to, p.Target(), p.Addr()))
	}
	sort.Strings(out)
	return out
}

// Close ends flapping and stops every proxy and the sink.
func (n *Net) Close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	close(n.done)
	n.mu.Unlock()
	n.flaps.Wait()
	for _, p := range n.snapshot() {
		p.Close()
	}
	n.mu.Lock()
	if n.sink != nil {
		n.sink.Close()
	}
	n.mu.Unlock()
}

// each calls f with the proxies of the link between a and b: a→b
// (aDials true) and b→a, those that exist.
func (n *Net) each(a, b string, f func(p *cutproxy.Proxy, aDials bool)) {
	if p := n.Proxy(a, b); p != nil {
		f(p, true)
	}
	if p := n.Proxy(b, a); p != nil {
		f(p, false)
	}
}

func (n *Net) snapshot() map[link]*cutproxy.Proxy {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[link]*cutproxy.Proxy, len(n.links))
	for k, p := range n.links {
		out[k] = p
	}
	return out
}

// apply logs a fault and applies it.
func (n *Net) apply(kind, what string, do func()) {
	do()
	n.mu.Lock()
	n.faults = append(n.faults, Fault{At: time.Now(), Kind: kind, What: what})
	n.mu.Unlock()
}

// Describe is the fault log as lines, for a report.
func Describe(faults []Fault) string {
	var b strings.Builder
	for _, f := range faults {
		b.WriteString(f.String())
		b.WriteByte('\n')
	}
	return b.String()
}
