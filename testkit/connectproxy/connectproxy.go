// Package connectproxy is an HTTP CONNECT proxy on 127.0.0.1 for tests of
// egress through a proxy (rivora --egress-proxy): it tunnels every
// CONNECT it is asked for and records its target, so a test counts what
// went through it and sees which address was asked for (an IP, never a
// name, when the SSRF guard resolved it first).
package connectproxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
)

// Proxy is a running CONNECT proxy.
type Proxy struct {
	l  net.Listener
	wg sync.WaitGroup

	mu        sync.Mutex
	targets   []string
	upstreams map[string]bool
	conns     map[net.Conn]bool
}

// Start starts a proxy on 127.0.0.1; it stops when the test ends.
func Start(t testing.TB) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{l: l, conns: map[net.Conn]bool{}, upstreams: map[string]bool{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// URL is the proxy's address as --egress-proxy takes it.
func (p *Proxy) URL() string { return "http://" + p.l.Addr().String() }

// Targets are the CONNECT targets asked for so far (host:port), in order.
func (p *Proxy) Targets() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.targets...)
}

// Tunnelled reports whether a server's peer address (a request's
// RemoteAddr as the server saw it) is one of the proxy's own upstream
// connections: the request came through the proxy.
func (p *Proxy) Tunnelled(remote string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.upstreams[remote]
}

// Close stops the proxy and its tunnels.
func (p *Proxy) Close() {
	p.l.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.tunnel(c)
		}()
	}
}

// track registers a connection to close on Close (false once closed).
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = true
	return true
}

// tunnel answers one CONNECT and copies bytes both ways until either
// side closes.
func (p *Proxy) tunnel(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil || req.Method != http.MethodConnect {
		io.WriteString(c, "HTTP/1.1 405 Method Not Allowed\r\n\r\n")
		return
	}
	p.mu.Lock()
	p.targets = append(p.targets, req.Host)
	p.mu.Unlock()
	up, err := net.Dial("tcp", req.Host)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	defer up.Close()
	if !p.track(up) {
		return
	}
	p.mu.Lock()
	p.upstreams[up.LocalAddr().String()] = true
	p.mu.Unlock()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		io.Copy(up, br)
		up.Close()
		close(done)
	}()
	io.Copy(c, up)
	c.Close()
	<-done
}
