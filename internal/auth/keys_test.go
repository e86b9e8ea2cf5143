package auth

import (
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
