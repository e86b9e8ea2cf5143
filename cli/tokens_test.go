package cli

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/rig"
)

// fakeTokens serves TokenService like the control plane: it keeps hashes,
// answers a new token once, and records requests.
type fakeTokens struct {
	rivorav1connect.UnimplementedTokenServiceHandler

	mu      sync.Mutex
	tokens  []*rivorav1.ApiToken
	creates []*rivorav1.CreateTokenRequest
	revokes []string
	lists   int
}

func (f *fakeTokens) CreateToken(_ context.Context, req *connect.Request[rivorav1.CreateTokenRequest]) (*connect.Response[rivorav1.CreateTokenResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates = append(f.creates, proto.Clone(req.Msg).(*rivorav1.CreateTokenRequest))
	token, id, err := auth.NewToken()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	info := &rivorav1.ApiToken{Id: id, Name: req.Msg.GetName(), Role: req.Msg.GetRole(), Customers: req.Msg.GetCustomers(),
		CreatedAt: fixedTime, Hash: auth.Hash(token), CreatedBy: "tok_bootstrap00000000"}
	if ttl := req.Msg.GetTtl(); ttl != nil {
		info.ExpiresAt = timestamppb.New(time.Now().Add(ttl.AsDuration()))
	}
	f.tokens = append(f.tokens, info)
	answer := proto.Clone(info).(*rivorav1.ApiToken)
	answer.Hash = ""
	return connect.NewResponse(&rivorav1.CreateTokenResponse{TokenInfo: answer, Token: token, Version: 42}), nil
}

// ListTokens answers with the hashes left in, as a buggy server would: the
// CLI must not print them either way.
func (f *fakeTokens) ListTokens(context.Context, *connect.Request[rivorav1.ListTokensRequest]) (*connect.Response[rivorav1.ListTokensResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	return connect.NewResponse(&rivorav1.ListTokensResponse{Tokens: f.tokens}), nil
}

func (f *fakeTokens) RevokeToken(_ context.Context, req *connect.Request[rivorav1.RevokeTokenRequest]) (*connect.Response[rivorav1.RevokeTokenResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revokes = append(f.revokes, req.Msg.GetId())
	i := slices.IndexFunc(f.tokens, func(t *rivorav1.ApiToken) bool { return t.GetId() == req.Msg.GetId() })
	if i < 0 {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("token %q not found", req.Msg.GetId()))
	}
	f.tokens = slices.Delete(f.tokens, i, i+1)
	return connect.NewResponse(&rivorav1.RevokeTokenResponse{Version: 43}), nil
}

func TestTokensCreate(t *testing.T) {
	f, url := startFake(t)
	r := mustSucceed(t, run(t, url, "", "tokens", "create", "--name", "acme-app", "--role", "publisher", "--customer", "acme", "--customer", "globex", "--ttl", "90d"))
	want := &rivorav1.CreateTokenRequest{Name: "acme-app", Role: rivorav1.Role_ROLE_PUBLISHER, Customers: []string{"acme", "globex"}, Ttl: durationpb.New(90 * 24 * time.Hour)}
	if len(f.tokens.creates) != 1 || !proto.Equal(f.tokens.creates[0], want) {
		t.Fatalf("CreateToken requests %v, want %v", f.tokens.creates, want)
	}
	info := f.tokens.tokens[0]
	var token string
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "TOKEN" {
			token = f[1]
		}
	}
	if auth.Hash(token) != info.GetHash() {
		t.Fatalf("printed token %q is not the one created:\n%s", token, r.stdout)
	}
	for _, want := range []string{info.GetId(), "acme-app", "publisher", "acme, globex", "EXPIRES    " + fmtTime(info.GetExpiresAt()) + "\n", "shown only this once"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("create output lacks %q:\n%s", want, r.stdout)
		}
	}

	r = mustSucceed(t, run(t, url, "", "tokens", "create", "--name", "ops", "--role", "operator"))
	if !strings.Contains(r.stdout, "never") || f.tokens.creates[1].GetTtl() != nil || len(f.tokens.creates[1].GetCustomers()) != 0 {
		t.Fatalf("create without --ttl: request %v, output:\n%s", f.tokens.creates[1], r.stdout)
	}
	// Whole days or a Go duration. --ttl 0 is refused, not read as "no
	// expiry" (it minted a token that never expires): leaving --ttl out
	// says that.
	mustSucceed(t, run(t, url, "", "tokens", "create", "--name", "a", "--role", "viewer", "--ttl", "36h"))
	if got := f.tokens.creates[2].GetTtl().AsDuration(); got != 36*time.Hour {
		t.Fatalf("--ttl 36h sent %s", got)
	}
	for _, zero := range []string{"0", "0s", "0d"} {
		assertFailure(t, run(t, url, "", "tokens", "create", "--name", "b", "--role", "admin", "--ttl", zero), exitUsage, "--ttl "+zero+": leave --ttl out for a token that lasts until revoked")
	}
	if len(f.tokens.creates) != 3 {
		t.Fatalf("--ttl 0 reached the server: %v", f.tokens.creates[3:])
	}
}

