package controlplane

import (
	"context"

	"connectrpc.com/connect"
)

// The gates every admin, token, agent and operator RPC passes, installed
// once where the services are registered (gated) so that no handler can
// forget one: errorInterceptor, leaderInterceptor, then auth.Interceptor
// (authentication and authorization, against auth.Policies).

// leaderInterceptor refuses every call while gate returns an error: only
// the leading control plane answers (gate is leaderOnly). The refusal is a
// domain error, turned into a Connect code by errorInterceptor outside it.
type leaderInterceptor struct {
	gate func() error
}

func (i leaderInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := i.gate(); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (i leaderInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := i.gate(); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// WrapStreamingClient leaves clients alone: the control plane installs
// this interceptor on handlers only.
func (leaderInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}
