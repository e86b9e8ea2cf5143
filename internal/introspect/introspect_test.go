package introspect_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/introspect"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// server serves introspection for two rivora.v1 services over h2c, with
// one viewer token in force; down makes it unhealthy.
func server(t *testing.T) (url, token string, down *atomic.Bool) {
	t.Helper()
	token, id, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	keys := auth.NewKeys(auth.CellToken{})
	keys.SetTokens([]*rivorav1.ApiToken{{Id: id, Name: "viewer", Role: rivorav1.Role_ROLE_VIEWER, Hash: auth.Hash(token)}})
	down = new(atomic.Bool)
	healthy := func() error {
		if down.Load() {
			return errors.New("draining")
		}
		return nil
	}
	mux := http.NewServeMux()
	introspect.Handle(mux, keys, healthy, rivorav1connect.IngestServiceName, rivorav1connect.AdminServiceName, rivorav1connect.IngestServiceName)
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = l
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, token, down
}

func h2c() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}

func TestReflectionListsTheServicesToAnyValidToken(t *testing.T) {
	url, token, _ := server(t)
	client := grpcreflect.NewClient(h2c(), url, connect.WithGRPC())
	ctx := context.Background()
	stream := client.NewStream(ctx, grpcreflect.WithRequestHeaders(http.Header{"Authorization": {"Bearer " + token}}))
	defer stream.Close()
	names, err := stream.ListServices()
	if err != nil {
		t.Fatalf("ListServices with a viewer token: %v", err)
	}
	var got []string
	for _, n := range names {
		got = append(got, string(n))
	}
	slices.Sort(got)
	if want := []string{"grpc.health.v1.Health", rivorav1connect.AdminServiceName, rivorav1connect.IngestServiceName}; !slices.Equal(got, want) {
		t.Fatalf("services = %v, want %v", got, want)
	}
	files, err := stream.FileContainingSymbol(rivorav1connect.IngestServiceName)
	if err != nil || !slices.ContainsFunc(files, func(f *descriptorpb.FileDescriptorProto) bool { return f.GetName() == "rivora/v1/ingest.proto" }) {
		t.Fatalf("FileContainingSymbol(IngestService) = %d files, %v; want rivora/v1/ingest.proto among them", len(files), err)
	}

	for name, header := range map[string]http.Header{"no token": nil, "a wrong token": {"Authorization": {"Bearer rvk_nope"}}} {
		stream := client.NewStream(ctx, grpcreflect.WithRequestHeaders(header))
		_, err := stream.ListServices()
		stream.Close()
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("ListServices with %s: %v (code %v), want Unauthenticated", name, err, connect.CodeOf(err))
		}
	}
}

func TestHealthIsOpenAndFollowsHealthy(t *testing.T) {
	url, _, down := server(t)
	client := grpchealth.NewClient(h2c(), url, connect.WithGRPC())
	ctx := context.Background()
	check := func(service string) (grpchealth.Status, error) {
		resp, err := client.Check(ctx, &grpchealth.CheckRequest{Service: service})
		if err != nil {
			return 0, err
		}
		return resp.Status, nil
	}
	for _, service := range []string{"", rivorav1connect.IngestServiceName} {
		if st, err := check(service); err != nil || st != grpchealth.StatusServing {
			t.Fatalf("Check(%q) with no token = %v, %v; want SERVING", service, st, err)
		}
	}
	if _, err := check("rivora.v1.NoSuchService"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("Check of an unknown service: %v, want NotFound", err)
	}
	down.Store(true)
	if st, err := check(""); err != nil || st != grpchealth.StatusNotServing {
		t.Fatalf("Check while unhealthy = %v, %v; want NOT_SERVING", st, err)
	}
}