func TestTokensCreateJSON(t *testing.T) {
	f, url := startFake(t)
	r := mustSucceed(t, run(t, url, "", "-o", "json", "tokens", "create", "--name", "acme-app", "--role", "publisher", "--customer", "acme", "--ttl", "24h"))
	var got map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("create -o json is not JSON: %v\n%s", err, r.stdout)
	}
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"customers", "expiresAt", "id", "name", "role", "token"}; !slices.Equal(keys, want) {
		t.Fatalf("create -o json keys %v, want exactly %v:\n%s", keys, want, r.stdout)
	}
	info := f.tokens.tokens[0]
	if got["id"] != info.GetId() || got["name"] != "acme-app" || got["role"] != "publisher" || auth.Hash(got["token"].(string)) != info.GetHash() {
		t.Fatalf("create -o json = %s, server holds %v", r.stdout, info)
	}
	if cs, ok := got["customers"].([]any); !ok || len(cs) != 1 || cs[0] != "acme" {
		t.Fatalf("customers = %v, want [acme]", got["customers"])
	}
	exp, err := time.Parse(time.RFC3339, got["expiresAt"].(string))
	if err != nil || !exp.Equal(info.GetExpiresAt().AsTime()) {
		t.Fatalf("expiresAt %v (%v), want RFC 3339 of %s", got["expiresAt"], err, info.GetExpiresAt().AsTime())
	}

	// No ttl: expiresAt is null; no customers: an empty array, not null.
	r = mustSucceed(t, run(t, url, "", "tokens", "create", "--name", "ops", "--role", "operator", "-o", "json"))
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	if v, ok := got["expiresAt"]; !ok || v != nil {
		t.Fatalf("expiresAt = %v (present %v), want null:\n%s", v, ok, r.stdout)
	}
	if cs, ok := got["customers"].([]any); !ok || len(cs) != 0 {
		t.Fatalf("customers = %v, want []:\n%s", got["customers"], r.stdout)
	}
}

func TestTokensCreateValidatesLocally(t *testing.T) {
	f, url := startFake(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--role", "admin"}, "needs --name"},
		{[]string{"--name", "x"}, "needs --role"},
		{[]string{"--name", "x", "--role", "root"}, `--role "root": want admin, operator, viewer, publisher or customer`},
		{[]string{"--name", "x", "--role", "ROLE_ADMIN"}, "want admin, operator, viewer, publisher or customer"},
		{[]string{"--name", "x", "--role", "publisher"}, "a publisher token needs --customer"},
		{[]string{"--name", "x", "--role", "operator", "--customer", "acme"}, "--customer scopes publisher and customer tokens only: operator tokens act for every customer"},
		{[]string{"--name", "x", "--role", "customer"}, "a customer token needs --customer ID"},
		{[]string{"--name", "x", "--role", "customer", "--customer", "*"}, "--customer '*' is for publisher tokens"},
		{[]string{"--name", "x", "--role", "publisher", "--customer", " "}, "--customer is blank"},
		{[]string{"--name", "x", "--role", "admin", "--ttl", "-1h"}, "--ttl -1h is negative"},
		{[]string{"--name", "x", "--role", "admin", "--ttl", "-3d"}, "--ttl -3d is negative"},
		{[]string{"--name", "x", "--role", "admin", "--ttl", "soon"}, `--ttl "soon"`},
		{[]string{"--name", "x", "--role", "admin", "--ttl", "1ms"}, "--ttl 1ms: at least 1m"},
		{[]string{"--name", "x", "--role", "admin", "extra"}, "takes no arguments"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			assertFailure(t, run(t, url, "", append([]string{"tokens", "create"}, tt.args...)...), exitUsage, tt.want)
		})
	}
	if len(f.tokens.creates) != 0 {
		t.Fatalf("invalid command lines reached the server: %v", f.tokens.creates)
	}
}

