package auth

import (
	"context"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
)

// A stream outlives the check made as it opened: a replay runs for
// minutes, a reflection stream as long as its client keeps it open. So
// while a handler serves a stream opened with an API token (a customer's
// included), the interceptor keeps the token standing: it checks it again
// whenever this process's tokens change (SetTokens: a revocation arrives
// so) and every recheckEvery (an expiry is a matter of time alone), and
// once the token no longer authenticates, or its role may no longer make
// the call, it ends the handler's context, the reason as its cause, and
// the call ends with that reason (Unauthenticated). A handler ends as for
// a caller that hung up: a replay keeps its marks, and a re-run with a
// valid token resumes.
//
// The cell token is not watched: it is fixed for a process's life
// (rotating it means restarting every process, docs/security.md), so an
// agent's Watch and an edge's WatchEdge are never cut by this.

// recheckEvery bounds how long an expired token's stream runs on: about a
// second, at the cost of one hash and one map read per open stream.
const recheckEvery = time.Second

// standing returns ctx for the handler of a stream p opened on procedure,
// ended (its cause the reason) once p's token no longer stands there, and
// stop, to call once the handler returned: it ends the watch and returns
// the reason the stream was cut, nil if it was not.
func (k *Keys) standing(ctx context.Context, procedure string, p *Principal) (context.Context, func() error) {
	if p.Cell || p.bearer == "" {
		return ctx, func() error { return nil }
	}
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	var cut error
	go func() {
		defer close(done)
		if cut = k.watch(ctx, procedure, p); cut != nil {
			cancel(cut)
		}
	}()
	return ctx, func() error {
		cancel(nil)
		<-done
		return cut
	}
}

// watch checks p's token on procedure until it no longer stands (the
// reason) or ctx ends (nil).
func (k *Keys) watch(ctx context.Context, procedure string, p *Principal) error {
	tick := time.NewTicker(recheckEvery)
	defer tick.Stop()
	for {
		changed := k.changes() // before the check: a change during it is not missed
		if err := k.stands(procedure, p); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}

// stands says why p's token may no longer stream procedure (nil: it may):
// revoked, expired, or of a role the procedure's rule no longer lets in.
func (k *Keys) stands(procedure string, p *Principal) error {
	t, ok := k.byHash()[Hash(p.bearer)]
	var why string
	switch {
	case !ok:
		why = "was revoked"
	case t.GetExpiresAt() != nil && !k.now().Before(t.GetExpiresAt().AsTime()):
		why = "expired at " + t.GetExpiresAt().AsTime().UTC().Format(time.RFC3339)
	case !slices.Contains(Policies[procedure].Roles, t.GetRole()):
		why = fmt.Sprintf("has role %s, which may no longer call it", RoleName(t.GetRole()))
	default:
		return nil
	}
	return connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("token %s (%s) %s while its call %s was streaming: the stream ends here; call again with a valid token", p.TokenID, p.Name, why, procedure))
}

// standingConn is a stream whose sends and receives fail once its
// token's watch cut it (the cause of ctx, Unauthenticated).
type standingConn struct {
	connect.StreamingHandlerConn
	ctx context.Context
}

func (c *standingConn) cut() error {
	if cause := context.Cause(c.ctx); cause != nil && connect.CodeOf(cause) == connect.CodeUnauthenticated {
		return cause
	}
	return nil
}

func (c *standingConn) Send(msg any) error {
	if err := c.cut(); err != nil {
		return err
	}
	return c.StreamingHandlerConn.Send(msg)
}

func (c *standingConn) Receive(msg any) error {
	if err := c.cut(); err != nil {
		return err
	}
	return c.StreamingHandlerConn.Receive(msg)
}
