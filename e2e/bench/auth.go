package main

// Credentials: since Rivora has API tokens, every call needs one. A
// process the bench starts bootstraps an admin token into its data (or
// state) dir; the bench registers it for the process's address and its
// clients send it (creds.Transport). A binary from before tokens writes
// none, and its calls go without.

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/rivora/rivora/e2e/creds"
)

// registerAdminToken reads dir/admin.token, if there is one, and sends it
// to every host of urls.
func registerAdminToken(dir string, urls ...string) {
	data, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		return
	}
	creds.Register(strings.TrimSpace(string(data)), urls...)
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

// withBearer wraps a transport (nil: the default) so its requests carry
// the registered token.
func withBearer(t http.RoundTripper) http.RoundTripper { return creds.Transport(t) }