// A customer token names its customers like a publisher token, is sent as
// ROLE_CUSTOMER and is named "customer" in answers and listings.
func TestTokensCustomerRole(t *testing.T) {
	f, url := startFake(t)
	r := mustSucceed(t, run(t, url, "", "tokens", "create", "--name", "acme-portal", "--role", "customer", "--customer", "acme"))
	want := &rivorav1.CreateTokenRequest{Name: "acme-portal", Role: rivorav1.Role_ROLE_CUSTOMER, Customers: []string{"acme"}}
	if len(f.tokens.creates) != 1 || !proto.Equal(f.tokens.creates[0], want) {
		t.Fatalf("CreateToken requests %v, want %v", f.tokens.creates, want)
	}
	if !strings.Contains(r.stdout, "ROLE       customer\n") || !strings.Contains(r.stdout, "CUSTOMERS  acme\n") {
		t.Fatalf("create output does not name the customer role and its customer:\n%s", r.stdout)
	}
	r = mustSucceed(t, run(t, url, "", "tokens", "list"))
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if got := strings.Fields(lines[1]); len(lines) != 2 || got[1] != "acme-portal" || got[2] != "customer" || got[3] != "acme" {
		t.Fatalf("list table:\n%s", r.stdout)
	}
	r = mustSucceed(t, run(t, url, "", "tokens", "list", "-o", "json"))
	var arr []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &arr); err != nil || len(arr) != 1 || arr[0]["role"] != "customer" {
		t.Fatalf("list -o json (err %v):\n%s", err, r.stdout)
	}
}

