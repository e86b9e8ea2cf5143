package delivery

import (
	"crypto/x509"
	"testing"
)

// A certificate's names are listed up to maxCertificateNames: a CDN's
// hundred would be stored with every attempt.
func TestCertificateNamesAreBounded(t *testing.T) {
	c := &x509.Certificate{DNSNames: []string{"a.example", "b.example", "c.example", "d.example", "e.example", "f.example", "g.example"}}
	if got, want := certificateNames(c), "a.example, b.example, c.example, d.example, e.example and 2 more"; got != want {
		t.Fatalf("names = %q, want %q", got, want)
	}
	if got := certificateNames(&x509.Certificate{}); got != "no name" {
		t.Fatalf("no names = %q", got)
	}
}
