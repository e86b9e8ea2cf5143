package auth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// streams serves the two kinds of stream: Replay (API tokens) and an
// agent's Watch (the cell token). Each handler sends a message at once
// and then one per value on more, until its context ends; ended gets the
// handler's context cause as it returns.
type streams struct {
	rivorav1connect.UnimplementedArchiveServiceHandler
	rivorav1connect.UnimplementedAgentServiceHandler
	more  chan struct{}
	ended chan error
	// deaf: the handler never looks at its context (as gRPC reflection's
	// does not): it sends on each value on more, until a send fails.
	deaf bool
	// quit ends a deaf handler as the test ends (before its server
	// closes, which waits for handlers).
	quit chan struct{}
}

func (s *streams) serve(ctx context.Context, send func() error) error {
	for {
		if err := send(); err != nil {
			return err
		}
		if s.deaf {
			select {
			case <-s.more:
			case <-s.quit:
				return nil
			}
			continue
		}
		select {
		case <-ctx.Done():
			s.ended <- context.Cause(ctx)
			return ctx.Err()
		case <-s.more:
		}
	}
}

func (s *streams) Replay(ctx context.Context, _ *connect.Request[rivorav1.ReplayRequest], stream *connect.ServerStream[rivorav1.ReplayResponse]) error {
	return s.serve(ctx, func() error { return stream.Send(&rivorav1.ReplayResponse{}) })
}

func (s *streams) Watch(ctx context.Context, _ *connect.Request[rivorav1.WatchRequest], stream *connect.ServerStream[rivorav1.WatchResponse]) error {
	return s.serve(ctx, func() error { return stream.Send(&rivorav1.WatchResponse{}) })
}

// streamServer serves streams behind the door and the interceptor of keys.
func streamServer(t *testing.T, keys *auth.Keys) (string, *streams) {
	t.Helper()
	s := &streams{more: make(chan struct{}), ended: make(chan error, 4), quit: make(chan struct{})}
	opt := connect.WithInterceptors(auth.NewInterceptor(keys))
	mux := http.NewServeMux()
	path, h := rivorav1connect.NewArchiveServiceHandler(s, opt)
	mux.Handle(path, auth.Door(keys, nil, h))
	path, h = rivorav1connect.NewAgentServiceHandler(s, opt)
	mux.Handle(path, auth.Door(keys, nil, h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(s.quit) }) // before srv.Close
	return srv.URL, s
}

const cellSecret = "0123456789abcdef0123456789abcdef"

func apiToken(t *testing.T, role rivorav1.Role, expires time.Time) (string, *rivorav1.ApiToken) {
	t.Helper()
	token, id, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	info := &rivorav1.ApiToken{Id: id, Name: "ops", Role: role, Hash: auth.Hash(token)}
	if !expires.IsZero() {
		info.ExpiresAt = timestamppb.New(expires)
	}
	return token, info
}

// openReplay opens a Replay stream with token and takes its first message.
func openReplay(t *testing.T, url, token string) *connect.ServerStreamForClient[rivorav1.ReplayResponse] {
	t.Helper()
	client := rivorav1connect.NewArchiveServiceClient(http.DefaultClient, url, connect.WithInterceptors(auth.Bearer(token)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	stream, err := client.Replay(ctx, connect.NewRequest(&rivorav1.ReplayRequest{Filter: &rivorav1.DeadLetterFilter{DestinationId: "orders"}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stream.Close() })
	if !stream.Receive() {
		t.Fatalf("no first message: %v", stream.Err())
	}
	return stream
}

// streamEnd waits for a stream to end and returns its error.
func streamEnd[T any](stream *connect.ServerStreamForClient[T]) error {
	for stream.Receive() {
	}
	return stream.Err()
}

// A stream opened with an API token ends, unauthenticated and saying why,
// once the token is revoked: the handler's context ends with the same
// reason. The cell token's stream (an agent's Watch) is not touched by the
// API tokens' changes.
func TestRevocationEndsAStream(t *testing.T) {
	keys := auth.NewKeys(auth.CellTokenOf(cellSecret))
	token, info := apiToken(t, rivorav1.Role_ROLE_OPERATOR, time.Time{})
	_, other := apiToken(t, rivorav1.Role_ROLE_VIEWER, time.Time{})
	keys.SetTokens([]*rivorav1.ApiToken{info, other})
	url, s := streamServer(t, keys)

	agents := rivorav1connect.NewAgentServiceClient(http.DefaultClient, url, connect.WithInterceptors(auth.Bearer(cellSecret)))
	watch, err := agents.Watch(context.Background(), connect.NewRequest(&rivorav1.WatchRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	if !watch.Receive() {
		t.Fatalf("Watch: no first message: %v", watch.Err())
	}
	replay := openReplay(t, url, token)

	keys.SetTokens([]*rivorav1.ApiToken{info}) // the other one revoked
	keys.SetTokens(nil)                        // this one too
	err = streamEnd(replay)
	if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "token "+info.GetId()+" (ops) was revoked while its call /rivora.v1.ArchiveService/Replay was streaming") {
		t.Fatalf("replay after its token was revoked: %v; want unauthenticated, saying it was revoked", err)
	}
	if cause := <-s.ended; connect.CodeOf(cause) != connect.CodeUnauthenticated {
		t.Fatalf("the handler's context ended with %v; want the revocation", cause)
	}
	// The agent's Watch goes on: one more message reaches it.
	s.more <- struct{}{}
	if !watch.Receive() {
		t.Fatalf("the cell token's Watch ended with the API tokens' change: %v", watch.Err())
	}
	select {
	case cause := <-s.ended:
		t.Fatalf("a handler ended with %v; only the replay's should have", cause)
	default:
	}
}

// A stream outlives no expiry: it ends, unauthenticated, within about a
// second of its token's expiry, not before.
func TestExpiryEndsAStream(t *testing.T) {
	keys := auth.NewKeys(auth.CellTokenOf(cellSecret))
	expires := time.Now().Add(1500 * time.Millisecond)
	token, info := apiToken(t, rivorav1.Role_ROLE_OPERATOR, expires)
	keys.SetTokens([]*rivorav1.ApiToken{info})
	url, _ := streamServer(t, keys)
	replay := openReplay(t, url, token)
	err := streamEnd(replay)
	if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "expired at "+expires.UTC().Format(time.RFC3339)) {
		t.Fatalf("replay past its token's expiry: %v; want unauthenticated, saying when it expired", err)
	}
	if time.Now().Before(expires) {
		t.Fatalf("the stream ended before its token expired (%s)", expires.Format(time.RFC3339Nano))
	}
}

// A handler that never looks at its context is cut too: its next send
// fails with the revocation (gRPC reflection's answered on).
func TestRevocationEndsAStreamWhoseHandlerIgnoresItsContext(t *testing.T) {
	keys := auth.NewKeys(auth.CellTokenOf(cellSecret))
	token, info := apiToken(t, rivorav1.Role_ROLE_OPERATOR, time.Time{})
	keys.SetTokens([]*rivorav1.ApiToken{info})
	url, s := streamServer(t, keys)
	s.deaf = true
	replay := openReplay(t, url, token)
	keys.SetTokens(nil)
	// The handler sends on until a send fails (the first may come before
	// the watch saw the change).
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case s.more <- struct{}{}:
			case <-done:
				return
			}
		}
	}()
	if err := streamEnd(replay); connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "was revoked") {
		t.Fatalf("a deaf handler's stream after its token was revoked: %v; want unauthenticated, saying it was revoked", err)
	}
}
