package delivery

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/rivora/rivora/internal/ssrf"
)

// Egress through an HTTP CONNECT proxy (--egress-proxy), so that
// deliveries leave from the proxy's known addresses. The SSRF guard still
// decides by the destination's own address: the agent resolves the name
// itself, checks every address with the guard, and asks the proxy to
// CONNECT to the address it chose (an IP, never the name). Were the proxy
// to resolve the name, the guard would see only the proxy's address, and
// a name that resolves inside the network (or rebinds between a check and
// the proxy's lookup) would get through. The TLS server name and the Host
// header stay the URL's host.

// EgressProxy is where deliveries go out: an HTTP proxy that tunnels
// with CONNECT, and the destinations that bypass it.
type EgressProxy struct {
	// addr is the proxy's host:port; auth its Proxy-Authorization value
	// ("" without credentials in the URL).
	addr, auth string
	shown      string // the URL without credentials, for logs and errors
	// noProxyHosts (lower case, a name and its subdomains) and
	// noProxyNets are dialled directly.
	noProxyHosts []string
	noProxyNets  []netip.Prefix
}

// ParseEgressProxy reads --egress-proxy (http://[user:password@]HOST:PORT)
// and --egress-no-proxy (host names, which cover their subdomains, IP
// addresses and CIDRs). Errors say which value is wrong and what is
// expected.
func ParseEgressProxy(raw string, noProxy []string) (*EgressProxy, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Hostname() == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("--egress-proxy %q: want http://HOST:PORT (an HTTP proxy that tunnels with CONNECT; https:// proxies are not supported)", redactURL(raw))
	}
	p := &EgressProxy{addr: u.Host, shown: "http://" + u.Host}
	if u.User != nil {
		password, _ := u.User.Password()
		p.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+password))
	}
	for _, v := range noProxy {
		v = strings.ToLower(strings.TrimSpace(v))
		switch {
		case v == "":
			continue
		case strings.Contains(v, "/"):
			pfx, err := netip.ParsePrefix(v)
			if err != nil {
				return nil, fmt.Errorf("--egress-no-proxy %q: not a CIDR (want 10.0.0.0/8, an address or a host name)", v)
			}
			p.noProxyNets = append(p.noProxyNets, pfx.Masked())
		default:
			if a, err := netip.ParseAddr(v); err == nil {
				p.noProxyNets = append(p.noProxyNets, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
				continue
			}
			p.noProxyHosts = append(p.noProxyHosts, strings.TrimPrefix(strings.TrimPrefix(v, "*"), "."))
		}
	}
	return p, nil
}

// String describes the proxy for logs: its address and what bypasses it.
func (p *EgressProxy) String() string {
	s := p.shown
	var bypass []string
	bypass = append(bypass, p.noProxyHosts...)
	for _, n := range p.noProxyNets {
		bypass = append(bypass, n.String())
	}
	if len(bypass) > 0 {
		s += " (not for " + strings.Join(bypass, ", ") + ")"
	}
	return s
}

// redactURL hides a proxy URL's password in messages.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	at := strings.LastIndex(raw, "@")
	if at < 0 {
		return raw
	}
	scheme := ""
	if i := strings.Index(raw, "://"); i >= 0 && i < at {
		scheme = raw[:i+3]
	}
	return scheme + "xxxxx" + raw[at:] // what is before @ may be a password
}

// bypassHost reports a host the no-proxy list names.
func (p *EgressProxy) bypassHost(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, h := range p.noProxyHosts {
		if host == h || strings.HasSuffix(host, "."+h) {
			return true
		}
	}
	return false
}

func (p *EgressProxy) bypassAddr(a netip.Addr) bool {
	for _, n := range p.noProxyNets {
		if n.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// WithEgressProxy sends every delivery (and OAuth2 token fetch) through
// p, except those its no-proxy list names.
func WithEgressProxy(p *EgressProxy) Option {
	return func(o *options) { o.proxy = p }
}

// egressDialer opens the agent's outgoing connections: directly, through
// direct's Control hook (the SSRF guard), or through the proxy after the
// guard checked the address the name resolves to.
type egressDialer struct {
	direct *net.Dialer
	// toProxy dials the proxy itself: no guard (the operator chose it,
	// and it is usually on a private address).
	toProxy  *net.Dialer
	proxy    *EgressProxy
	guard    *ssrf.Guard
	resolver *net.Resolver
	// unread are the connections of every client dialed here whose
	// answer was left unread past its deadline.
	unread *unreadAnswers
	// refusals are the TLS alerts read on the connections of every
	// https client dialed here.
	refusals *tlsRefusals
}

// timeout is the dial timeout, bounding a connection and its CONNECT.
func (e *egressDialer) timeout() time.Duration { return e.direct.Timeout }

// DialContext connects to addr (host:port), through the proxy unless
// none is set or its no-proxy list names the host or the address.
func (e *egressDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if e.proxy == nil {
		return e.direct.DialContext(ctx, network, addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if e.proxy.bypassHost(host) {
		return e.direct.DialContext(ctx, network, addr)
	}
	ip, err := e.resolveChecked(ctx, host)
	if err != nil {
		return nil, err
	}
	target := net.JoinHostPort(ip.String(), port)
	if e.proxy.bypassAddr(ip) {
		return e.direct.DialContext(ctx, network, target)
	}
	return e.connect(ctx, target)
}

// resolveChecked resolves host (an address stays itself) and returns the
// first of its addresses the guard allows, or the guard's refusal of the
// first one when it allows none.
func (e *egressDialer) resolveChecked(ctx context.Context, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a, e.guard.CheckAddr(a)
	}
	resolver := e.resolver
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	addrs, err := resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, err
	}
	var refused error
	for _, a := range addrs {
		// The resolver answers IPv4 in its IPv6-mapped form; the guard
		// names it, and the proxy dials it, as the IPv4 address it is.
		a = a.Unmap()
		err := e.guard.CheckAddr(a)
		if err == nil {
			return a, nil
		}
		if refused == nil {
			refused = err
		}
	}
	if refused == nil {
		return netip.Addr{}, fmt.Errorf("lookup %s: no address", host)
	}
	return netip.Addr{}, refused
}

// connect opens a tunnel to target (ip:port) through the proxy.
func (e *egressDialer) connect(ctx context.Context, target string) (net.Conn, error) {
	conn, err := e.toProxy.DialContext(ctx, "tcp", e.proxy.addr)
	if err != nil {
		return nil, fmt.Errorf("egress proxy %s: %w", e.proxy.shown, err)
	}
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if e.proxy.auth != "" {
		req += "Proxy-Authorization: " + e.proxy.auth + "\r\n"
	}
	if _, err := conn.Write([]byte(req + "\r\n")); err != nil {
		conn.Close()
		return nil, fmt.Errorf("egress proxy %s: CONNECT %s: %w", e.proxy.shown, target, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("egress proxy %s: CONNECT %s: %w", e.proxy.shown, target, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		conn.Close()
		return nil, fmt.Errorf("egress proxy %s refused CONNECT %s: %s", e.proxy.shown, target, resp.Status)
	}
	if br.Buffered() > 0 {
		// Nothing comes through a fresh tunnel before the client speaks
		// (HTTP and TLS both start with the client).
		conn.Close()
		return nil, fmt.Errorf("egress proxy %s: bytes before the tunnel to %s was used", e.proxy.shown, target)
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}
