package errkind_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/rivora/rivora/internal/errkind"
)

// errBusy is a server's own class of error, answered by the also
// classifier below.
var errBusy = errors.New("busy")

func busy(err error) (connect.Code, bool) {
	return connect.CodeResourceExhausted, errors.Is(err, errBusy)
}

// AsConnect is the one place a domain error becomes a Connect code; the
// message a client reads stays the domain's.
func TestAsConnect(t *testing.T) {
	slow := connect.NewError(connect.CodeDeadlineExceeded, errors.New("slow"))
	cases := []struct {
		name string
		err  error
		code connect.Code
		// msg is the message the client reads ("": err's own).
		msg string
	}{
		{name: "invalid", err: errkind.Errorf(errkind.Invalid, "url %q must be absolute", "x"), code: connect.CodeInvalidArgument},
		{name: "not found", err: errkind.Errorf(errkind.NotFound, "destination %q does not exist", "orders"), code: connect.CodeNotFound},
		{name: "exists", err: errkind.Errorf(errkind.Exists, "destination %q already exists", "orders"), code: connect.CodeAlreadyExists},
		{name: "precondition", err: errkind.Errorf(errkind.Precondition, "not paused"), code: connect.CodeFailedPrecondition},
		{name: "unavailable", err: errkind.Tag(errkind.Unavailable, errors.New("no agent answers")), code: connect.CodeUnavailable},
		{name: "exhausted", err: errkind.Errorf(errkind.Exhausted, "over --max-destinations"), code: connect.CodeResourceExhausted},
		{name: "aborted", err: errkind.Errorf(errkind.Aborted, "lost a race"), code: connect.CodeAborted},
		{name: "denied", err: errkind.Errorf(errkind.Denied, "not yours"), code: connect.CodePermissionDenied},
		{name: "canceled kind", err: errkind.Errorf(errkind.Canceled, "replay interrupted"), code: connect.CodeCanceled},
		{name: "deadline kind", err: errkind.Errorf(errkind.Deadline, "store event: timeout"), code: connect.CodeDeadlineExceeded},
		{name: "wrapped", err: fmt.Errorf("address: %w", errkind.Errorf(errkind.Invalid, "bad")), code: connect.CodeInvalidArgument},
		{name: "outermost wins", err: errkind.Tag(errkind.Unavailable, fmt.Errorf("agent a: %w", errkind.Errorf(errkind.NotFound, "x"))), code: connect.CodeUnavailable},
		{name: "kind returned directly", err: errkind.NotFound, code: connect.CodeNotFound},
		{name: "kind wrapped", err: fmt.Errorf("lease: %w", errkind.Aborted), code: connect.CodeAborted},
		{name: "also classifier", err: fmt.Errorf("consul: %w", errBusy), code: connect.CodeResourceExhausted},
		{name: "a kind before also", err: errkind.Tag(errkind.Unavailable, errBusy), code: connect.CodeUnavailable},
		{name: "connect error keeps its code", err: fmt.Errorf("x: %w", slow), code: connect.CodeDeadlineExceeded, msg: "slow"},
		{name: "canceled", err: fmt.Errorf("watch: %w", context.Canceled), code: connect.CodeCanceled},
		{name: "deadline", err: fmt.Errorf("store: %w", context.DeadlineExceeded), code: connect.CodeDeadlineExceeded},
		{name: "anything else is internal", err: errors.New("disk full"), code: connect.CodeInternal},
	}
	for _, tc := range cases {
		got := errkind.AsConnect(tc.err, busy)
		if connect.CodeOf(got) != tc.code {
			t.Errorf("%s: %v answers %v, want %v", tc.name, tc.err, connect.CodeOf(got), tc.code)
		}
		if code := errkind.CodeOf(tc.err, busy); code != tc.code {
			t.Errorf("%s: CodeOf = %v, want %v", tc.name, code, tc.code)
		}
		want := tc.msg
		if want == "" {
			want = tc.err.Error()
		}
		var ce *connect.Error
		if !errors.As(got, &ce) || ce.Message() != want {
			t.Errorf("%s: message %q, want %q", tc.name, got, want)
		}
	}
	if errkind.AsConnect(nil) != nil {
		t.Error("AsConnect(nil) is not nil")
	}
	if code := errkind.CodeOf(nil); code != connect.CodeUnknown {
		t.Errorf("CodeOf(nil) = %v, want unknown (as connect.CodeOf)", code)
	}
	// Without the classifier, its class is just an error.
	if code := errkind.CodeOf(errBusy); code != connect.CodeInternal {
		t.Errorf("CodeOf(errBusy) without also = %v, want internal", code)
	}
}

