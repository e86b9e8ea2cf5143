package controlplane

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
)

// The kinds of domain error. Domain code tags an error with its kind
// (errorf, tag) without changing its message; asConnect, at the API edge,
// turns the kind into a Connect code. Match them with errors.Is.
var (
	// ErrInvalid: the request itself is wrong (InvalidArgument).
	ErrInvalid = errors.New("invalid request")
	// ErrNotFound: what the request names does not exist (NotFound).
	ErrNotFound = errors.New("not found")
	// ErrExists: what the request creates exists already (AlreadyExists).
	ErrExists = errors.New("already exists")
	// ErrPrecondition: the request is valid but the state it needs is not
	// there, e.g. resuming a destination that is not paused
	// (FailedPrecondition).
	ErrPrecondition = errors.New("failed precondition")
	// ErrUnavailable: this control plane cannot serve it now, e.g. it is
	// not the leader or no agent answers; retrying may succeed
	// (Unavailable).
	ErrUnavailable = errors.New("unavailable")
	// ErrExhausted: the request would go over a configured cap, e.g.
	// --max-destinations (ResourceExhausted).
	ErrExhausted = errors.New("resource exhausted")
)

// kindError is an error tagged with one of the kinds above. Its message is
// the wrapped error's alone: users read the same text as before the tag.
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string        { return e.err.Error() }
func (e *kindError) Unwrap() error        { return e.err }
func (e *kindError) Is(target error) bool { return target == e.kind }

// tag marks err as being of kind (nil stays nil).
func tag(kind, err error) error {
	if err == nil {
		return nil
	}
	return &kindError{kind: kind, err: err}
}

// errorf is fmt.Errorf tagged with kind.
func errorf(kind error, format string, args ...any) error {
	return tag(kind, fmt.Errorf(format, args...))
}

// notFound is the error for a destination id that is not registered.
func notFound(id string) error {
	return errorf(ErrNotFound, "destination %q does not exist; see `rivoractl destinations list`", id)
}

// kindCodes is the Connect code each kind answers with.
var kindCodes = []struct {
	kind error
	code connect.Code
}{
	{ErrInvalid, connect.CodeInvalidArgument},
	{ErrNotFound, connect.CodeNotFound},
	{ErrExists, connect.CodeAlreadyExists},
	{ErrPrecondition, connect.CodeFailedPrecondition},
	{ErrUnavailable, connect.CodeUnavailable},
	{ErrExhausted, connect.CodeResourceExhausted},
	// Lost a write race with another control plane: retry.
	{ErrConflict, connect.CodeAborted},
	// A deposed leader's fenced write.
	{ErrNotLeader, connect.CodeUnavailable},
}

// asConnect is the one mapping from domain errors to Connect errors, used
// where the RPCs are served (errorInterceptor). The outermost kind wins; a
// failed Consul request is Unavailable; an error that is already a Connect
// error keeps its code; anything else is Internal. nil stays nil.
func asConnect(err error) error {
	if err == nil {
		return nil
	}
	var ke *kindError
	if errors.As(err, &ke) {
		return connect.NewError(codeOf(ke.kind), err)
	}
	for _, kc := range kindCodes {
		if errors.Is(err, kc.kind) {
			return connect.NewError(kc.code, err)
		}
	}
	var consulErr *consulError
	if errors.As(err, &consulErr) {
		return connect.NewError(connect.CodeUnavailable, err)
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	switch {
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}

func codeOf(kind error) connect.Code {
	for _, kc := range kindCodes {
		if kc.kind == kind {
			return kc.code
		}
	}
	return connect.CodeInternal
}
