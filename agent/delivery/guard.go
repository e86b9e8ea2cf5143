package delivery

import (
	"crypto/tls"
	"net"
	"time"

	"github.com/rivora/rivora/internal/ssrf"
)

// Option configures a Sender.
type Option func(*options)

type options struct {
	resolver *net.Resolver
	tls      *tls.Config
	proxy    *EgressProxy
}

// WithTLSConfig makes https connections with cfg (its roots, say, for a
// private CA) instead of the system's defaults; the server name is
// always the URL's host.
func WithTLSConfig(cfg *tls.Config) Option {
	return func(o *options) { o.tls = cfg }
}

// WithResolver resolves destination host names with r instead of the
// system's resolver.
func WithResolver(r *net.Resolver) Option {
	return func(o *options) { o.resolver = r }
}

// dialer opens connections through guard: its Control hook refuses a
// denied address after the name is resolved, on each address it tries,
// so neither a name that resolves inside the network nor one that
// changes its answer gets through (a redirect is never followed either).
// Through an egress proxy the guard checks the resolved address before
// the CONNECT (egress.go).
func (o options) dialer(guard *ssrf.Guard) *egressDialer {
	return &egressDialer{
		direct:  &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Resolver: o.resolver, Control: guard.Control},
		toProxy: &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second},
		proxy:   o.proxy, guard: guard, resolver: o.resolver,
		unread: &unreadAnswers{}, refusals: &tlsRefusals{},
	}
}
