package auth

import (
	"context"
	"net/http"
	"time"

	"connectrpc.com/connect"
)

// Door puts the checks that need only a call's headers in front of h, so
// that a caller without a valid token costs the server no body read, no
// decode and no handler: an unauthenticated client trickling bodies on
// thousands of streams is answered and let go at once instead of holding
// a goroutine and its buffers per stream until the body timeout.
//
// For a procedure in Policies it runs gate first (nil: none; the control
// plane's leader gate, so a follower answers Unavailable before judging a
// token it may not know yet), then authenticates and authorizes the caller
// as the Interceptor does (token, cell token, role). A refusal is written
// in the caller's protocol (Connect, gRPC, gRPC-Web) without reading the
// body, and an HTTP/1.1 connection is closed after it. An admitted caller
// goes on with its principal in the request's context, where the
// Interceptor finds it: the token is checked once per call. Calls Policies
// does not name (the open health check) pass untouched.
func Door(keys *Keys, gate func() error, h http.Handler) http.Handler {
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		procedure := r.URL.Path
		if _, ok := Policies[procedure]; !ok {
			h.ServeHTTP(w, r)
			return
		}
		err := gateErr(gate)
		var p *Principal
		if err == nil {
			_, p, err = authorize(r.Context(), keys, procedure, r.Header.Get("Authorization"))
		}
		if err != nil {
			refuse(w, r, errs, err)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), admittedKey{}, admitted{procedure: procedure, principal: p})))
	})
}

func gateErr(gate func() error) error {
	if gate == nil {
		return nil
	}
	return gate()
}

type refusalsKey struct{}

// OnRefusal returns a connection's context (http.Server.ConnContext) in
// which the Door, each time it refuses a call, asks enough whether the
// connection has made enough such calls to be let go: the server's way
// to end a connection that keeps making calls it may not make.
func OnRefusal(ctx context.Context, enough func() bool) context.Context {
	return context.WithValue(ctx, refusalsKey{}, enough)
}

// refuse answers err without reading the request's body. An HTTP/1.1
// connection is closed after the answer: the server would otherwise read
// what is left of a small body before it reuses the connection (as long
// as the client takes to send it). An HTTP/2 connection is let go (GOAWAY,
// then closed once its streams are answered) when OnRefusal's enough says
// so.
func refuse(w http.ResponseWriter, r *http.Request, errs *connect.ErrorWriter, err error) {
	enough, _ := r.Context().Value(refusalsKey{}).(func() bool)
	switch {
	case r.ProtoMajor == 1:
		w.Header().Set("Connection", "close")
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	case enough != nil && enough():
		w.Header().Set("Connection", "close") // HTTP/2: a graceful GOAWAY
	}
	_ = errs.Write(w, r, err)
}

type admittedKey struct{}

// admitted is what the Door let in: which call, and who makes it.
type admitted struct {
	procedure string
	principal *Principal
}

// admittedBy returns the principal the Door admitted to procedure in ctx.
func admittedBy(ctx context.Context, procedure string) (*Principal, bool) {
	a, ok := ctx.Value(admittedKey{}).(admitted)
	if !ok || a.procedure != procedure {
		return nil, false
	}
	return a.principal, true
}
