package delivery

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/internal/ssrf"
	"github.com/rivora/rivora/internal/tlsconf/tlstest"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// A partner that refused an expired client certificate may reset the
// next connections without a TLS alert: the attempt's error then says the
// certificate expired, and when, besides the connection's error.
func TestATransportErrorNamesAnExpiredClientCertificate(t *testing.T) {
	_, certFile, keyFile := tlstest.Write(t, t.TempDir())
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	// The partner: every connection reset as it is taken.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	d, err := destinations.FromProto(&rivorav1.Destination{Id: "bank", Url: "https://" + ln.Addr().String() + "/hook", Secret: "whsec_" + strings.Repeat("A", 32),
		ClientCertificate: &rivorav1.Certificate{CertificatePem: string(certPEM), KeyPem: string(keyPEM), Fingerprint: "sha256:test"},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := NewSender("rivora/test", ssrf.New(ssrf.Loopback))
	send := func(now time.Time) string {
		s.now = func() time.Time { return now }
		res := s.Send(context.Background(), Request{Endpoint: d.Endpoint(nil), Event: &rivorav1.Event{EventId: "evt_1", DestinationId: "bank", Payload: []byte(`{}`)}, Attempt: 1, Timeout: 5 * time.Second})
		if res.Err == nil {
			t.Fatalf("an attempt to a partner that resets every connection: %+v", res)
		}
		return res.Err.Error()
	}
	want := "client certificate expired at " + leaf.NotAfter.UTC().Format(time.RFC3339)
	if got := send(leaf.NotAfter.Add(time.Hour)); !strings.Contains(got, want) {
		t.Fatalf("with the client certificate expired: %q; want it to say %q", got, want)
	}
	if got := send(leaf.NotAfter.Add(-time.Hour)); strings.Contains(got, "expired") {
		t.Fatalf("with the client certificate valid: %q; want no word of expiry", got)
	}
}
