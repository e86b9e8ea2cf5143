package auth

import (
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Before its first tokens (an agent starting) an API token is answered
// Unavailable, which clients retry; after, an unknown one is
// Unauthenticated and a known one is let in.
func TestKeysBeforeAndAfterTheFirstTokens(t *testing.T) {
	k := NewKeys(CellTokenOf("0123456789abcdef0123456789abcdef"))
	token, id, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.user(token, false); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("before the first tokens: %v, want unavailable", err)
	}
	k.SetTokens([]*rivorav1.ApiToken{{Id: id, Name: "ci", Role: rivorav1.Role_ROLE_VIEWER, Hash: Hash(token)}})
	if p, err := k.user(token, false); err != nil || p.TokenID != id || p.Role != rivorav1.Role_ROLE_VIEWER {
		t.Fatalf("a known token: %v, %v", p, err)
	}
	if _, err := k.user(TokenPrefix+"unknown", false); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("an unknown token: %v, want unauthenticated", err)
	}
	k.SetTokens(nil) // every token revoked: still loaded
	if _, err := k.user(token, false); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("a revoked token: %v, want unauthenticated", err)
	}
}

// A process that may be behind its control plane (an edge cut off from
// it) says so when it does not know a token; one that is not, does not.
// A header of another scheme is named as such, not as a missing one.
func TestUnknownTokenAndWrongScheme(t *testing.T) {
	k := NewKeys(CellTokenOf("0123456789abcdef0123456789abcdef"))
	k.SetTokens(nil)
	stale := ""
	k.SetStaleNote(func() string { return stale })
	if _, err := k.user(TokenPrefix+"new", false); connect.CodeOf(err) != connect.CodeUnauthenticated || strings.Contains(err.Error(), "created since") {
		t.Fatalf("an unknown token, keys current: %v", err)
	}
	stale = "edge lyon has not heard from its control plane since 2026-12-05T21:00:00Z"
	if _, err := k.user(TokenPrefix+"new", false); connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "or created since: edge lyon has not heard") {
		t.Fatalf("an unknown token, keys maybe behind: %v", err)
	}
	if _, err := bearer("Basic dXNlcjpwYXNz"); connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), `uses the "Basic" scheme: send`) {
		t.Fatalf("a Basic header: %v", err)
	}
	if _, err := bearer(""); !strings.Contains(fmt.Sprint(err), "missing `Authorization: Bearer") {
		t.Fatalf("no header: %v", err)
	}
}
