package auth

import (
	"context"
	"slices"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Principal is who a call comes from: an API token, or the cell.
type Principal struct {
	// TokenID and Name are the token's (Name "cell" for the cell token).
	TokenID, Name string
	Role          rivorav1.Role
	// Customers scope a publisher ("*" = any) or a customer token.
	Customers []string
	// Cell: the caller presented the cell token (an agent or control
	// plane), not an API token.
	Cell bool
	// bearer is the token presented, for a call made on the caller's
	// behalf (ForwardToken).
	bearer string
}

// MayActFor reports whether the principal may act for customer: any
// customer for admins, operators, viewers and the cell; a publisher only
// for the customers its token names ("*": any); a customer token only for
// the customers it names ("*" means nothing there: such a token is never
// made).
func (p *Principal) MayActFor(customer string) bool {
	switch p.Role {
	case rivorav1.Role_ROLE_PUBLISHER:
		return slices.Contains(p.Customers, "*") || slices.Contains(p.Customers, customer)
	case rivorav1.Role_ROLE_CUSTOMER:
		return customer != "" && customer != "*" && slices.Contains(p.Customers, customer)
	}
	return true
}

// Scoped reports whether the principal is limited to some customers: a
// publisher without "*", and every customer token.
func (p *Principal) Scoped() bool {
	switch p.Role {
	case rivorav1.Role_ROLE_PUBLISHER:
		return !slices.Contains(p.Customers, "*")
	case rivorav1.Role_ROLE_CUSTOMER:
		return true
	}
	return false
}

// SelfService reports whether the principal is a customer token: it sees
// only what its customers own (their events, subscriptions and own
// destinations), and anything else answers as if absent.
func (p *Principal) SelfService() bool { return p.Role == rivorav1.Role_ROLE_CUSTOMER }

// CallerMayActFor reports whether the caller of ctx's call may act for
// customer (Principal.MayActFor); true outside an authenticated call (no
// principal: auth is not configured, or an in-process call). A handler
// that finds an item by id and must not show another customer's calls it
// once it has the item, and answers exactly as for an absent id when it
// is false — ResendEvent on the agent, say:
//
//	if !auth.CallerMayActFor(ctx, ev.GetCustomerId()) {
//		return nil, auth.EventNotFound(id)
//	}
func CallerMayActFor(ctx context.Context, customer string) bool {
	p := FromContext(ctx)
	return p == nil || p.MayActFor(customer)
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext is the caller the interceptor authenticated (nil outside a
// call, or with the interceptor off).
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// ForwardToken is the token the caller of ctx's call presented, for a
// call made on its behalf ("" outside a call).
func ForwardToken(ctx context.Context) string {
	if p := FromContext(ctx); p != nil {
		return p.bearer
	}
	return ""
}

// Author is how the audit log names the caller: the token's name and id.
// Without a principal (no auth configured) it is fallback.
func Author(ctx context.Context, fallback string) (name, tokenID string) {
	if p := FromContext(ctx); p != nil && !p.Cell {
		return p.Name, p.TokenID
	}
	return fallback, ""
}

// RoleName is a role's name as the CLI spells it ("admin", ...).
func RoleName(r rivorav1.Role) string {
	switch r {
	case rivorav1.Role_ROLE_ADMIN:
		return "admin"
	case rivorav1.Role_ROLE_OPERATOR:
		return "operator"
	case rivorav1.Role_ROLE_VIEWER:
		return "viewer"
	case rivorav1.Role_ROLE_PUBLISHER:
		return "publisher"
	case rivorav1.Role_ROLE_CUSTOMER:
		return "customer"
	}
	return "unknown"
}

// ParseRole reads a role's CLI name.
func ParseRole(s string) (rivorav1.Role, bool) {
	for _, r := range []rivorav1.Role{rivorav1.Role_ROLE_ADMIN, rivorav1.Role_ROLE_OPERATOR, rivorav1.Role_ROLE_VIEWER, rivorav1.Role_ROLE_PUBLISHER, rivorav1.Role_ROLE_CUSTOMER} {
		if RoleName(r) == s {
			return r, true
		}
	}
	return rivorav1.Role_ROLE_UNSPECIFIED, false
}
