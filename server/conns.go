package server

import (
	"container/list"
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/bounds"
)

const (
	defaultMaxConns = 10_000
	// evictIdleAfter is how long a connection must have been idle before
	// a new one may take its place: a client that just connected gets
	// this long to send its request, even under a flood of connections.
	evictIdleAfter = time.Second
)

// maxConns is --max-connections (n), or when it is not given (0) its
// default from RLIMIT_NOFILE (Go has raised the soft limit to the hard one
// at start).
func maxConns(n int, log *slog.Logger) int {
	if n > 0 {
		return n
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur/2 >= defaultMaxConns {
		return defaultMaxConns
	}
	n = max(int(lim.Cur/2), 64)
	log.Warn("the open-file limit is low: capping client connections at half of it; raise it (ulimit -n) or set --max-connections", "open_file_limit", lim.Cur, "max_connections", n)
	return n
}

// connCap caps a server's open connections. It counts what its listener
// accepted and the server's ConnState reports as closed; it keeps the
// idle ones (new and not yet used, or between requests) in the order they
// became idle. At the cap, Accept closes the connection idle longest
// (evictIdleAfter at least) and takes the new one in its place, as nginx
// reuses keep-alive connections; with none idle long enough it waits for
// a connection to close or age, leaving new connections in the kernel's
// accept queue. Closing beats refusing: an idle connection costs its
// client nothing to open again, while a refused client is not served at
// all; and a flood of idle connections can never hold the port.
type connCap struct {
	net.Listener
	max int
	log *slog.Logger

	mu      sync.Mutex
	open    map[net.Conn]*list.Element // nil element: busy
	idle    *list.List                 // of *idleConn, oldest first
	changed chan struct{}              // signalled when a connection closes or turns idle
	evicted int
	// refusedConns counts connections let go for their refused calls.
	refusedConns int

	closed    chan struct{}
	closeOnce sync.Once
}

type idleConn struct {
	conn  net.Conn
	since time.Time
}

// capConns makes srv accept at most max connections from ln, and let go
// of a connection once maxRefusedPerConn of its calls were refused at the
// door (auth.OnRefusal).
func capConns(srv *http.Server, ln net.Listener, max int, log *slog.Logger) net.Listener {
	c := &connCap{Listener: ln, max: max, log: log, open: make(map[net.Conn]*list.Element), idle: list.New(), changed: make(chan struct{}, 1), closed: make(chan struct{})}
	prev := srv.ConnState
	srv.ConnState = func(conn net.Conn, state http.ConnState) {
		c.track(conn, state)
		if prev != nil {
			prev(conn, state)
		}
	}
	srv.ConnContext = func(ctx context.Context, conn net.Conn) context.Context {
		var refused atomic.Int32
		return auth.OnRefusal(ctx, func() bool {
			n := refused.Add(1)
			if n == maxRefusedPerConn {
				c.noteRefused()
			}
			return n >= maxRefusedPerConn
		})
	}
	return c
}

// maxRefusedPerConn is how many calls without a valid token (auth.Door)
// one connection may make before it is let go: a client with a wrong
// token learns it from the first answer, and a flood of such calls over
// HTTP/2 (maxStreams per connection) has to pay for a new
// connection every few calls, under --max-connections. (HTTP/1.1
// connections are closed after every refused call.)
const maxRefusedPerConn = 16

// noteRefused counts a connection let go for its refused calls.
func (c *connCap) noteRefused() {
	c.mu.Lock()
	c.refusedConns++
	n := c.refusedConns
	c.mu.Unlock()
	if n == 1 || n%1000 == 0 {
		c.log.Warn("letting go of connections that keep making calls without a valid token", "refused_calls_per_connection", maxRefusedPerConn, "closed_so_far", n)
	}
}

// Accept waits for room under the cap, then accepts.
func (c *connCap) Accept() (net.Conn, error) {
	for {
		ok, wait := c.room()
		if ok {
			break
		}
		select {
		case <-c.changed:
		case <-wait:
		case <-c.closed:
			return nil, net.ErrClosed
		}
	}
	conn, err := c.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.open[conn] = c.idle.PushBack(&idleConn{conn: conn, since: time.Now()})
	c.mu.Unlock()
	return conn, nil
}

// Close closes the listener and ends an Accept waiting for room.
func (c *connCap) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Listener.Close()
}

// room makes room for one more connection, closing the one idle longest
// if the cap is reached. Without room, wait fires when the oldest idle
// connection may be closed (nil, never, when none is idle: a close wakes
// Accept then).
func (c *connCap) room() (ok bool, wait <-chan time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.open) < c.max {
		return true, nil
	}
	front := c.idle.Front()
	if front == nil {
		return false, nil
	}
	oldest := front.Value.(*idleConn)
	if d := evictIdleAfter - time.Since(oldest.since); d > 0 {
		return false, time.After(d)
	}
	c.forget(oldest.conn)
	c.evicted++
	if c.evicted == 1 || c.evicted%1000 == 0 {
		c.log.Warn("connection cap reached: closing the connections idle longest to serve new ones", "max_connections", c.max, "closed_so_far", c.evicted)
	}
	go oldest.conn.Close() // a TLS close may wait on its peer
	return true, nil
}

// track follows the server's view of each connection.
func (c *connCap) track(conn net.Conn, state http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.open[conn]
	if !ok {
		return // evicted, or not one of ours
	}
	switch state {
	case http.StateActive:
		if el != nil {
			c.idle.Remove(el)
			c.open[conn] = nil
		}
	case http.StateIdle, http.StateNew:
		if el != nil {
			c.idle.Remove(el)
		}
		c.open[conn] = c.idle.PushBack(&idleConn{conn: conn, since: time.Now()})
		c.wake() // a waiting Accept may close it once it is old enough
	case http.StateClosed, http.StateHijacked:
		c.forget(conn)
	}
}

// forget drops conn from the count (mu held) and wakes a waiting Accept.
func (c *connCap) forget(conn net.Conn) {
	if el := c.open[conn]; el != nil {
		c.idle.Remove(el)
	}
	delete(c.open, conn)
	c.wake()
}

// wake tells a waiting Accept to look again.
func (c *connCap) wake() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

const (
	// idleTimeout closes keep-alive connections (HTTP/1.1, and HTTP/2
	// without streams) idle this long.
	idleTimeout = 2 * time.Minute
	// bodyTimeout bounds how long a request (headers and body) may take
	// to arrive (an 8 MiB batch within it is ~140 KB/s): a client that
	// trickles one cannot hold a connection and its buffer for ever. It is
	// http.Server.ReadTimeout, which ends no stream: on HTTP/1.1 the server
	// lifts the read deadline once the body is read, on HTTP/2 it bounds
	// each stream's body only (TestWatchOutlivesTheBodyTimeout).
	bodyTimeout = bounds.MaxBodyTime
)
