// Package cutproxy is a TCP proxy on 127.0.0.1 whose link can be cut
// silently, as a broken network cuts it: Cut stops every byte in both
// directions without closing anything (no FIN, no RST), and Restore lets
// them flow again. It can also cut one direction only (the requests reach
// the target, its answers are held) and add latency to every byte. The
// edge tests and the edge benchmark put it between an edge and its cell;
// testkit/faultnet builds a cell's links out of it.
//
// What a cut does, and why that is a WAN:
//
//   - Connections stay open. Neither side hears anything: a write
//     succeeds until the socket buffers are full, then blocks; a read
//     waits. Only an application's own timeout (a NATS ping, an HTTP
//     client's deadline) notices, exactly as across a link whose packets
//     are lost.
//   - Bytes are held, never dropped. The proxy stops reading, so what a
//     side writes stays in its socket buffers (at most a few 32 KiB
//     chunks per direction are held in the proxy). On Restore they are
//     delivered in order. TCP does the same across an outage:
//     unacknowledged segments are retransmitted, so a connection that
//     both sides kept resumes intact. A side that gave up meanwhile
//     closed its socket; the proxy sees that only after Restore (it was
//     not reading), and passes the close on then, as the peer of a WAN
//     learns it only once packets flow again.
//   - A connection made while the client→target direction is cut is
//     accepted but not dialed: its client waits for a first byte that
//     never comes (a NATS server speaks first), as a SYN into a dead
//     link waits. On Restore it is dialed; one whose client has given up
//     is closed at once.
//
// One direction only (CutDirection(Down)): the client's bytes reach the
// target, which acts on them (a Consul session renewal is applied), and
// the answers are held. The proxy completes both TCP handshakes itself,
// so every new connection's request reaches the target too: the harshest
// form of an asymmetric link, where the far side keeps hearing a peer
// that hears nothing back.
//
// Latency (SetLatency) delays every chunk by the same amount in each
// direction, keeping order; it does not limit throughput.
//
// It owns: the listener and every connection it accepted or dialed; the
// two gates (open or cut, one per direction) that every pump waits on.
package cutproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// chunk is the most one read of one direction brings into the proxy.
const chunk = 32 << 10

// inTransit is how many chunks one direction of one connection holds
// between its read and its write (they wait out the latency there).
const inTransit = 32

// dialTimeout bounds a dial of the target once the link is up.
const dialTimeout = 10 * time.Second

// Direction is one way through the proxy.
type Direction int

const (
	// Up is client → target: requests.
	Up Direction = iota
	// Down is target → client: answers.
	Down
)

func (d Direction) String() string {
	if d == Up {
		return "up"
	}
	return "down"
}

// Proxy forwards connections made to Addr() to its target; see the
// package doc.
type Proxy struct {
	listener net.Listener
	target   string
	done     chan struct{} // closed by Close
	wg       sync.WaitGroup

	mu    sync.Mutex
	gates [2]gate // by Direction
	conns map[net.Conn]struct{}

	latency   atomic.Int64 // time.Duration added to every chunk
	accepted  atomic.Int64
	forwarded atomic.Int64 // bytes written to either side
}

// gate is one direction's state: open is closed while bytes flow, and a
// new, open channel replaces it on a cut.
type gate struct {
	open chan struct{}
	cut  bool
}

// Start listens on a free 127.0.0.1 port and forwards to target
// (HOST:PORT); Close stops it.
func Start(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("cutproxy listen: %w", err)
	}
	p := &Proxy{listener: l, target: target, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	for d := range p.gates {
		p.gates[d].open = make(chan struct{})
		close(p.gates[d].open)
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// New is Start for a test: the proxy closes when the test ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// Addr is the proxy's HOST:PORT.
func (p *Proxy) Addr() string { return p.listener.Addr().String() }

// Target is the HOST:PORT it forwards to.
func (p *Proxy) Target() string { return p.target }

// Cut stops forwarding in both directions, closing nothing. Cutting a cut
// link does nothing.
func (p *Proxy) Cut() {
	p.CutDirection(Up)
	p.CutDirection(Down)
}

// CutDirection stops forwarding in direction d only, closing nothing.
func (p *Proxy) CutDirection(d Direction) {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := &p.gates[d]
	if !g.cut {
		g.cut = true
		g.open = make(chan struct{})
	}
}

// Restore lets bytes flow again in both directions: what was held is
// delivered, connections made during the cut are dialed. Restoring an
// open link does nothing. Latency stays as set.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for d := range p.gates {
		g := &p.gates[d]
		if g.cut {
			g.cut = false
			close(g.open)
		}
	}
}

