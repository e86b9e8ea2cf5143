package controlplane

import (
	"context"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// scope is what a caller may see and change: everything (admins,
// operators, viewers, in-process calls), or, for a customer token
// (auth.Principal.SelfService), only what its customers own — their
// subscriptions and the destinations they own. What is out of scope is
// answered exactly as an absent id is (notFound, subscriptionNotFound),
// so an answer never tells that another customer's item exists. The
// policy table lets customer tokens in only on the RPCs that scope
// (auth.Rule.Owned).
type scope struct {
	p *auth.Principal // nil: everything
}

// everything is the scope of in-process calls.
var everything = scope{}

// scopeOf is the scope of ctx's caller.
func scopeOf(ctx context.Context) scope {
	if p := auth.FromContext(ctx); p != nil && p.SelfService() {
		return scope{p: p}
	}
	return everything
}

// limited reports whether the scope is a customer token's.
func (s scope) limited() bool { return s.p != nil }

// customer reports whether the caller may act for customer c.
func (s scope) customer(c string) bool { return s.p == nil || s.p.MayActFor(c) }

// destination reports whether the caller may see destination d: a
// customer token only those its customers own.
func (s scope) destination(d *rivorav1.Destination) bool {
	return s.p == nil || (d.GetOwnerCustomer() != "" && s.p.MayActFor(d.GetOwnerCustomer()))
}

// subscription reports whether the caller may see subscription sub.
func (s scope) subscription(sub *rivorav1.Subscription) bool { return s.customer(sub.GetCustomerId()) }

// shown is destination d (an answer) as the caller may see it: a
// customer token sees its own destination without the operators'
// steering (their override, with its author and reason, and what the
// destination was configured with), without who paused it (an
// operator's token name; the reason stays: it is the owner's to read,
// and Rivora's own "rivora" stays) and without other customers' weights.
func (s scope) shown(d *rivorav1.Destination) *rivorav1.Destination {
	if s.p == nil {
		return d
	}
	d.Override, d.Configured = nil, nil
	for _, p := range d.GetPauses() {
		if p.GetAuthor() != RivoraAuthor {
			p.Author = ""
		}
	}
	for c := range d.GetCustomerWeights() {
		if !s.customer(c) {
			delete(d.CustomerWeights, c)
		}
	}
	return d
}
