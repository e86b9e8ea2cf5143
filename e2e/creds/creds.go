// Package creds is the credentials of the processes e2e tests and
// benchmarks start: the admin token each control plane (or rivora dev)
// bootstrapped, by the address it and its agents serve on, sent by
// Transport; and a cell token file for the processes of a cell.
package creds

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
)

// tokens is host:port → admin token.
var tokens sync.Map

// Register makes requests to the host of each URL carry token.
func Register(token string, urls ...string) {
	for _, raw := range urls {
		if u, err := url.Parse(raw); err == nil {
			tokens.Store(u.Host, token)
		}
	}
}

// For is the token registered for rawURL's host ("" if none).
func For(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	t, _ := tokens.Load(u.Host)
	s, _ := t.(string)
	return s
}

// Transport wraps next (nil: the default) so that a request without an
// Authorization header carries its host's registered token.
func Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return bearer{next: next}
}

type bearer struct{ next http.RoundTripper }

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") == "" {
		if t := For(req.URL.String()); t != "" {
			req = req.Clone(req.Context())
			req.Header.Set("Authorization", "Bearer "+t)
		}
	}
	return b.next.RoundTrip(req)
}

// WriteCellToken writes a new random cell token to dir/cell.token, mode
// 0600, and returns the path.
func WriteCellToken(dir string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "cell.token")
	return path, os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o600)
}
