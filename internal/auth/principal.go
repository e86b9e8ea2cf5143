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
	// Customers scope a publisher ("*" = any).
	Customers []string
	// Cell: the caller presented the cell token (an agent or control
	// plane), not an API token.
	Cell bool
	// bearer is the token presented, for a call made on the caller's
	// behalf (ForwardToken).
	bearer string
}

// MayActFor reports whether the principal may act for customer: any
// customer for every role but publisher; a publisher only for the
// customers its token names.
func (p *Principal) MayActFor(customer string) bool {
	if p.Role != rivorav1.Role_ROLE_PUBLISHER {
		return true
	}
	return slices.Contains(p.Customers, "*") || slices.Contains(p.Customers, customer)
}

// Scoped reports whether the principal is limited to some customers.
func (p *Principal) Scoped() bool {
	return p.Role == rivorav1.Role_ROLE_PUBLISHER && !slices.Contains(p.Customers, "*")
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
	}
	return "unknown"
}

// ParseRole reads a role's CLI name.
func ParseRole(s string) (rivorav1.Role, bool) {
	for _, r := range []rivorav1.Role{rivorav1.Role_ROLE_ADMIN, rivorav1.Role_ROLE_OPERATOR, rivorav1.Role_ROLE_VIEWER, rivorav1.Role_ROLE_PUBLISHER} {
		if RoleName(r) == s {
			return r, true
		}
	}
	return rivorav1.Role_ROLE_UNSPECIFIED, false
}
