package cutproxy_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivora/rivora/testkit/cutproxy"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/ports"
)

// echo is a target that sends back what it receives and counts what it
// saw: connections, bytes, and connections whose client ended.
type echo struct {
	l        net.Listener
	accepted atomic.Int64
	received atomic.Int64
	ended    atomic.Int64
}

func startEcho(t *testing.T) *echo {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{l: l}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			e.accepted.Add(1)
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					e.received.Add(int64(n))
					if n > 0 {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						e.ended.Add(1)
						return
					}
				}
			}()
		}
	}()
	return e
}

func dial(t *testing.T, p *cutproxy.Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads it back within 5 s.
func roundTrip(t *testing.T, c net.Conn, msg []byte) {
	t.Helper()
	if _, err := c.Write(msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	readBack(t, c, msg, 5*time.Second)
}

func readBack(t *testing.T, c net.Conn, want []byte, within time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(within))
	defer c.SetReadDeadline(time.Time{})
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read back %d bytes: %v", len(want), err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes that differ from the ones written", len(want))
	}
}

// silent asserts that nothing arrives on c for a while and that c is not
// closed: the read times out, it does not end.
func silent(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	defer c.SetReadDeadline(time.Time{})
	n, err := c.Read(make([]byte, 1))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: read %d bytes, err %v; want nothing and an open connection", what, n, err)
	}
}

func TestForwardsBothWays(t *testing.T) {
	e := startEcho(t)
	p := cutproxy.New(t, e.l.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, []byte("hello"))
	// The proxy counts a chunk after its write returns, so the client may
	// read the echo before the last count: wait for it.
	poll.True(t, "the proxy counts 10 bytes forwarded", 5*time.Second, func() bool { return p.Forwarded() == 10 })
	if p.Target() != e.l.Addr().String() || p.IsCut() || p.Accepted() != 1 || p.Forwarded() != 10 {
		t.Fatalf("target %s, cut %v, accepted %d, forwarded %d; want %s, false, 1, 10", p.Target(), p.IsCut(), p.Accepted(), p.Forwarded(), e.l.Addr())
	}
}

// A cut holds every byte in both directions and closes nothing; Restore
// delivers what was held, in order, and dials the connections made
// during the cut.
func TestCutHoldsBytesAndRestoreDeliversThem(t *testing.T) {
	e := startEcho(t)
	p := cutproxy.New(t, e.l.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, []byte("before"))
	receivedBefore := e.received.Load()

	p.Cut()
	p.Cut() // idempotent
	if !p.IsCut() {
		t.Fatal("IsCut is false after Cut")
	}
	// More than the socket buffers hold: the writer blocks, as a sender
	// into a dead link does once its window is full.
	big := make([]byte, 8<<20)
	rand.Read(big)
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(big)
		wrote <- err
	}()
	silent(t, c, "an open connection during the cut")
	if got := e.received.Load(); got != receivedBefore {
		t.Fatalf("the target received %d bytes during the cut", got-receivedBefore)
	}
	select {
	case err := <-wrote:
		t.Fatalf("a write of %d bytes into a cut link returned (%v); it should block", len(big), err)
	default:
	}

	// A connection made during the cut is accepted, not dialed.
	late := dial(t, p)
	poll.True(t, "the proxy accepted the second connection", 5*time.Second, func() bool { return p.Accepted() == 2 })
	silent(t, late, "a connection made during the cut")
	if n := e.accepted.Load(); n != 1 {
		t.Fatalf("the target saw %d connections during the cut, want 1 (the one made before)", n)
	}

	p.Restore()
	p.Restore() // idempotent
	readBack(t, c, big, 60*time.Second)
	if err := <-wrote; err != nil {
		t.Fatalf("the held write failed after Restore: %v", err)
	}
	roundTrip(t, late, []byte("after"))
	if n := e.accepted.Load(); n != 2 {
		t.Fatalf("the target saw %d connections after Restore, want 2", n)
	}
}

// A side that hangs up during a cut is heard only once the link is back.
func TestCloseDuringCutReachesPeerOnRestore(t *testing.T) {
	e := startEcho(t)
	p := cutproxy.New(t, e.l.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, []byte("x"))
	p.Cut()
	c.Close()
	// The proxy is not reading: the target keeps its connection.
	time.Sleep(200 * time.Millisecond) // a window in which nothing may happen
	if n := e.ended.Load(); n != 0 {
		t.Fatalf("the target saw its client end during the cut")
	}
	p.Restore()
	poll.True(t, "the target sees its client's end after Restore", 5*time.Second, func() bool { return e.ended.Load() == 1 })
}

