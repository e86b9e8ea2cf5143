package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

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