func TestTokensList(t *testing.T) {
	f, url := startFake(t)
	r := mustSucceed(t, run(t, url, "", "tokens", "list"))
	if !strings.Contains(r.stdout, "rivoractl tokens create") {
		t.Fatalf("empty list does not say how to create a token: %q", r.stdout)
	}
	past := timestamppb.New(time.Now().Add(-time.Hour))
	future := timestamppb.New(time.Now().Add(time.Hour))
	f.tokens.tokens = []*rivorav1.ApiToken{
		{Id: "tok_0000000000000001", Name: "bootstrap", Role: rivorav1.Role_ROLE_ADMIN, CreatedAt: fixedTime, Hash: "hash-of-bootstrap"},
		{Id: "tok_0000000000000002", Name: "acme-app", Role: rivorav1.Role_ROLE_PUBLISHER, Customers: []string{"acme", "globex"}, CreatedAt: fixedTime, ExpiresAt: future, Hash: "hash-of-acme", CreatedBy: "tok_0000000000000001"},
		{Id: "tok_0000000000000003", Name: "old-ci", Role: rivorav1.Role_ROLE_OPERATOR, CreatedAt: fixedTime, ExpiresAt: past, Hash: "hash-of-ci"},
	}

	r = mustSucceed(t, run(t, url, "", "tokens", "ls"))
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "ID NAME ROLE CUSTOMERS CREATED EXPIRES" {
		t.Fatalf("list table:\n%s", r.stdout)
	}
	for i, want := range [][]string{
		{"tok_0000000000000001", "bootstrap", "admin", "-", "2026-03-01T12:00:00.000Z", "never"},
		{"tok_0000000000000002", "acme-app", "publisher", "acme,globex", "2026-03-01T12:00:00.000Z", fmtTime(future)},
		{"tok_0000000000000003", "old-ci", "operator", "-", "2026-03-01T12:00:00.000Z", fmtTime(past), "(expired)"},
	} {
		if got := strings.Fields(lines[i+1]); !slices.Equal(got, want) {
			t.Fatalf("row %d = %q, want %q", i+1, got, want)
		}
	}
	if strings.Contains(r.stdout, "hash-of") {
		t.Fatalf("list table shows hashes:\n%s", r.stdout)
	}

	r = mustSucceed(t, run(t, url, "", "tokens", "list", "-o", "json"))
	if strings.Contains(r.stdout, "hash") || strings.Contains(r.stdout, auth.TokenPrefix) || strings.Contains(r.stdout, `"token"`) {
		t.Fatalf("list -o json shows a token or hash:\n%s", r.stdout)
	}
	var arr []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &arr); err != nil {
		t.Fatalf("list -o json is not a JSON array: %v\n%s", err, r.stdout)
	}
	if len(arr) != 3 || arr[0]["role"] != "admin" || arr[0]["expiresAt"] != nil || arr[0]["expired"] != false ||
		arr[1]["createdBy"] != "tok_0000000000000001" || arr[2]["expired"] != true {
		t.Fatalf("list -o json:\n%s", r.stdout)
	}
	if cs := arr[1]["customers"].([]any); len(cs) != 2 || cs[0] != "acme" {
		t.Fatalf("customers = %v", arr[1]["customers"])
	}
	if cs, ok := arr[0]["customers"].([]any); !ok || len(cs) != 0 {
		t.Fatalf("customers of an admin = %v, want []", arr[0]["customers"])
	}
}

func TestTokensRevoke(t *testing.T) {
	f, url := startFake(t)
	f.tokens.tokens = []*rivorav1.ApiToken{{Id: "tok_0000000000000002", Name: "ci-deploy", Role: rivorav1.Role_ROLE_OPERATOR, CreatedAt: fixedTime}}

	r := mustSucceed(t, run(t, url, "", "tokens", "revoke", "tok_0000000000000002"))
	if !strings.Contains(r.stdout, "revoked token tok_0000000000000002 (ci-deploy, operator)") || !strings.Contains(r.stdout, "every agent") {
		t.Fatalf("revoke output %q", r.stdout)
	}
	if !slices.Equal(f.tokens.revokes, []string{"tok_0000000000000002"}) || len(f.tokens.tokens) != 0 {
		t.Fatalf("revokes sent %v, tokens left %v", f.tokens.revokes, f.tokens.tokens)
	}

	if r.stderr != "" {
		t.Fatalf("revoke with no edge warned: %q", r.stderr)
	}

	assertFailure(t, run(t, url, "", "tokens", "revoke", "tok_0000000000000002"), exitError, "rivoractl tokens list")

	// An edge cut off from the control plane accepts the token until it
	// reconnects: the revoke says so (an edge that follows, or already
	// applied the version, is not named).
	f.edges = []*rivorav1.EdgeStatus{
		{Name: "lyon", Watching: false, LastSeen: fixedTime, Buffer: &rivorav1.EdgeBuffer{AppliedVersion: 7}},
		{Name: "oslo", Watching: true, Buffer: &rivorav1.EdgeBuffer{AppliedVersion: 7}},
		{Name: "rome", Watching: false, Buffer: &rivorav1.EdgeBuffer{AppliedVersion: 43}},
	}
	f.tokens.tokens = []*rivorav1.ApiToken{{Id: "tok_0000000000000004", Name: "leaked", Role: rivorav1.Role_ROLE_PUBLISHER}}
	r = mustSucceed(t, run(t, url, "", "tokens", "revoke", "tok_0000000000000004"))
	if !strings.Contains(r.stderr, "warning: edge lyon does not follow the control plane now") || !strings.Contains(r.stderr, "accepts this token until it reconnects") ||
		strings.Contains(r.stderr, "oslo") || strings.Contains(r.stderr, "rome") {
		t.Fatalf("revoke with a cut-off edge: stderr %q", r.stderr)
	}
	f.edges = nil

	f.tokens.tokens = []*rivorav1.ApiToken{{Id: "tok_0000000000000003", Name: "dash", Role: rivorav1.Role_ROLE_VIEWER}}
	r = mustSucceed(t, run(t, url, "", "tokens", "revoke", "tok_0000000000000003", "-o", "json"))
	var got map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got["id"] != "tok_0000000000000003" || got["name"] != "dash" || got["role"] != "viewer" || got["version"] != 43.0 {
		t.Fatalf("revoke -o json = %s (%v)", r.stdout, err)
	}

	before := len(f.tokens.revokes)
	assertFailure(t, run(t, url, "", "tokens", "revoke"), exitUsage, "one token ID")
	assertFailure(t, run(t, url, "", "tokens", "revoke", "rvk_secretsecret"), exitUsage, "not the token itself")
	if len(f.tokens.revokes) != before {
		t.Fatalf("refused command lines reached the server")
	}
}