func TestTargetDownEndsTheConnection(t *testing.T) {
	target, err := ports.FreeAddr() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	p := cutproxy.New(t, target)
	c := dial(t, p)
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read from a proxy whose target is down: %v; want the connection ended", err)
	}
}

func TestCloseEndsEverything(t *testing.T) {
	e := startEcho(t)
	p, err := cutproxy.Start(e.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	roundTrip(t, c, []byte("x"))
	p.Cut()
	pending := dial(t, p)
	poll.True(t, "the proxy accepted the second connection", 5*time.Second, func() bool { return p.Accepted() == 2 })
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, conn := range []net.Conn{c, pending} {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read after Close: %v; want the connection ended", err)
		}
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Fatal("the proxy still accepts after Close")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// One direction cut: the client's bytes reach the target, the answers are
// held until Restore, and nothing is closed.
func TestCutDownDeliversRequestsHoldsAnswers(t *testing.T) {
	e := startEcho(t)
	p := cutproxy.New(t, e.l.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, []byte("before"))

	p.CutDirection(cutproxy.Down)
	if up, down := p.Cuts(); up || !down || !p.IsCut() {
		t.Fatalf("Cuts() = %v, %v, IsCut %v after CutDirection(Down); want false, true, true", up, down, p.IsCut())
	}
	before := e.received.Load()
	if _, err := c.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	poll.True(t, "the target receives the request", 5*time.Second, func() bool { return e.received.Load() == before+7 })
	silent(t, c, "the answer while the down direction is cut")

	// A new connection is dialed (its request arrives too), its answer held.
	late := dial(t, p)
	if _, err := late.Write([]byte("late")); err != nil {
		t.Fatal(err)
	}
	poll.True(t, "the target receives the new connection's request", 5*time.Second, func() bool { return e.received.Load() == before+11 })
	silent(t, late, "the new connection's answer")

	p.Restore()
	readBack(t, c, []byte("request"), 5*time.Second)
	readBack(t, late, []byte("late"), 5*time.Second)
}

// The up direction cut: nothing reaches the target; answers could flow
// but there are none; a new connection is not dialed.
func TestCutUpHoldsRequests(t *testing.T) {
	e := startEcho(t)
	p := cutproxy.New(t, e.l.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, []byte("x"))
	p.CutDirection(cutproxy.Up)
	before := e.received.Load()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	late := dial(t, p)
	poll.True(t, "the proxy accepted the second connection", 5*time.Second, func() bool { return p.Accepted() == 2 })
	silent(t, c, "an open connection whose requests are held")
	if got := e.received.Load(); got != before {
		t.Fatalf("the target received %d bytes while the up direction was cut", got-before)
	}
	if n := e.accepted.Load(); n != 1 {
		t.Fatalf("the target saw %d connections, want 1: a connection made with the up direction cut is not dialed", n)
	}
	p.Restore()
	readBack(t, c, []byte("held"), 5*time.Second)
	roundTrip(t, late, []byte("late"))
}

// Latency delays each direction by the amount set, keeps order, and does
// not cap throughput at one chunk per delay.
func TestLatencyDelaysEachDirection(t *testing.T) {
	e := startEcho(t)
	p := cutproxy.New(t, e.l.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, []byte("warm"))
	const latency = 150 * time.Millisecond
	p.SetLatency(latency)
	if p.Latency() != latency {
		t.Fatalf("Latency() = %s, want %s", p.Latency(), latency)
	}
	start := time.Now()
	roundTrip(t, c, []byte("ping"))
	if rtt := time.Since(start); rtt < 2*latency || rtt > 2*latency+time.Second {
		t.Fatalf("round trip took %s with %s latency each way; want about %s", rtt, latency, 2*latency)
	}
	// 4 MiB (128 chunks) round trip: at one chunk per delay it would take
	// 128 × 300 ms; pipelined it takes little more than the delay.
	big := make([]byte, 4<<20)
	rand.Read(big)
	start = time.Now()
	go c.Write(big)
	readBack(t, c, big, 20*time.Second)
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("4 MiB took %s through a proxy with %s latency; the latency caps throughput", took, latency)
	}
	p.SetLatency(0)
	start = time.Now()
	roundTrip(t, c, []byte("fast"))
	if rtt := time.Since(start); rtt >= latency {
		t.Fatalf("round trip took %s after SetLatency(0)", rtt)
	}
}
