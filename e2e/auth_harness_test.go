package e2e

// Credentials of the processes tests start: the admin token each control
// plane (or rivora dev) bootstrapped, by the address it and its agents
// serve on, and the cell token every cell process of this run shares.
// Tests call through authedHTTP, which sends the address's admin token;
// tests about credentials build their own clients.

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/internal/auth"
)

// adminTokens is host:port → the admin token of the cell serving there.
var adminTokens sync.Map

// registerToken makes calls to the host of each URL send token.
func registerToken(token string, urls ...string) {
	for _, raw := range urls {
		if u, err := url.Parse(raw); err == nil {
			adminTokens.Store(u.Host, token)
		}
	}
}

// tokenFor is the admin token registered for rawURL's host ("" if none).
func tokenFor(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	t, _ := adminTokens.Load(u.Host)
	s, _ := t.(string)
	return s
}

// bearerTransport sends the registered admin token of a request's host,
// unless the request carries an Authorization header already.
type bearerTransport struct{ next http.RoundTripper }

func (b bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") == "" {
		if t := tokenFor(req.URL.String()); t != "" {
			req = req.Clone(req.Context())
			req.Header.Set("Authorization", "Bearer "+t)
		}
	}
	return b.next.RoundTrip(req)
}

// authedHTTP is the client of the harness and of tests that are not about
// credentials.
var authedHTTP = &http.Client{Transport: bearerTransport{next: harnessTransport()}}

// readAdminToken waits for the bootstrap token file under one of dirs
// (written by the control plane that first has the state: with several,
// the first leader) and returns the token.
func readAdminToken(t testing.TB, dirs ...string) string {
	t.Helper()
	var token, path string
	err := poll(30*time.Second, 20*time.Millisecond, func() error {
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
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "rivora-e2e-cell-")
	if err != nil {
		panic(err)
	}
	path := filepath.Join(dir, "cell.token")
	if err := os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
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
