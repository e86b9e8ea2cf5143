package controlplane

import (
	"log/slog"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// testKeys are keys with a cell token and nothing else: the control
// plane's own tokens come from its store.
func testKeys(t *testing.T) *auth.Keys {
	t.Helper()
	cell, err := auth.NewCellToken()
	if err != nil {
		t.Fatal(err)
	}
	return auth.NewKeys(cell)
}

// storeAdmin stores an admin token named name in cp (as CreateToken would)
// and returns the client option that calls with it.
func storeAdmin(t *testing.T, cp *ControlPlane, name string) (string, connect.ClientOption) {
	t.Helper()
	token, id, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.store.UpdateTokens(func(all map[string]*rivorav1.ApiToken) error {
		all[id] = &rivorav1.ApiToken{Id: id, Name: name, Role: rivorav1.Role_ROLE_ADMIN, CreatedAt: timestamppb.Now(), Hash: auth.Hash(token)}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cp.syncKeys()
	return token, connect.WithInterceptors(auth.Bearer(token))
}

// A control plane without keys does not start: it could check no call.
func TestNewNeedsKeys(t *testing.T) {
	_, err := New(Config{StateDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "Config.Keys") {
		t.Fatalf("New without keys: %v, want an error naming Config.Keys", err)
	}
}