// TestBearerSent checks that every call carries the token, whichever way it
// was given, including publish (through the SDK) and the calls of
// `--wait`.
func TestBearerSent(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(file, []byte("  rvk_fromfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		env   map[string]string
		flags []string
		want  string
	}{
		{"--token", nil, []string{"--token", "rvk_fromflag"}, "Bearer rvk_fromflag"},
		{"RIVORA_TOKEN", map[string]string{"RIVORA_TOKEN": "rvk_fromenv"}, nil, "Bearer rvk_fromenv"},
		{"--token-file", nil, []string{"--token-file", file}, "Bearer rvk_fromfile"},
		{"RIVORA_TOKEN_FILE", map[string]string{"RIVORA_TOKEN_FILE": file}, nil, "Bearer rvk_fromfile"},
		{"--token over RIVORA_TOKEN", map[string]string{"RIVORA_TOKEN": "rvk_fromenv"}, []string{"--token", "rvk_fromflag"}, "Bearer rvk_fromflag"},
		{"--token-file over RIVORA_TOKEN", map[string]string{"RIVORA_TOKEN": "rvk_fromenv"}, []string{"--token-file", file}, "Bearer rvk_fromfile"},
		{"--token over RIVORA_TOKEN_FILE", map[string]string{"RIVORA_TOKEN_FILE": file}, []string{"--token", "rvk_fromflag"}, "Bearer rvk_fromflag"},
		{"none", nil, nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("RIVORA_TOKEN", "")
			t.Setenv("RIVORA_TOKEN_FILE", "")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			f, url := startFake(t)
			mustSucceed(t, run(t, url, "", append(slices.Clone(tt.flags), "destinations", "create", "orders", "--url", "https://example.com/hooks")...))
			// A global flag after the command works the same.
			mustSucceed(t, run(t, url, "", append([]string{"publish", "-d", "orders", "-c", "acme", "-l", "u", "-t", "x", "--data", "{}"}, tt.flags...)...))
			mustSucceed(t, run(t, url, "", append(slices.Clone(tt.flags), "tokens", "list")...))
			if len(f.auths) != 3 {
				t.Fatalf("server saw %d requests, want 3", len(f.auths))
			}
			for _, got := range f.auths {
				if got != tt.want {
					t.Fatalf("Authorization headers %q, want %q on every call", f.auths, tt.want)
				}
			}
		})
	}
}