// A tag is matched with errors.Is, for its kind only, and keeps what it
// wraps reachable.
func TestTagIs(t *testing.T) {
	err := fmt.Errorf("claim: %w", errkind.Tag(errkind.Exists, fmt.Errorf("key: %w", context.Canceled)))
	if !errors.Is(err, errkind.Exists) || errors.Is(err, errkind.Invalid) || !errors.Is(err, context.Canceled) {
		t.Errorf("errors.Is: Exists %v, Invalid %v, context.Canceled %v; want true, false, true",
			errors.Is(err, errkind.Exists), errors.Is(err, errkind.Invalid), errors.Is(err, context.Canceled))
	}
	if errkind.Tag(errkind.Invalid, nil) != nil {
		t.Error("Tag(kind, nil) is not nil")
	}
}

func TestCoded(t *testing.T) {
	for err, want := range map[error]bool{
		errkind.Errorf(errkind.Invalid, "x"):                                    true,
		fmt.Errorf("y: %w", errkind.Unavailable):                                true,
		fmt.Errorf("z: %w", connect.NewError(connect.CodeNotFound, errBusy)):    true,
		errors.New("disk full"):                                                 false,
		fmt.Errorf("store: %w", context.Canceled):                               false,
		errors.Join(errors.New("a"), errkind.Errorf(errkind.Precondition, "b")): true,
	} {
		if got := errkind.Coded(err); got != want {
			t.Errorf("Coded(%v) = %v, want %v", err, got, want)
		}
	}
}

// The interceptor maps what unary and streaming handlers return, and
// leaves a success alone.
func TestInterceptor(t *testing.T) {
	i := errkind.Interceptor(busy)
	ctx := context.Background()
	unary := i.WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
		return nil, errkind.Errorf(errkind.Precondition, "destination %q is not paused", "orders")
	})
	_, err := unary(ctx, nil)
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || err.Error() != `failed_precondition: destination "orders" is not paused` {
		t.Errorf("unary: %v (%v), want failed_precondition with the domain's message", err, connect.CodeOf(err))
	}
	ok := i.WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
		return connect.NewResponse(&struct{}{}), nil
	})
	if resp, err := ok(ctx, nil); err != nil || resp == nil {
		t.Errorf("unary success: %v, %v", resp, err)
	}
	stream := i.WrapStreamingHandler(func(context.Context, connect.StreamingHandlerConn) error {
		return fmt.Errorf("replay: %w", errBusy)
	})
	if err := stream(ctx, nil); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("streaming: %v, want resource_exhausted (also)", err)
	}
	done := i.WrapStreamingHandler(func(context.Context, connect.StreamingHandlerConn) error { return nil })
	if err := done(ctx, nil); err != nil {
		t.Errorf("streaming success: %v", err)
	}
}

// WithInfo's ErrorInfo reaches the Connect error; the kind still decides
// the code.
func TestWithInfo(t *testing.T) {
	err := errkind.AsConnect(fmt.Errorf("publish: %w", errkind.WithInfo(errkind.Errorf(errkind.Exists, "taken"), "REASON", map[string]string{"k": "v"})))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeAlreadyExists || len(ce.Details()) != 1 {
		t.Fatalf("AsConnect = %v, want already_exists with one detail", err)
	}
	v, derr := ce.Details()[0].Value()
	info, ok := v.(*errdetails.ErrorInfo)
	if derr != nil || !ok || info.GetReason() != "REASON" || info.GetDomain() != errkind.Domain || info.GetMetadata()["k"] != "v" {
		t.Fatalf("detail = %v (%v), want the ErrorInfo", v, derr)
	}
	if errkind.WithInfo(nil, "R", nil) != nil {
		t.Fatal("WithInfo(nil) is not nil")
	}
}

// WithAdvice's advice is in the message; WithoutAdvice gives the message
// without it, whatever wraps the advised error, and the kind still holds.
func TestWithoutAdvice(t *testing.T) {
	err := fmt.Errorf("replay batch: %w", errkind.Tag(errkind.Unavailable, errkind.WithAdvice(errors.New("store event: stream down"), "retry with the same key")))
	if got, want := err.Error(), "replay batch: store event: stream down; retry with the same key"; got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
	if got, want := errkind.WithoutAdvice(err), "replay batch: store event: stream down"; got != want {
		t.Errorf("WithoutAdvice = %q, want %q", got, want)
	}
	if !errors.Is(err, errkind.Unavailable) {
		t.Error("the advised error lost its kind")
	}
	plain := errors.New("store event: stream down; retry later")
	if got := errkind.WithoutAdvice(plain); got != plain.Error() {
		t.Errorf("WithoutAdvice of an error without advice = %q, want it whole", got)
	}
	if errkind.WithAdvice(nil, "x") != nil {
		t.Error("WithAdvice(nil) is not nil")
	}
}
