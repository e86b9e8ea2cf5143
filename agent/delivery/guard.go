package delivery

import (
	"errors"
	"net"
	"time"

	"github.com/rivora/rivora/internal/ssrf"
)

// Option configures a Sender.
type Option func(*options)

type options struct {
	guarded  bool
	guard    *ssrf.Guard
	resolver *net.Resolver
}

// WithGuard makes every connection the sender opens pass guard: its
// dialer refuses a denied address after the name is resolved, on each
// address it tries, so neither a name that resolves inside the network
// nor one that changes its answer gets through (a redirect is never
// followed either). A nil guard denies by default. Without this option
// the sender dials anything: the agent always gives one.
func WithGuard(guard *ssrf.Guard) Option {
	return func(o *options) { o.guarded, o.guard = true, guard }
}

// WithResolver resolves destination host names with r instead of the
// system's resolver.
func WithResolver(r *net.Resolver) Option {
	return func(o *options) { o.resolver = r }
}

func (o options) dialer() *net.Dialer {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Resolver: o.resolver}
	if o.guarded {
		d.Control = o.guard.Control
	}
	return d
}

// refusal is the guard's refusal inside a transport error, nil if none.
func refusal(err error) error {
	var refused *ssrf.RefusedError
	if errors.As(err, &refused) {
		return refused
	}
	return nil
}
