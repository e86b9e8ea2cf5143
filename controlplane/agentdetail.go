package controlplane

import (
	"context"
	"errors"
	"log/slog"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/errkind"
)

// The router's own failures (an agent down, none able to read the
// archive) are worded for operators: they name the agents, their
// internal addresses and the agents' raw errors, which may name a bucket
// or an endpoint. A customer token (auth.Principal.SelfService) may make
// some of the same calls, through the customer portal, and must learn
// none of that. So such an error is built once, marked (agentsFailed),
// and hideAgentsInterceptor swaps a marked error for hiddenAgentsErr
// when the caller is a customer token; every other caller keeps the
// detail. The ledgers' answers hide the same detail in their fields
// (auth.UnreadLedgersFor, auth.ArchiveErrorFor).

// agentDetailError is an error whose message names agents, their
// addresses or their errors (mostly Unavailable: agentsFailed). Its
// message, kind and wrapped errors are err's: errors.Is, errors.As and
// errkind see through it.
type agentDetailError struct {
	err error
}

func (e *agentDetailError) Error() string { return e.err.Error() }
func (e *agentDetailError) Unwrap() error { return e.err }

// agentsFailed is err tagged Unavailable and marked as naming agents (nil
// stays nil).
func agentsFailed(err error) error {
	if err == nil {
		return nil
	}
	return &agentDetailError{err: tag(ErrUnavailable, err)}
}

// hiddenAgentsMessage is what a customer token is told instead of a
// marked error.
const hiddenAgentsMessage = "the cell could not answer this call right now; retry"

// hiddenAgentsErr is a marked Unavailable (or Deadline) error as a
// customer token is told it: without the agents' names, addresses or
// errors. One of another code is told hiddenFailureMessage with its code
// (hiddenAs): a retry would not help it.
var hiddenAgentsErr = tag(ErrUnavailable, errors.New(hiddenAgentsMessage))

// hiddenFailureMessage is what a customer token is told instead of a
// marked error that a retry would not mend.
const hiddenFailureMessage = "the cell could not answer this call"

// hiddenAs is marked error err as a customer token is told it.
func hiddenAs(err error) error {
	switch code := errkind.CodeOf(err); code {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeUnknown:
		return hiddenAgentsErr
	default:
		return connect.NewError(code, errors.New(hiddenFailureMessage))
	}
}

// hideAgentsInterceptor swaps an error marked as naming agents
// (agentDetailError, anywhere in its chain) for hiddenAgentsErr when the
// caller is a customer token (hiddenAgents), and logs the detail so that
// operators still have it. It must sit inside auth's interceptor, which
// puts the caller's principal in the handler's context, and inside
// errorInterceptor, which turns hiddenAgentsErr's kind into its code.
type hideAgentsInterceptor struct {
	log *slog.Logger
}

func (i hideAgentsInterceptor) hide(ctx context.Context, procedure string, err error) error {
	var detail *agentDetailError
	if err == nil || !hiddenAgents(ctx) || !errors.As(err, &detail) {
		return err
	}
	i.log.Info("agents' failure hidden from a customer token", "procedure", procedure, "err", err)
	return hiddenAs(err)
}

func (i hideAgentsInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		if err != nil {
			return nil, i.hide(ctx, req.Spec().Procedure, err)
		}
		return resp, nil
	}
}

func (i hideAgentsInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return i.hide(ctx, conn.Spec().Procedure, next(ctx, conn))
	}
}

// WrapStreamingClient leaves clients alone (handlers only).
func (hideAgentsInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}
