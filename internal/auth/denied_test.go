package auth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/errkind"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// A role refused a call is told so in words any client shows (the token,
// its role, the call, the roles that may), and in an ErrorInfo a client
// reads to name what its user ran instead of the RPC path.
func TestARoleRefusedCarriesItsRoleAndTheAllowedOnes(t *testing.T) {
	viewer, viewerID, _ := auth.NewToken()
	keys := auth.NewKeys(auth.CellTokenOf(strings.Repeat("c", 32)))
	keys.SetTokens([]*rivorav1.ApiToken{{Id: viewerID, Name: "dash", Role: rivorav1.Role_ROLE_VIEWER, Hash: auth.Hash(viewer)}})
	path, h := rivorav1connect.NewTokenServiceHandler(&whoAmI{}, connect.WithInterceptors(auth.NewInterceptor(keys)))
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	req := connect.NewRequest(&rivorav1.ListTokensRequest{})
	req.Header().Set("Authorization", "Bearer "+viewer)
	_, err := rivorav1connect.NewTokenServiceClient(http.DefaultClient, srv.URL).ListTokens(context.Background(), req)
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("ListTokens as a viewer: %v, want permission_denied", err)
	}
	want := "token " + viewerID + " (dash) has role viewer, which may not call /rivora.v1.TokenService/ListTokens (allowed: admin)"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want the server's words %q", err, want)
	}
	md, ok := errkind.Info(err, errkind.RoleNotAllowedReason)
	if !ok || md["role"] != "viewer" || md["allowed"] != "admin" || md["procedure"] != rivorav1connect.TokenServiceListTokensProcedure {
		t.Errorf("ErrorInfo %v (found %v), want role viewer, allowed admin and the procedure", md, ok)
	}
}
