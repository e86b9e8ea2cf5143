// Package errkind is the one error style of Rivora's servers. Domain code
// returns plain errors tagged with a kind (Errorf, Tag) and never builds a
// Connect error; the Interceptor, installed where auth and bounds are,
// turns the kind into a Connect code at the edge (AsConnect). The control
// plane and the agent share it.
package errkind

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// Kind is a kind of domain error, answered with one Connect code. Kinds
// are sentinel errors: match them with errors.Is.
type Kind struct {
	msg  string
	code connect.Code
}

// New is a kind with its message (what Error says when the kind itself is
// returned) and the Connect code it answers with.
func New(msg string, code connect.Code) *Kind { return &Kind{msg: msg, code: code} }

func (k *Kind) Error() string { return k.msg }

// Code is the Connect code the kind answers with.
func (k *Kind) Code() connect.Code { return k.code }

// The kinds every server uses.
var (
	// Invalid: the request itself is wrong.
	Invalid = New("invalid request", connect.CodeInvalidArgument)
	// NotFound: what the request names does not exist.
	NotFound = New("not found", connect.CodeNotFound)
	// Exists: what the request creates exists already.
	Exists = New("already exists", connect.CodeAlreadyExists)
	// Precondition: the request is valid but the state it needs is not
	// there, e.g. resuming a destination that is not paused.
	Precondition = New("failed precondition", connect.CodeFailedPrecondition)
	// Unavailable: this server cannot serve it now (not the leader, the
	// partition is not here, no agent answers); retrying may succeed.
	Unavailable = New("unavailable", connect.CodeUnavailable)
	// Exhausted: the request would go over a configured cap.
	Exhausted = New("resource exhausted", connect.CodeResourceExhausted)
	// Aborted: lost a race with a concurrent writer; retry.
	Aborted = New("aborted", connect.CodeAborted)
	// Denied: the caller may not do this.
	Denied = New("permission denied", connect.CodePermissionDenied)
	// Unauthenticated: the call carries no valid credentials.
	Unauthenticated = New("unauthenticated", connect.CodeUnauthenticated)
	// Canceled: the work stopped because its caller went away; running it
	// again resumes or retries it.
	Canceled = New("canceled", connect.CodeCanceled)
	// Deadline: the work did not finish within the time its caller gave
	// it (or the caller went away first); retrying may succeed.
	Deadline = New("deadline exceeded", connect.CodeDeadlineExceeded)
)

// kindError is an error tagged with a kind. Its message is the wrapped
// error's alone: users read the same text as before the tag.
type kindError struct {
	kind *Kind
	err  error
}

func (e *kindError) Error() string        { return e.err.Error() }
func (e *kindError) Unwrap() error        { return e.err }
func (e *kindError) Is(target error) bool { return target == e.kind }

// Tag marks err as being of kind (nil stays nil).
func Tag(kind *Kind, err error) error {
	if err == nil {
		return nil
	}
	return &kindError{kind: kind, err: err}
}

// Errorf is fmt.Errorf tagged with kind.
func Errorf(kind *Kind, format string, args ...any) error {
	return Tag(kind, fmt.Errorf(format, args...))
}

// AsConnect is the one mapping from domain errors to Connect errors. The
// outermost tag wins, then a kind returned as such, then what also says
// (a server's own classes, e.g. a failed Consul request); an error that is
// already a Connect error keeps its code; a cancelled or expired context
// answers Canceled or DeadlineExceeded; anything else is Internal. The
// message stays the domain's. nil stays nil.
func AsConnect(err error, also ...func(error) (connect.Code, bool)) error {
	if err == nil {
		return nil
	}
	ce := asConnect(err, also)
	var d *detailed
	if errors.As(err, &d) {
		if detail, derr := connect.NewErrorDetail(d.info); derr == nil {
			ce.AddDetail(detail)
		}
	}
	return ce
}

