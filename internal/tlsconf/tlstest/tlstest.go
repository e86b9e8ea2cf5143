// Package tlstest writes a throwaway CA and a certificate it signed for
// 127.0.0.1 and localhost, for tests that run Rivora's listeners and NATS
// routes over TLS.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Write writes ca.pem (a new CA), cert.pem and key.pem (a certificate the
// CA signed for 127.0.0.1, ::1 and localhost, good for servers and for
// clients, so mutual TLS between peers works) into dir and returns their
// paths. Each call makes a new CA: certificates of two calls do not trust
// each other.
func Write(t testing.TB, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caFile, certFile, keyFile, err := Files(dir)
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	return caFile, certFile, keyFile
}

// Files is Write for a caller without a testing.TB (a whole run's
// certificates, made once).
func Files(dir string) (caFile, certFile, keyFile string, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", fmt.Errorf("generate the CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "rivora test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", fmt.Errorf("CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", "", "", fmt.Errorf("parse CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", fmt.Errorf("generate the key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", "", fmt.Errorf("certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", "", fmt.Errorf("marshal key: %w", err)
	}
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for _, f := range []struct {
		path, kind string
		der        []byte
		mode       os.FileMode
	}{
		{caFile, "CERTIFICATE", caDER, 0o644},
		{certFile, "CERTIFICATE", der, 0o644},
		{keyFile, "PRIVATE KEY", keyDER, 0o600},
	} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.kind, Bytes: f.der}), f.mode); err != nil {
			return "", "", "", err
		}
	}
	return caFile, certFile, keyFile, nil
}

// serial is a random 64-bit serial number (crypto/rand does not fail on
// the platforms Go supports).
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		panic(fmt.Sprintf("tlstest: serial number: %v", err))
	}
	return n
}