// IsCut reports whether either direction is cut.
func (p *Proxy) IsCut() bool {
	up, down := p.Cuts()
	return up || down
}

// Cuts reports which directions are cut.
func (p *Proxy) Cuts() (up, down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gates[Up].cut, p.gates[Down].cut
}

// SetLatency delays every chunk by d in each direction from now on (0:
// none). Chunks already on their way keep their delay.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(max(d, 0))) }

// Latency is the delay SetLatency set.
func (p *Proxy) Latency() time.Duration { return time.Duration(p.latency.Load()) }

// Accepted is how many connections the proxy accepted so far.
func (p *Proxy) Accepted() int { return int(p.accepted.Load()) }

// Forwarded is how many bytes it delivered so far, both directions.
func (p *Proxy) Forwarded() int64 { return p.forwarded.Load() }

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	select {
	case <-p.done:
		p.mu.Unlock()
		return nil
	default:
	}
	close(p.done)
	err := p.listener.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// flowing waits until direction d is up; false once the proxy is closed.
func (p *Proxy) flowing(d Direction) bool {
	p.mu.Lock()
	open := p.gates[d].open
	p.mu.Unlock()
	select {
	case <-open:
		return true
	case <-p.done:
		return false
	}
}

// track registers c for Close; false when the proxy is already closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		c.Close()
		return false
	default:
		p.conns[c] = struct{}{}
		return true
	}
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.listener.Accept()
		if err != nil {
			return // closed
		}
		p.accepted.Add(1)
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve dials the target once the client's direction is up and pumps
// both directions until both ended.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	if !p.flowing(Up) {
		return
	}
	server, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		return // the target is down: the client sees its connection end
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	var pumps sync.WaitGroup
	pumps.Add(2)
	go p.pump(server, client, Up, &pumps)
	go p.pump(client, server, Down, &pumps)
	pumps.Wait()
}

// piece is what one read brought: bytes, and the read's end (io.EOF or an
// error), due for writing at due.
type piece struct {
	data []byte
	err  error
	due  time.Time
}

// pump copies src to dst in direction d: a reader that waits for the
// gate before each read and before passing on what it brought, and a
// writer that waits out the latency and the gate before each write. At
// src's end it half-closes dst (the peer sees the end, and may still
// answer); on an error it closes both, which ends the other pump.
func (p *Proxy) pump(dst, src net.Conn, d Direction, pumps *sync.WaitGroup) {
	defer pumps.Done()
	pieces := make(chan piece, inTransit)
	stop := make(chan struct{}) // closed when the writer gave up
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		p.read(src, d, pieces, stop)
	}()
	p.write(dst, src, d, pieces, stop)
	// The reader ends too: it saw the end it passed on, or src was closed
	// (by the writer on an error, by Close on shutdown).
	<-readerDone
}

func (p *Proxy) read(src net.Conn, d Direction, pieces chan<- piece, stop <-chan struct{}) {
	defer close(pieces)
	for {
		if !p.flowing(d) {
			return
		}
		buf := make([]byte, chunk)
		n, err := src.Read(buf)
		// What the read brought (bytes, an end, an error) waits for the
		// link: a cut that began while it was blocked holds it too.
		if !p.flowing(d) {
			return
		}
		select {
		case pieces <- piece{data: buf[:n], err: err, due: time.Now().Add(p.Latency())}:
		case <-stop:
			return
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) write(dst, src net.Conn, d Direction, pieces <-chan piece, stop chan<- struct{}) {
	defer close(stop)
	for pc := range pieces {
		if wait := time.Until(pc.due); wait > 0 {
			select {
			case <-time.After(wait):
			case <-p.done:
				return
			}
		}
		if !p.flowing(d) {
			return
		}
		if len(pc.data) > 0 {
			if _, werr := dst.Write(pc.data); werr != nil {
				src.Close()
				dst.Close()
				return
			}
			p.forwarded.Add(int64(len(pc.data)))
		}
		if errors.Is(pc.err, io.EOF) {
			closeWrite(dst)
			return
		}
		if pc.err != nil {
			src.Close()
			dst.Close()
			return
		}
	}
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
		return
	}
	c.Close()
}
