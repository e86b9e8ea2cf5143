package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// blockingTokens answers WhoAmI once released.
type blockingTokens struct {
	rivorav1connect.UnimplementedTokenServiceHandler
	entered chan struct{}
	release chan struct{}
}

func (b *blockingTokens) WhoAmI(ctx context.Context, _ *connect.Request[rivorav1.WhoAmIRequest]) (*connect.Response[rivorav1.WhoAmIResponse], error) {
	b.entered <- struct{}{}
	<-b.release
	return connect.NewResponse(&rivorav1.WhoAmIResponse{}), nil
}

// Beyond --max-inflight-requests an API call is answered
// resource_exhausted at once, in its protocol; probes are never counted;
// a slot given back serves the next call.
func TestInflightCap(t *testing.T) {
	svc := &blockingTokens{entered: make(chan struct{}, 4), release: make(chan struct{})}
	mux := baseMux(func() error { return nil }, false, "")
	mux.Handle(rivorav1connect.NewTokenServiceHandler(svc))
	srv := httptest.NewServer(capInflight(2, slog.New(slog.DiscardHandler), mux))
	defer srv.Close()

	held := make(chan error, 2)
	for _, opt := range []connect.ClientOption{connect.WithGRPC(), connect.WithProtoJSON()} {
		c := rivorav1connect.NewTokenServiceClient(srv.Client(), srv.URL, opt)
		go func() {
			_, err := c.WhoAmI(context.Background(), connect.NewRequest(&rivorav1.WhoAmIRequest{}))
			held <- err
		}()
		<-svc.entered
	}
	for name, opt := range map[string]connect.ClientOption{"gRPC": connect.WithGRPC(), "gRPC-Web": connect.WithGRPCWeb(), "Connect": connect.WithProtoJSON()} {
		c := rivorav1connect.NewTokenServiceClient(srv.Client(), srv.URL, opt)
		_, err := c.WhoAmI(context.Background(), connect.NewRequest(&rivorav1.WhoAmIRequest{}))
		if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "--max-inflight-requests") {
			t.Errorf("%s call beyond the cap: %v, want resource_exhausted naming --max-inflight-requests", name, err)
		}
	}
	resp, err := srv.Client().Get(srv.URL + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz at the cap: %v %v, want 200", resp, err)
	}
	resp.Body.Close()

	close(svc.release)
	for range 2 {
		if err := <-held; err != nil {
			t.Fatalf("a call within the cap: %v", err)
		}
	}
	c := rivorav1connect.NewTokenServiceClient(srv.Client(), srv.URL)
	if _, err := c.WhoAmI(context.Background(), connect.NewRequest(&rivorav1.WhoAmIRequest{})); err != nil {
		t.Fatalf("a call once slots are back: %v", err)
	}
}

// A connection that keeps making calls without a valid token is closed
// after maxRefusedPerConn of them (its client has to connect again),
// while a caller with a valid token keeps its one connection.
func TestConnectionClosedAfterRefusedCalls(t *testing.T) {
	keys := auth.NewKeys(auth.CellTokenOf("0123456789abcdef0123456789abcdef"))
	token, id, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	keys.SetTokens([]*rivorav1.ApiToken{{Id: id, Name: "ci", Role: rivorav1.Role_ROLE_VIEWER, Hash: auth.Hash(token)}})
	path, h := rivorav1connect.NewTokenServiceHandler(&whoAmIOK{}, connect.WithInterceptors(auth.NewInterceptor(keys)))
	mux := http.NewServeMux()
	mux.Handle(path, auth.Door(keys, nil, h))
	addr := startServer(t, time.Minute, 100, mux)

	for _, c := range []struct {
		name, token string
		wantDials   func(int) bool
	}{
		{"refused", auth.TokenPrefix + "unknown", func(n int) bool { return n >= 3 }},
		{"admitted", token, func(n int) bool { return n == 1 }},
	} {
		var dials atomic.Int32
		tr := &http.Transport{Protocols: new(http.Protocols), DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}
		tr.Protocols.SetUnencryptedHTTP2(true)
		client := rivorav1connect.NewTokenServiceClient(&http.Client{Transport: tr}, "http://"+addr, connect.WithGRPC())
		for range 3 * maxRefusedPerConn {
			req := connect.NewRequest(&rivorav1.WhoAmIRequest{})
			req.Header().Set("Authorization", "Bearer "+c.token)
			_, err := client.WhoAmI(context.Background(), req)
			if c.name == "admitted" && err != nil {
				t.Fatalf("admitted call: %v", err)
			}
			if c.name == "refused" && connect.CodeOf(err) != connect.CodeUnauthenticated && connect.CodeOf(err) != connect.CodeUnavailable {
				t.Fatalf("refused call: %v, want unauthenticated (or unavailable as its connection closes)", err)
			}
		}
		tr.CloseIdleConnections()
		if n := int(dials.Load()); !c.wantDials(n) {
			t.Errorf("%s: %d calls took %d connections", c.name, 3*maxRefusedPerConn, n)
		}
	}
}

type whoAmIOK struct {
	rivorav1connect.UnimplementedTokenServiceHandler
}

func (whoAmIOK) WhoAmI(context.Context, *connect.Request[rivorav1.WhoAmIRequest]) (*connect.Response[rivorav1.WhoAmIResponse], error) {
	return connect.NewResponse(&rivorav1.WhoAmIResponse{}), nil
}

// One caller holding half the slots may not take the last quarter: its
// next call is refused while the other callers' calls go in, up to the
// cap itself.
func TestInflightCapKeepsAQuarterForOthers(t *testing.T) {
	svc := &blockingTokens{entered: make(chan struct{}, 8), release: make(chan struct{})}
	mux := baseMux(func() error { return nil }, false, "")
	mux.Handle(rivorav1connect.NewTokenServiceHandler(svc))
	srv := httptest.NewServer(capInflight(8, slog.New(slog.DiscardHandler), mux))
	defer srv.Close()
	client := rivorav1connect.NewTokenServiceClient(srv.Client(), srv.URL)
	callAs := func(header string) error {
		req := connect.NewRequest(&rivorav1.WhoAmIRequest{})
		if header != "" {
			req.Header().Set("Authorization", header)
		}
		_, err := client.WhoAmI(context.Background(), req)
		return err
	}
	call := func(token string) error {
		if token == "" {
			return callAs("")
		}
		return callAs("Bearer " + token)
	}
	held := make(chan error, 8)
	hold := func(token string, n int) {
		for range n {
			go func() { held <- call(token) }()
			<-svc.entered
		}
	}
	hold("flood", 4)
	hold("other", 2) // six of eight taken
	if err := call("flood"); connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "other callers") {
		t.Fatalf("the flooding caller's fifth call with six of eight slots taken: %v, want resource_exhausted keeping the rest for other callers", err)
	}
	if err := callAs("bearer   flood "); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("the flooding caller's token spelled another way: %v, want it counted as the same caller", err)
	}
	hold("other", 1)
	hold("", 1) // calls without a token are held to no share
	if err := call("third"); connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "--max-inflight-requests") {
		t.Fatalf("a call beyond the cap: %v, want resource_exhausted", err)
	}
	close(svc.release)
	for range 8 {
		if err := <-held; err != nil {
			t.Fatalf("a call within the shares: %v", err)
		}
	}
	if err := call("flood"); err != nil {
		t.Fatalf("the flooding caller once slots are back: %v", err)
	}
}
