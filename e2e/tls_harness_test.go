package e2e

// TLS for the cell suite: one CA and one server certificate for 127.0.0.1
// per run, made on first use. Every listener of a Consul cell
// (startCluster) serves with it, and the harness's clients trust the CA.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// testPKI is the run's CA and server certificate, as files.
type testPKI struct {
	caFile, certFile, keyFile string
	pool                      *x509.CertPool
}

var runPKI = sync.OnceValue(func() *testPKI {
	dir, err := os.MkdirTemp("", "rivora-e2e-tls-")
	if err != nil {
		panic(err)
	}
	p, err := writePKI(dir)
	if err != nil {
		panic(err)
	}
	return p
})

func writePKI(dir string) (*testPKI, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rivora e2e CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature,
		// Both: NATS routes present it as a client too.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	p := &testPKI{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem"), pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	for path, block := range map[string]*pem.Block{
		p.caFile:   {Type: "CERTIFICATE", Bytes: caDER},
		p.certFile: {Type: "CERTIFICATE", Bytes: leafDER},
		p.keyFile:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

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
