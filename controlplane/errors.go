package controlplane

import (
	"errors"
	"strconv"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/errkind"
)

// The kinds of domain error (internal/errkind, shared with the agent).
// Domain code tags an error with its kind (errorf, tag) without changing
// its message; asConnect, at the API edge, turns the kind into a Connect
// code. Match them with errors.Is.
var (
	ErrInvalid      = errkind.Invalid
	ErrNotFound     = errkind.NotFound
	ErrExists       = errkind.Exists
	ErrPrecondition = errkind.Precondition
	// ErrUnavailable: this control plane cannot serve it now, e.g. it is
	// not the leader or no agent answers; retrying may succeed.
	ErrUnavailable = errkind.Unavailable
	// ErrExhausted: the request would go over a configured cap, e.g.
	// --max-destinations.
	ErrExhausted = errkind.Exhausted
	// ErrDenied: the caller may not do that (its scope).
	ErrDenied = errkind.Denied
)

// tag marks err as being of kind (nil stays nil).
func tag(kind *errkind.Kind, err error) error { return errkind.Tag(kind, err) }

// errorf is fmt.Errorf tagged with kind.
func errorf(kind *errkind.Kind, format string, args ...any) error {
	return errkind.Errorf(kind, format, args...)
}

// limitReached is the error for a request over a cap the cell keeps
// (ErrExhausted, reason LimitReachedReason): limit names the cap, max is
// its value.
func limitReached(limit string, max int, format string, args ...any) error {
	return errkind.WithInfo(errorf(ErrExhausted, format, args...), errkind.LimitReachedReason, map[string]string{"limit": limit, "max": strconv.Itoa(max)})
}

// notFound is the error for a destination id that is not registered.
func notFound(id string) error {
	return errorf(ErrNotFound, "destination %q does not exist; see `rivoractl destinations list`", id)
}

// asConnect is the one mapping from domain errors to Connect errors, used
// where the RPCs are served (errorInterceptor): errkind's, with a failed
// Consul request Unavailable. nil stays nil.
func asConnect(err error) error { return errkind.AsConnect(err, consulUnavailable) }

// consulUnavailable: a failed Consul request is Unavailable (retry).
func consulUnavailable(err error) (connect.Code, bool) {
	var consulErr *consulError
	return connect.CodeUnavailable, errors.As(err, &consulErr)
}

// errorInterceptor turns the domain errors handlers (and the gates inside
// it) return into Connect errors, through asConnect.
var errorInterceptor = errkind.Interceptor(consulUnavailable)
