package auth

import (
	"context"

	"connectrpc.com/connect"
)

// Bearer is a client interceptor that sends token on every call ("" sends
// nothing).
func Bearer(token string) connect.Interceptor {
	return bearerFunc(func(context.Context) string { return token })
}

// Forwarding is a client interceptor for calls made on a caller's behalf:
// it sends the token the caller of the context's call presented
// (ForwardToken).
func Forwarding() connect.Interceptor { return bearerFunc(ForwardToken) }

// bearerFunc sends the token it returns for the call's context.
type bearerFunc func(context.Context) string

func (f bearerFunc) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if t := f(ctx); req.Spec().IsClient && t != "" {
			req.Header().Set("Authorization", "Bearer "+t)
		}
		return next(ctx, req)
	}
}

func (f bearerFunc) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if t := f(ctx); t != "" {
			conn.RequestHeader().Set("Authorization", "Bearer "+t)
		}
		return conn
	}
}

func (bearerFunc) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