func asConnect(err error, also []func(error) (connect.Code, bool)) *connect.Error {
	var ke *kindError
	if errors.As(err, &ke) {
		return connect.NewError(ke.kind.code, err)
	}
	var k *Kind
	if errors.As(err, &k) {
		return connect.NewError(k.code, err)
	}
	for _, classify := range also {
		if code, ok := classify(err); ok {
			return connect.NewError(code, err)
		}
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

// Domain is the ErrorInfo domain of Rivora's machine-readable error
// details (WithInfo).
const Domain = "rivora.dev"

// detailed is an error with a machine-readable detail, which AsConnect
// attaches to the Connect error (a client reads it from the error's
// details rather than from its message).
type detailed struct {
	err  error
	info *errdetails.ErrorInfo
}

func (d *detailed) Error() string { return d.err.Error() }
func (d *detailed) Unwrap() error { return d.err }

// WithInfo attaches a google.rpc.ErrorInfo (reason, Domain, metadata) to
// err; nil stays nil. Its kind, if any, still decides the code.
func WithInfo(err error, reason string, metadata map[string]string) error {
	if err == nil {
		return nil
	}
	return &detailed{err: err, info: &errdetails.ErrorInfo{Reason: reason, Domain: Domain, Metadata: metadata}}
}

// NotLeaderReason is the ErrorInfo reason of a follower's Unavailable:
// its metadata's "leader" is the leading control plane's URL when the
// follower knows it, so an agent or rivoractl goes there at once rather
// than retrying the follower.
const NotLeaderReason = "NOT_LEADER"

// EdgeNameInUseReason is the ErrorInfo reason of the control plane's
// AlreadyExists to an edge process (`rivora edge`) whose name another
// running edge process holds: its metadata's "edge" is the name. The
// edge refuses to start (or, refused while running, stops) rather than
// join the cell under a name that is another's.
const EdgeNameInUseReason = "EDGE_NAME_IN_USE"

// InvalidLimitReason is the ErrorInfo reason of an InvalidArgument for a
// destination limit out of its bounds: its metadata's "field" is the
// Limits field (max_attempts), "bound" what it must be and "got" the
// value refused, so a client names its own flag or form field for it.
const InvalidLimitReason = "INVALID_LIMIT"

// LimitReachedReason is the ErrorInfo reason of a ResourceExhausted that
// refuses a request for a cap the cell keeps (a customer's subscriptions,
// --max-destinations, the catalogue's size, the edges registered), as
// opposed to back-pressure: waiting does not help, deleting something or
// raising the cap does. Its metadata's "limit" names the cap and "max" is
// its value.
const LimitReachedReason = "LIMIT_REACHED"

// RoleNotAllowedReason is the ErrorInfo reason of a PermissionDenied for
// a token whose role may not make the call: its metadata's "role" is the
// token's role, "allowed" the roles that may ("admin, operator") and
// "procedure" the call, so a client names what its user ran (rivoractl:
// the command) rather than the RPC path.
const RoleNotAllowedReason = "ROLE_NOT_ALLOWED"

// ArchiveUnavailableReason is the ErrorInfo reason of an agent's
// Unavailable to GetDeadLetter when the archive could not be read and the
// dead letter does not wait in that agent's ledgers: its metadata's
// "archive_error" is why the archive could not be read. The control plane
// then asks every agent's ledgers rather than the next agent's archive.
const ArchiveUnavailableReason = "ARCHIVE_UNAVAILABLE"

// Info is the metadata of the ErrorInfo of Domain with reason that err (a
// Connect error, wrapped or not) carries; ok false when it has none.
func Info(err error, reason string) (metadata map[string]string, ok bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil, false
	}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		info, isInfo := v.(*errdetails.ErrorInfo)
		if derr == nil && isInfo && info.GetReason() == reason && info.GetDomain() == Domain {
			return info.GetMetadata(), true
		}
	}
	return nil, false
}

// Leader is the leading control plane's URL that a follower's answer
// (err) names, or "".
func Leader(err error) string {
	md, _ := Info(err, NotLeaderReason)
	return md["leader"]
}

// CodeOf is the Connect code AsConnect answers err with (with also), for
// domain code that records or reports the code an error will reach the
// client with. nil is CodeUnknown, as for connect.CodeOf.
func CodeOf(err error, also ...func(error) (connect.Code, bool)) connect.Code {
	return connect.CodeOf(AsConnect(err, also...))
}

// Coded reports whether err says its own code: a kind (tagged, or
// returned as such) or a Connect error. An error that does not answers
// Internal (or, for a context's, Canceled or DeadlineExceeded), so code
// that knows better tags it first.
func Coded(err error) bool {
	var ke *kindError
	var k *Kind
	var ce *connect.Error
	return errors.As(err, &ke) || errors.As(err, &k) || errors.As(err, &ce)
}

// Interceptor turns the errors handlers return into Connect errors through
// AsConnect (with also). It wraps handlers only; install it outermost, so
// the gates inside it (auth, bounds, a leader check) may return kinds too.
func Interceptor(also ...func(error) (connect.Code, bool)) connect.Interceptor {
	return interceptor{also: also}
}

type interceptor struct {
	also []func(error) (connect.Code, bool)
}

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		if err != nil {
			return nil, AsConnect(err, i.also...)
		}
		return resp, nil
	}
}

func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return AsConnect(next(ctx, conn), i.also...)
	}
}

// WrapStreamingClient leaves clients alone (handlers only).
func (interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// advised is an error with advice for the caller that met it ("retry
// with the same idempotency key"), kept apart from the error so that
// code which is not that caller (a replay re-ingesting dead letters)
// can tell the error without advice that is not its own.
type advised struct {
	err    error
	advice string
}

func (e *advised) Error() string { return e.err.Error() + "; " + e.advice }
func (e *advised) Unwrap() error { return e.err }

// WithAdvice adds advice for the caller to err's message ("err; advice").
func WithAdvice(err error, advice string) error {
	if err == nil {
		return nil
	}
	return &advised{err: err, advice: advice}
}

// WithoutAdvice is err's message without the advice WithAdvice added to
// it (the first, if several did), whatever wraps it.
func WithoutAdvice(err error) string {
	msg := err.Error()
	var a *advised
	if errors.As(err, &a) {
		return strings.Replace(msg, a.Error(), a.err.Error(), 1)
	}
	return msg
}
