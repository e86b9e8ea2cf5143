package faultnet_test

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivora/rivora/testkit/faultnet"
	"github.com/rivora/rivora/testkit/poll"
)

// echoServer answers every byte with itself and counts what it received.
type echoServer struct {
	addr     string
	received atomic.Int64
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	e := &echoServer{addr: l.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					e.received.Add(int64(n))
					if n > 0 {
						c.Write(buf[:n])
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return e
}

func newNet(t *testing.T) *faultnet.Net {
	n := faultnet.New()
	t.Cleanup(n.Close)
	return n
}

func route(t *testing.T, n *faultnet.Net, from, to, target string) net.Conn {
	t.Helper()
	addr, err := n.Route(from, to, target)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// answered writes msg and reports whether it comes back within d.
func answered(t *testing.T, c net.Conn, msg string, d time.Duration) bool {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	got := make([]byte, len(msg))
	_, err := io.ReadFull(c, got)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	if err != nil || string(got) != msg {
		t.Fatalf("read back %q: %q, %v", msg, got, err)
	}
	return true
}

// readHeld reads n bytes that were held, within 5 s.
func readHeld(t *testing.T, c net.Conn, want string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
		t.Fatalf("held bytes: %q, %v; want %q", got, err, want)
	}
}

func TestRouteIsOneProxyPerDirectedPair(t *testing.T) {
	e := startEcho(t)
	n := newNet(t)
	ab1, err := n.Route("a", "b", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	ab2, _ := n.Route("a", "b", e.addr)
	ba, _ := n.Route("b", "a", e.addr)
	if ab1 != ab2 || ab1 == ba {
		t.Fatalf("a->b %s then %s, b->a %s: want one address per directed pair", ab1, ab2, ba)
	}
	if _, err := n.Route("a", "b", "127.0.0.1:1"); err == nil {
		t.Fatal("routing a->b to a second target: no error")
	}
	if got := n.Links(); len(got) != 2 || !strings.HasPrefix(got[0], "a->b: "+e.addr) {
		t.Fatalf("Links() = %q", got)
	}
}

// Cut holds both proxies of a link, and only that link.
func TestCutIsPerLink(t *testing.T) {
	e := startEcho(t)
	n := newNet(t)
	ab := route(t, n, "a", "b", e.addr)
	ba := route(t, n, "b", "a", e.addr)
	ac := route(t, n, "a", "c", e.addr)
	n.Cut("a", "b")
	if answered(t, ab, "1", 300*time.Millisecond) || answered(t, ba, "2", 300*time.Millisecond) {
		t.Fatal("bytes crossed a cut link")
	}
	if !answered(t, ac, "3", 5*time.Second) {
		t.Fatal("a->c is not cut but got no answer")
	}
	n.Heal()
	readHeld(t, ab, "1")
	readHeld(t, ba, "2")
	if got := n.Faults(); len(got) != 2 || got[0].Kind != "cut" || got[0].What != "a<->b" || got[1].Kind != "heal" {
		t.Fatalf("fault log %v", got)
	}
}

// CutOneWay(a, b): what a sends reaches b, on a's connections and on b's
// (where b's requests are held instead: b's bytes never reach a).
func TestCutOneWay(t *testing.T) {
	e := startEcho(t)
	n := newNet(t)
	ab := route(t, n, "a", "b", e.addr)
	ba := route(t, n, "b", "a", e.addr)
	n.CutOneWay("a", "b")
	before := e.received.Load()
	if answered(t, ab, "req", 300*time.Millisecond) {
		t.Fatal("a heard b's answer on a one-way link")
	}
	if got := e.received.Load() - before; got != 3 {
		t.Fatalf("b received %d bytes of a's request, want 3", got)
	}
	// b→a: b's bytes (here, to the echo standing for a) are held.
	before = e.received.Load()
	if answered(t, ba, "x", 300*time.Millisecond) || e.received.Load() != before {
		t.Fatal("b's bytes reached a on a link cut one way from a to b")
	}
	n.Heal()
	readHeld(t, ab, "req")
	readHeld(t, ba, "x")
}

func TestIsolateCutsEveryLinkOfAProcess(t *testing.T) {
	e := startEcho(t)
	n := newNet(t)
	ab := route(t, n, "a", "b", e.addr)
	ca := route(t, n, "c", "a", e.addr)
	bc := route(t, n, "b", "c", e.addr)
	n.Isolate("a")
	if answered(t, ab, "1", 300*time.Millisecond) || answered(t, ca, "2", 300*time.Millisecond) {
		t.Fatal("bytes crossed a link of an isolated process")
	}
	if !answered(t, bc, "3", 5*time.Second) {
		t.Fatal("b->c does not touch a but got no answer")
	}
}

func TestDelayAddsLatencyBothWays(t *testing.T) {
	e := startEcho(t)
	n := newNet(t)
	ab := route(t, n, "a", "b", e.addr)
	n.Delay("a", "b", 200*time.Millisecond)
	start := time.Now()
	if !answered(t, ab, "slow", 5*time.Second) {
		t.Fatal("no answer through a slow link")
	}
	if rtt := time.Since(start); rtt < 400*time.Millisecond {
		t.Fatalf("round trip %s through a link with 200ms each way", rtt)
	}
	n.Heal()
	if n.Proxy("a", "b").Latency() != 0 {
		t.Fatal("Heal left latency")
	}
}

// Flap alternates cut and healed, and leaves the link healed.
func TestFlapAlternatesThenHeals(t *testing.T) {
	e := startEcho(t)
	n := newNet(t)
	route(t, n, "a", "b", e.addr)
	p := n.Proxy("a", "b")
	over := n.Flap("a", "b", 100*time.Millisecond, 1200*time.Millisecond)
	var sawCut, sawOpen bool
	poll.True(t, "the link seen both cut and open while it flaps", 5*time.Second, func() bool {
		if p.IsCut() {
			sawCut = true
		} else {
			sawOpen = true
		}
		return sawCut && sawOpen
	})
	<-over
	if p.IsCut() {
		t.Fatal("the link is cut after the flapping ended")
	}
	ab := route(t, n, "a", "b", e.addr)
	if !answered(t, ab, "ok", 5*time.Second) {
		t.Fatal("no answer after the flapping")
	}
}

func TestSinkClosesConnections(t *testing.T) {
	n := newNet(t)
	addr, err := n.Sink()
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read from the sink: %v; want the connection closed", err)
	}
}
