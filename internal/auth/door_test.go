package auth_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// whoAmI answers WhoAmI with the caller the interceptor saw.
type whoAmI struct {
	rivorav1connect.UnimplementedTokenServiceHandler
	calls atomic.Int32
}

func (w *whoAmI) WhoAmI(ctx context.Context, _ *connect.Request[rivorav1.WhoAmIRequest]) (*connect.Response[rivorav1.WhoAmIResponse], error) {
	w.calls.Add(1)
	p := auth.FromContext(ctx)
	return connect.NewResponse(&rivorav1.WhoAmIResponse{Token: &rivorav1.ApiToken{Name: p.Name}}), nil
}

// doorServer serves TokenService behind the door and the interceptor, over
// HTTP/1.1 and h2c, and returns its address, the handler, and a counter
// of request bodies the server began to read.
func doorServer(t *testing.T, keys *auth.Keys, gate func() error) (string, *whoAmI, *atomic.Int32) {
	t.Helper()
	svc := &whoAmI{}
	path, h := rivorav1connect.NewTokenServiceHandler(svc, connect.WithInterceptors(auth.NewInterceptor(keys)))
	var reads atomic.Int32
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = readCounter{r.Body, &reads}
		h.ServeHTTP(w, r)
	})
	mux := http.NewServeMux()
	mux.Handle(path, auth.Door(keys, gate, counted))
	srv := &http.Server{Handler: mux, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), svc, &reads
}

type readCounter struct {
	io.ReadCloser
	n *atomic.Int32
}

func (r readCounter) Read(p []byte) (int, error) {
	r.n.Add(1)
	return r.ReadCloser.Read(p)
}

func transport(proto string) *http.Transport {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	if proto == "h2c" {
		tr.Protocols.SetUnencryptedHTTP2(true)
	} else {
		tr.Protocols.SetHTTP1(true)
	}
	return tr
}

// A call without a valid token is answered from its headers: the answer
// arrives while its body has not even begun to arrive, no body is read and
// no handler runs. A valid token goes through, checked once.
func TestDoorRefusesBeforeTheBody(t *testing.T) {
	keys := auth.NewKeys(auth.CellTokenOf("0123456789abcdef0123456789abcdef"))
	token, id, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	keys.SetTokens([]*rivorav1.ApiToken{{Id: id, Name: "ci", Role: rivorav1.Role_ROLE_VIEWER, Hash: auth.Hash(token)}})
	addr, svc, reads := doorServer(t, keys, nil)

	for _, proto := range []string{"http/1.1", "h2c"} {
		t.Run(proto, func(t *testing.T) {
			tr := transport(proto)
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			for _, header := range []string{"", "Bearer " + auth.TokenPrefix + "unknown", "Basic abc"} {
				body, stall := io.Pipe() // a body that never arrives
				req, _ := http.NewRequest(http.MethodPost, "http://"+addr+rivorav1connect.TokenServiceWhoAmIProcedure, body)
				req.Header.Set("Content-Type", "application/json")
				if header != "" {
					req.Header.Set("Authorization", header)
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("Authorization %q: %v", header, err)
				}
				msg, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				stall.Close()
				if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(msg), `"code":"unauthenticated"`) {
					t.Fatalf("Authorization %q: %d %s, want 401 unauthenticated", header, resp.StatusCode, msg)
				}
			}
			if n := reads.Load(); n != 0 {
				t.Fatalf("the server read refused bodies %d times", n)
			}
			if n := svc.calls.Load(); n != 0 {
				t.Fatalf("the handler ran %d times for refused calls", n)
			}
		})
	}

	client := rivorav1connect.NewTokenServiceClient(http.DefaultClient, "http://"+addr)
	req := connect.NewRequest(&rivorav1.WhoAmIRequest{})
	req.Header().Set("Authorization", "Bearer "+token)
	resp, err := client.WhoAmI(context.Background(), req)
	if err != nil || resp.Msg.GetToken().GetName() != "ci" {
		t.Fatalf("a valid token: %v, %v; want ci", resp, err)
	}
}

// A gate (the control plane's leader gate) answers before any token is
// judged: a follower says Unavailable, never Unauthenticated.
func TestDoorGateFirst(t *testing.T) {
	keys := auth.NewKeys(auth.CellTokenOf("0123456789abcdef0123456789abcdef"))
	keys.SetTokens(nil)
	follower := connect.NewError(connect.CodeUnavailable, errors.New("not the leader"))
	addr, svc, _ := doorServer(t, keys, func() error { return follower })
	client := rivorav1connect.NewTokenServiceClient(http.DefaultClient, "http://"+addr, connect.WithGRPC())
	req := connect.NewRequest(&rivorav1.WhoAmIRequest{})
	req.Header().Set("Authorization", "Bearer "+auth.TokenPrefix+"unknown")
	_, err := client.WhoAmI(context.Background(), req)
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "not the leader") {
		t.Fatalf("through a closed gate: %v, want unavailable: not the leader", err)
	}
	if svc.calls.Load() != 0 {
		t.Fatal("the handler ran behind a closed gate")
	}
}
