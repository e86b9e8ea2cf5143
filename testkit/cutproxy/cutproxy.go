// Package cutproxy is a TCP proxy on 127.0.0.1 whose link can be cut
// silently, as a broken WAN cuts it: Cut stops every byte in both
// directions without closing anything (no FIN, no RST), and Restore lets
// them flow again. The edge tests and the edge benchmark put it between
// an edge and its cell.
//
// What a cut does, and why that is a WAN:
//
//   - Connections stay open. Neither side hears anything: a write
//     succeeds until the socket buffers are full, then blocks; a read
//     waits. Only an application's own timeout (a NATS ping, an HTTP
//     client's deadline) notices, exactly as across a link whose packets
//     are lost.
//   - Bytes are held, never dropped. The proxy stops reading, so what a
//     side writes stays in its socket buffers (at most one 32 KiB chunk
//     per direction is held in the proxy). On Restore they are delivered
//     in order. TCP does the same across an outage: unacknowledged
//     segments are retransmitted, so a connection that both sides kept
//     resumes intact. A side that gave up meanwhile closed its socket;
//     the proxy sees that only after Restore (it was not reading), and
//     passes the close on then, as the peer of a WAN learns it only once
//     packets flow again.
//   - A connection made during the cut is accepted but not dialed: its
//     client waits for a first byte that never comes (a NATS server
//     speaks first), as a SYN into a dead link waits. On Restore it is
//     dialed; one whose client has given up is closed at once.
//
// It owns: the listener and every connection it accepted or dialed; the
// gate (open or cut) that every pump waits on.
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

// chunk is the most one direction of one connection holds in the proxy.
const chunk = 32 << 10

// dialTimeout bounds a dial of the target once the link is up.
const dialTimeout = 10 * time.Second

// Proxy forwards connections made to Addr() to its target; see the
// package doc.
type Proxy struct {
	listener net.Listener
	target   string
	done     chan struct{} // closed by Close
	wg       sync.WaitGroup

	mu    sync.Mutex
	open  chan struct{} // closed while the link is up; a new one on Cut
	cut   bool
	conns map[net.Conn]struct{}

	accepted  atomic.Int64
	forwarded atomic.Int64 // bytes written to either side
}

// Start listens on a free 127.0.0.1 port and forwards to target
// (HOST:PORT); Close stops it.
func Start(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("cutproxy listen: %w", err)
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{listener: l, target: target, done: make(chan struct{}), open: open, conns: map[net.Conn]struct{}{}}
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
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		p.cut = true
		p.open = make(chan struct{})
	}
}

// Restore lets bytes flow again: what was held is delivered, connections
// made during the cut are dialed. Restoring an open link does nothing.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		p.cut = false
		close(p.open)
	}
}

// IsCut reports whether the link is cut.
func (p *Proxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

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

// flowing waits until the link is up; false once the proxy is closed.
func (p *Proxy) flowing() bool {
	p.mu.Lock()
	open := p.open
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

// serve dials the target once the link is up and pumps both directions
// until both ended.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	if !p.flowing() {
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
	go p.pump(server, client, &pumps)
	go p.pump(client, server, &pumps)
	pumps.Wait()
}

// pump copies src to dst, a chunk at a time, waiting for the link before
// each read and before passing on what the read brought. At src's end it half-closes dst (the peer
// sees the end, and may still answer); on an error it closes both, which
// ends the other pump.
func (p *Proxy) pump(dst, src net.Conn, pumps *sync.WaitGroup) {
	defer pumps.Done()
	buf := make([]byte, chunk)
	for {
		if !p.flowing() {
			return
		}
		n, err := src.Read(buf)
		// What the read brought (bytes, an end, an error) waits for the
		// link: a cut that began while it was blocked holds it too.
		if !p.flowing() {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				dst.Close()
				return
			}
			p.forwarded.Add(int64(n))
		}
		if errors.Is(err, io.EOF) {
			closeWrite(dst)
			return
		}
		if err != nil {
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
