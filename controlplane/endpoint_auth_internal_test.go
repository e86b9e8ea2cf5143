package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// selfSigned is a client certificate valid from notBefore for a day, and
// its key, in PEM.
func selfSigned(t *testing.T, notBefore time.Time) *rivorav1.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rivora-client"},
		NotBefore: notBefore, NotAfter: notBefore.Add(24 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &rivorav1.Certificate{
		CertificatePem: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		KeyPem:         string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})),
	}
}

// A client certificate not valid yet is refused, as an expired one is:
// it would be presented at once and refused by every handshake until
// then. A minute of clock skew is let through.
func TestClientCertificateNotValidYetIsRefused(t *testing.T) {
	now := time.Now()
	if _, err := clientCertificate(selfSigned(t, now.Add(time.Hour)), now); err == nil || !strings.Contains(err.Error(), "not valid before") {
		t.Fatalf("a certificate valid from an hour on: %v, want refused as not valid yet", err)
	}
	if _, err := clientCertificate(selfSigned(t, now.Add(30*time.Second)), now); err != nil {
		t.Fatalf("a certificate valid from 30 s on (clock skew): %v, want accepted", err)
	}
	if _, err := clientCertificate(selfSigned(t, now.Add(-48*time.Hour)), now); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("an expired certificate: %v, want refused", err)
	}
}
