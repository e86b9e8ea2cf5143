// Package tlsconf builds the TLS configurations of Rivora's processes from
// the --tls-cert, --tls-key and --tls-ca files: the listeners' server
// config, the internal HTTP clients' transport (agent → control plane,
// control plane → agents), and the mutual TLS of the embedded NATS
// servers' routes. Every file is read and checked when the config is
// built, so a bad file stops the process at start with an error naming it.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"
)

// Files are the PEM files of a process: its certificate chain and key
// (the listeners), and the CA bundle it verifies its peers with.
type Files struct {
	Cert, Key, CA string
}

// Enabled reports whether a certificate is given (listeners serve TLS).
func (f Files) Enabled() bool { return f.Cert != "" }

// Check refuses a certificate without its key, or a key without its
// certificate.
func (f Files) Check() error {
	switch {
	case f.Cert != "" && f.Key == "":
		return errors.New("--tls-cert needs --tls-key (the certificate's private key)")
	case f.Cert == "" && f.Key != "":
		return errors.New("--tls-key needs --tls-cert (the certificate it belongs to)")
	}
	return nil
}

// Server is a server config presenting certFile (a PEM chain, leaf first)
// with keyFile; TLS 1.2 at least. It names no application protocol: an
// HTTP listener adds h2 and http/1.1 to NextProtos.
func Server(certFile, keyFile string) (*tls.Config, error) {
	cert, err := loadPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
}

// Pool reads a PEM bundle of CA certificates.
func Pool(caFile string) (*x509.CertPool, error) {
	data, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it (want a bundle of -----BEGIN CERTIFICATE----- blocks)", caFile)
	}
	return pool, nil
}

// ClientTransport is the transport of the internal HTTP clients: it
// verifies servers with the CAs of caFile and speaks HTTP/2 over TLS
// (HTTP/1.1 over plain http://). With caFile "" it returns nil: the
// caller's default transport, verifying with the system's roots.
func ClientTransport(caFile string) (http.RoundTripper, error) {
	if caFile == "" {
		return nil, nil
	}
	pool, err := Pool(caFile)
	if err != nil {
		return nil, err
	}
	return transport(pool), nil
}

// TrustingOwn is a transport that verifies servers against the
// certificate of serverCfg itself (a process calling its own listener,
// as `rivora dev`'s agent calls its control plane): no CA file needed,
// the certificate must name the address called.
func TrustingOwn(serverCfg *tls.Config) (http.RoundTripper, error) {
	pool := x509.NewCertPool()
	for _, c := range serverCfg.Certificates {
		for _, der := range c.Certificate {
			cert, err := x509.ParseCertificate(der)
			if err != nil {
				return nil, fmt.Errorf("--tls-cert: %w", err)
			}
			pool.AddCert(cert)
		}
	}
	return transport(pool), nil
}

func transport(roots *x509.CertPool) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}
	// A custom TLSClientConfig turns HTTP/2 off unless forced.
	t.ForceAttemptHTTP2 = true
	return t
}

// Mutual is the config of a link where each side is both server and
// client, such as NATS routes: it presents certFile/keyFile, verifies the
// server it dials with the CAs of caFile and requires, and verifies, a
// certificate from every peer that dials it.
func Mutual(certFile, keyFile, caFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, errors.New("--tls-ca is required with --tls-cert here: the CA that signed the peers' certificates, to verify them")
	}
	cfg, err := Server(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	pool, err := Pool(caFile)
	if err != nil {
		return nil, err
	}
	cfg.RootCAs, cfg.ClientCAs, cfg.ClientAuth = pool, pool, tls.RequireAndVerifyClientCert
	return cfg, nil
}

// loadPair loads a certificate and its key with errors that say which
// file is wrong.
func loadPair(certFile, keyFile string) (tls.Certificate, error) {
	if certFile == "" || keyFile == "" {
		return tls.Certificate{}, (Files{Cert: certFile, Key: keyFile}).Check()
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("--tls-cert: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("--tls-key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("--tls-cert %s / --tls-key %s: %w", certFile, keyFile, err)
	}
	if now := time.Now(); now.After(cert.Leaf.NotAfter) || now.Before(cert.Leaf.NotBefore) {
		return tls.Certificate{}, fmt.Errorf("--tls-cert %s: valid from %s to %s only", certFile,
			cert.Leaf.NotBefore.UTC().Format(time.RFC3339), cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return cert, nil
}
