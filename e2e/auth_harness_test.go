package e2e

// Credentials of the processes tests start: the admin token each control
// plane (or rivora dev) bootstrapped, by the address it and its agents
// serve on, and the cell token every cell process of this run shares.
// Tests call through authedHTTP, which sends the address's admin token;
// tests about credentials build their own clients.

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/e2e/creds"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/testkit/poll"
)

// authedHTTP is the client of the harness and of tests that are not about
// credentials.
var authedHTTP = &http.Client{Transport: creds.Transport(harnessTransport())}

// readAdminToken waits for the bootstrap token file under one of dirs
// (written by the control plane that first has the state: with several,
// the first leader) and returns the token.
func readAdminToken(t testing.TB, dirs ...string) string {
	t.Helper()
	var token, path string
	err := poll.Check(30*time.Second, 20*time.Millisecond, func() error {
		for _, dir := range dirs {
			path = filepath.Join(dir, "admin.token")
			if data, err := os.ReadFile(path); err == nil {
				token = strings.TrimSpace(string(data))
				return nil
			}
		}
		return fmt.Errorf("no admin.token in %v", dirs)
	})
	if err != nil {
		t.Fatalf("bootstrap admin token: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Fatalf("%s has mode %o, want 0600", path, mode)
	}
	return token
}

// cellTokenFile is the cell token every cell process of this run reads
// (--cell-token-file); made by the first test that needs it.
var cellTokenFile = sync.OnceValue(func() string {
	dir, err := os.MkdirTemp(runDir, "cell-")
	if err != nil {
		panic(err)
	}
	path, err := creds.WriteCellToken(dir)
	if err != nil {
		panic(err)
	}
	return path
})

// cellToken is the cell token itself.
func cellToken(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile(cellTokenFile())
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// cellNATS are the options a NATS client of a cell agent's embedded
// server needs: the credential derived from the cell token, and the
// run's CA (the Consul cell serves TLS).
func cellNATS(t testing.TB) []nats.Option {
	return []nats.Option{nats.UserInfo(natsd.User, auth.CellTokenOf(cellToken(t)).Derive("nats")), nats.RootCAs(runPKI().caFile)}
}

// cellArgs are the flags every cell process gets.
func cellArgs() []string { return []string{"--cell-token-file", cellTokenFile()} }