func TestTokenSourcesConflict(t *testing.T) {
	_, url := startFake(t)
	file := filepath.Join(t.TempDir(), "t")
	if err := os.WriteFile(file, []byte("rvk_x"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RIVORA_TOKEN", "")
	t.Setenv("RIVORA_TOKEN_FILE", "")
	assertFailure(t, run(t, url, "", "--token", "rvk_a", "--token-file", file, "tokens", "list"), exitUsage,
		"--token and --token-file are both set: give the token one way only")

	t.Setenv("RIVORA_TOKEN", "rvk_a")
	t.Setenv("RIVORA_TOKEN_FILE", file)
	assertFailure(t, run(t, url, "", "tokens", "list"), exitUsage, "RIVORA_TOKEN and RIVORA_TOKEN_FILE are both set")

	t.Setenv("RIVORA_TOKEN", "")
	t.Setenv("RIVORA_TOKEN_FILE", "")
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	assertFailure(t, run(t, url, "", "--token-file", empty, "tokens", "list"), exitUsage, "--token-file "+empty+" is empty")
	assertFailure(t, run(t, url, "", "--token-file", "/does/not/exist", "tokens", "list"), exitUsage, "--token-file /does/not/exist")
	assertFailure(t, run(t, url, "", "--token", " ", "tokens", "list"), exitUsage, "--token is blank")
	// A token no header can carry is the user's to fix, not a server
	// that is down.
	twoLines := filepath.Join(t.TempDir(), "two-lines")
	if err := os.WriteFile(twoLines, []byte("rvk_first\nrvk_second\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	assertFailure(t, run(t, url, "", "--token-file", twoLines, "tokens", "list"), exitUsage, "--token-file "+twoLines+" has a space, line break or control character inside (at byte 9)")
	assertFailure(t, run(t, url, "", "--token", "rvk_a rvk_b", "tokens", "list"), exitUsage, "--token has a space")
}

// TestAuthErrors runs against the real auth interceptor: an unauthenticated
// call gets the hint, a refused one the server's reason.
func TestAuthErrors(t *testing.T) {
	t.Setenv("RIVORA_TOKEN", "")
	t.Setenv("RIVORA_TOKEN_FILE", "")
	admin, adminID, _ := auth.NewToken()
	viewer, viewerID, _ := auth.NewToken()
	keys := auth.NewKeys(auth.CellTokenOf(strings.Repeat("c", 32)))
	keys.SetTokens([]*rivorav1.ApiToken{
		{Id: adminID, Name: "bootstrap", Role: rivorav1.Role_ROLE_ADMIN, Hash: auth.Hash(admin)},
		{Id: viewerID, Name: "dash", Role: rivorav1.Role_ROLE_VIEWER, Hash: auth.Hash(viewer)},
	})
	_, h := newFake(connect.WithInterceptors(auth.NewInterceptor(keys)))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	mustSucceed(t, run(t, srv.URL, "", "--token", admin, "tokens", "list"))
	assertFailure(t, run(t, srv.URL, "", "tokens", "list"), exitError, "(unauthenticated)")
	assertFailure(t, run(t, srv.URL, "", "tokens", "list"), exitError, "--token, RIVORA_TOKEN or --token-file")
	r := run(t, srv.URL, "", "--token", "rvk_mistyped", "destinations", "list")
	assertFailure(t, r, exitError, "token not recognised: revoked, expired long ago, or mistyped (unauthenticated); the token from --token was refused: pass --token")
	if strings.Contains(r.stderr, "rvk_mistyped") {
		t.Fatalf("the error repeats the token: %s", r.stderr)
	}
	if strings.Count(r.stderr, "revoked") != 1 {
		t.Fatalf("the error says twice why a token may be refused: %s", r.stderr)
	}
	r = run(t, srv.URL, "", "--token", viewer, "tokens", "create", "--name", "x", "--role", "admin")
	// The operation refused is named, not the RPC path it called.
	assertFailure(t, r, exitError, "create token \"x\": needs a token with role admin; this token's role is viewer")
	if strings.Contains(r.stderr, "/rivora.v1.") {
		t.Fatalf("permission denied names the RPC path: %s", r.stderr)
	}
	assertFailure(t, run(t, srv.URL, "", "--token", viewer, "tokens", "list"), exitError, "list tokens: needs a token with role admin; this token's role is viewer")
	// Several roles read as a list.
	assertFailure(t, run(t, srv.URL, "", "--token", viewer, "destinations", "create", "d", "--url", "https://example.com/h"), exitError,
		": needs a token with role admin or customer; this token's role is viewer")
	if strings.Contains(r.stderr, "--token-file") {
		t.Fatalf("permission denied got the authentication hint: %s", r.stderr)
	}
}

// TestUnauthenticatedHint checks the hint rivoractl adds itself, for a
// server whose message does not say how to authenticate.
func TestUnauthenticatedHint(t *testing.T) {
	t.Setenv("RIVORA_TOKEN", "")
	t.Setenv("RIVORA_TOKEN_FILE", "")
	deny := connect.UnaryInterceptorFunc(func(connect.UnaryFunc) connect.UnaryFunc {
		return func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
			return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no valid token"))
		}
	})
	_, h := newFake(connect.WithInterceptors(deny))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	assertFailure(t, run(t, srv.URL, "", "destinations", "list"), exitError,
		"list destinations: no valid token (unauthenticated); pass --token, RIVORA_TOKEN or --token-file (rivora dev wrote an admin token to <data-dir>/admin.token")
	t.Setenv("RIVORA_TOKEN", "rvk_old")
	assertFailure(t, run(t, srv.URL, "", "destinations", "list"), exitError,
		"the token from RIVORA_TOKEN was refused (mistyped, revoked or expired?): pass --token, RIVORA_TOKEN or --token-file")
	// rivora dev's own admin token, revoked: not pointed back at it.
	t.Setenv("RIVORA_TOKEN", "")
	adminToken := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(adminToken, []byte("rvk_revoked\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := run(t, srv.URL, "", "--token-file", adminToken, "destinations", "list")
	assertFailure(t, r, exitError, "with another token (an admin token rivora dev or a control plane wrote stops working once revoked")
	if strings.Contains(r.stderr, "rivora dev wrote an admin token to <data-dir>/admin.token") {
		t.Fatalf("a refused admin.token is answered with advice to use admin.token: %s", r.stderr)
	}
}

// TestCAFile talks HTTP/2 over TLS to a server whose certificate only the
// --ca-file bundle vouches for.
func TestCAFile(t *testing.T) {
	t.Setenv("RIVORA_CA_FILE", "")
	f, h := newFake()
	var mu sync.Mutex
	var protos []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos = append(protos, r.Proto)
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake below
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}

	mustSucceed(t, run(t, srv.URL, "", "--ca-file", caFile, "destinations", "create", "orders", "--url", "https://example.com/hooks"))
	t.Setenv("RIVORA_CA_FILE", caFile)
	mustSucceed(t, run(t, srv.URL, "", "publish", "-d", "orders", "-c", "acme", "-l", "u", "-t", "x", "--data", "{}"))
	if len(f.creates) != 1 || len(f.publishs) != 1 {
		t.Fatalf("server saw %d creates, %d publishes", len(f.creates), len(f.publishs))
	}
	mu.Lock()
	for _, p := range protos {
		if p != "HTTP/2.0" {
			t.Errorf("request over %s, want HTTP/2.0", p)
		}
	}
	mu.Unlock()

	t.Setenv("RIVORA_CA_FILE", "")
	r := run(t, srv.URL, "", "destinations", "list")
	if r.code != exitError || !strings.Contains(r.stderr, "certificate") {
		t.Fatalf("without --ca-file: exit %d, stderr %q; want a certificate error", r.code, r.stderr)
	}
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	assertFailure(t, run(t, srv.URL, "", "--ca-file", notPEM, "destinations", "list"), exitUsage, "no PEM certificate")
	assertFailure(t, run(t, srv.URL, "", "--ca-file", "/does/not/exist", "destinations", "list"), exitUsage, "--ca-file")
}

// Against a real control plane (its door refuses before the handler), an
// operator's `tokens list` names the operation and the roles, not the RPC
// path.
func TestARefusedRoleNamesTheOperation(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{NoAgent: true})
	r := run(t, d.URL, "", "--token", d.Token(rivorav1.Role_ROLE_OPERATOR), "tokens", "list")
	assertFailure(t, r, exitError, "rivoractl: list tokens: needs a token with role admin; this token's role is operator\n")
	if strings.Contains(r.stderr, "/rivora.v1.") {
		t.Fatalf("names the RPC path: %s", r.stderr)
	}
}
