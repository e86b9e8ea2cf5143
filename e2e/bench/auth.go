package main

// Credentials: since Rivora has API tokens, every call needs one. A
// process the bench starts bootstraps an admin token into its data (or
// state) dir; the bench registers it for the process's address and its
// clients send it (bearerTransport). A binary from before tokens writes
// none, and its calls go without.

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// tokens is host:port → admin token.
var tokens sync.Map

// registerAdminToken reads dir/admin.token, if there is one, and sends it
// to every host of urls.
func registerAdminToken(dir string, urls ...string) {
	data, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		return
	}
	for _, raw := range urls {
		if u, err := url.Parse(raw); err == nil {
			tokens.Store(u.Host, strings.TrimSpace(string(data)))
		}
	}
}

// stateDir is the value of --data-dir or --state-dir in args ("" if
// none).
func stateDir(args []string) string {
	for i, a := range args {
		if (a == "--data-dir" || a == "--state-dir") && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

type bearerTransport struct{ next http.RoundTripper }

func (b bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") == "" {
		if t, ok := tokens.Load(req.URL.Host); ok {
			req = req.Clone(req.Context())
			req.Header.Set("Authorization", "Bearer "+t.(string))
		}
	}
	return b.next.RoundTrip(req)
}

// withBearer wraps a transport (nil: the default) so its requests carry
// the registered token.
func withBearer(t http.RoundTripper) http.RoundTripper {
	if t == nil {
		t = http.DefaultTransport
	}
	return bearerTransport{next: t}
}

// cellTokenFile writes a fresh cell token under dir for the processes of
// one bench cell.
func cellTokenFile(dir string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "cell.token")
	return path, os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o600)
}
