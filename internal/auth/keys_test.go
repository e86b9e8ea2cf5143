package auth

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
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

// In a process that expects its first tokens (ExpectTokens), a call that
// comes before them waits for them and is judged by them; with none by
// its deadline, or FirstTokensWait, or once they are no longer expected
// (NoTokensSoon), it is answered Unavailable. A process that does not
// expect them, and the cell token, do not wait.
func TestACallBeforeTheFirstTokensWaitsForThem(t *testing.T) {
	k := NewKeys(CellTokenOf("0123456789abcdef0123456789abcdef"))
	k.ExpectTokens()
	token, id, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	procedure := rivorav1connect.IngestServicePublishProcedure
	waiting := startCall(t, k, procedure, token)
	k.SetTokens([]*rivorav1.ApiToken{{Id: id, Name: "pub", Role: rivorav1.Role_ROLE_PUBLISHER, Hash: Hash(token)}})
	if v := <-waiting; v.err != nil || v.p.TokenID != id {
		t.Fatalf("a call that waited for the first tokens: %v, %v; want let in as %s", v.p, v.err, id)
	}

	none := NewKeys(CellTokenOf("0123456789abcdef0123456789abcdef"))
	if _, _, err := authorize(context.Background(), none, procedure, "Bearer "+token); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("no tokens, none expected: %v, want unavailable at once", err)
	}
	none.ExpectTokens()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := authorize(ctx, none, procedure, "Bearer "+token); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("no tokens by the call's deadline: %v, want unavailable", err)
	}
	none.firstWait = time.Millisecond
	if _, _, err := authorize(context.Background(), none, procedure, "Bearer "+token); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("no tokens within the wait: %v, want unavailable", err)
	}
	none.firstWait = time.Hour
	if _, _, err := authorize(context.Background(), none, procedure, "Bearer 0123456789abcdef0123456789abcdef"); err != nil {
		t.Fatalf("the cell token before the first tokens: %v, want let in at once", err)
	}
	waiting = startCall(t, none, procedure, token)
	none.NoTokensSoon() // the control plane is out of reach
	if v := <-waiting; connect.CodeOf(v.err) != connect.CodeUnavailable {
		t.Fatalf("a waiting call once the tokens are not expected soon: %v, %v; want unavailable", v.p, v.err)
	}
	if _, _, err := authorize(context.Background(), none, procedure, "Bearer "+token); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("a call once the tokens are not expected soon: %v, want unavailable at once", err)
	}
}

type callVerdict struct {
	p   *Principal
	err error
}

// startCall authorizes a call with token in the background, and returns
// once it waits for k's first tokens.
func startCall(t *testing.T, k *Keys, procedure, token string) <-chan callVerdict {
	t.Helper()
	before := k.awaiting.Load()
	answered := make(chan callVerdict, 1)
	go func() {
		_, p, err := authorize(context.Background(), k, procedure, "Bearer "+token)
		answered <- callVerdict{p, err}
	}()
	for k.awaiting.Load() == before {
		select {
		case v := <-answered:
			t.Fatalf("answered before any tokens, without waiting: %v, %v", v.p, v.err)
		default:
			runtime.Gosched()
		}
	}
	return answered
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
