package auth

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/errkind"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Interceptor authenticates and authorizes every call a handler gets,
// against Policies: the token (API or cell) from the Authorization
// header, the role, the request (Rule.Request, for every caller), and a
// scoped caller's answers (a publisher's or a customer token's:
// Rule.Answer). The caller is in the
// handler's context (FromContext). A stream's API token is checked again
// while it runs, and the stream ends once the token is revoked or
// expires (standing.go). Install it on handlers only, outermost but for
// error mapping.
type Interceptor struct {
	keys *Keys
}

// NewInterceptor checks calls against keys.
func NewInterceptor(keys *Keys) *Interceptor { return &Interceptor{keys: keys} }

// authorize finds procedure's rule and the caller it lets in, unless the
// Door already did (from the same headers) for this call.
func (i *Interceptor) authorize(ctx context.Context, procedure, header string) (Rule, *Principal, error) {
	if p, ok := admittedBy(ctx, procedure); ok {
		return Policies[procedure], p, nil
	}
	return authorize(ctx, i.keys, procedure, header)
}

// authorize finds procedure's rule and the caller it lets in. A call
// that comes before the process's first API tokens waits for them
// (awaitFirstTokens) within ctx.
func authorize(ctx context.Context, keys *Keys, procedure, header string) (Rule, *Principal, error) {
	rule, ok := Policies[procedure]
	if !ok {
		return Rule{}, nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s has no access policy: refused to everyone (a bug: add it to auth.Policies)", procedure))
	}
	if rule.Cell {
		p, err := keys.cellCaller(header)
		return rule, p, err
	}
	token, err := bearer(header)
	if err != nil {
		return rule, nil, err
	}
	if !keys.cell.Matches(token) {
		keys.awaitFirstTokens(ctx)
	}
	p, err := keys.user(token, rule.CellToo)
	if err != nil {
		return rule, nil, err
	}
	if !p.Cell && !slices.Contains(rule.Roles, p.Role) {
		err := errkind.Errorf(errkind.Denied, "token %s (%s) has role %s, which may not call %s (allowed: %s)", p.TokenID, p.Name, RoleName(p.Role), procedure, roleList(rule.Roles))
		return rule, nil, errkind.AsConnect(errkind.WithInfo(err, errkind.RoleNotAllowedReason, map[string]string{
			"role": RoleName(p.Role), "allowed": roleList(rule.Roles), "procedure": procedure,
		}))
	}
	return rule, p, nil
}

func roleList(roles []rivorav1.Role) string {
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = RoleName(r)
	}
	return strings.Join(names, ", ")
}

func (i *Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		rule, p, err := i.authorize(ctx, req.Spec().Procedure, req.Header().Get("Authorization"))
		if err != nil {
			return nil, err
		}
		if rule.Request != nil {
			if err := rule.Request(p, req.Any()); err != nil {
				return nil, err
			}
		}
		resp, err := next(WithPrincipal(ctx, p), req)
		if err == nil && rule.Answer != nil && p.Scoped() {
			if err := rule.Answer(p, resp.Any()); err != nil {
				return nil, err
			}
		}
		return resp, err
	}
}

func (i *Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		rule, p, err := i.authorize(ctx, conn.Spec().Procedure, conn.RequestHeader().Get("Authorization"))
		if err != nil {
			return err
		}
		if rule.Answer != nil || (rule.Request != nil && conn.Spec().StreamType != connect.StreamTypeServer) {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("%s: customer scopes are checked on the request of a server stream only (a bug in auth.Policies)", conn.Spec().Procedure))
		}
		if rule.Request != nil {
			conn = &checkedRequest{StreamingHandlerConn: conn, check: func(msg any) error { return rule.Request(p, msg) }}
		}
		// The token is checked again while the stream runs (standing.go):
		// the handler's context ends, and so do its sends and receives,
		// for a handler that does not watch its context (gRPC
		// reflection's).
		ctx, stop := i.keys.standing(ctx, conn.Spec().Procedure, p)
		err = next(WithPrincipal(ctx, p), &standingConn{StreamingHandlerConn: conn, ctx: ctx})
		if cut := stop(); cut != nil && err != nil {
			return cut // a stream that ended well as it was cut stays well
		}
		return err
	}
}

// checkedRequest checks a server stream's one request as the handler
// receives it, before the handler sees it.
type checkedRequest struct {
	connect.StreamingHandlerConn
	check func(msg any) error
}

func (c *checkedRequest) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	return c.check(msg)
}

// WrapStreamingClient leaves clients alone (handlers only).
func (*Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}
