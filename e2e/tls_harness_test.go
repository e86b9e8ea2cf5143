package e2e

// TLS for the cell suite: one CA and one server certificate for 127.0.0.1
// per run (tlstest), made on first use. Every listener of a Consul cell
// (startCluster) serves with it, and the harness's clients trust the CA.

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"slices"
	"sync"

	"github.com/rivora/rivora/internal/tlsconf"
	"github.com/rivora/rivora/internal/tlsconf/tlstest"
)

// testPKI is the run's CA and server certificate, as files.
type testPKI struct {
	caFile, certFile, keyFile string
	pool                      *x509.CertPool
}

var runPKI = sync.OnceValue(func() *testPKI {
	dir, err := os.MkdirTemp(runDir, "tls-")
	if err != nil {
		panic(err)
	}
	p := &testPKI{}
	if p.caFile, p.certFile, p.keyFile, err = tlstest.Files(dir); err != nil {
		panic(err)
	}
	if p.pool, err = tlsconf.Pool(p.caFile); err != nil {
		panic(err)
	}
	return p
})

// tlsArgs are the flags that put a process's listeners on TLS.
func tlsArgs() []string {
	p := runPKI()
	return []string{"--tls-cert", p.certFile, "--tls-key", p.keyFile, "--tls-ca", p.caFile}
}

// servesTLS reports whether args put the process on TLS.
func servesTLS(args []string) bool { return slices.Contains(args, "--tls-cert") }

// tlsFor is the client config for a process started with args (nil:
// plain HTTP).
func tlsFor(args []string) *tls.Config {
	if !servesTLS(args) {
		return nil
	}
	return clientTLS()
}

// clientTLS verifies the run's certificates.
func clientTLS() *tls.Config {
	return &tls.Config{RootCAs: runPKI().pool, MinVersion: tls.VersionTLS12}
}

// harnessTransport trusts the run's CA and speaks HTTP/2 over TLS.
func harnessTransport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = clientTLS()
	t.ForceAttemptHTTP2 = true
	return t
}
