package delivery_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/delivery"
)

// A partner's certificate the agent does not accept is said in words,
// with what fixes it: an untrusted issuer, another host's certificate,
// an expired one.
func TestCertificateErrorsSayWhatToDo(t *testing.T) {
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	untrusted := httptest.NewTLSServer(ok)
	defer untrusted.Close()
	roots := x509.NewCertPool()
	roots.AddCert(untrusted.Certificate())
	trusting := delivery.NewSender("ua", loopbackOnly, delivery.WithTLSConfig(&tls.Config{RootCAs: roots}))

	expiredCert, expiredRoots := expiredCertificate(t)
	expired := httptest.NewUnstartedServer(ok)
	expired.TLS = &tls.Config{Certificates: []tls.Certificate{expiredCert}}
	expired.StartTLS()
	defer expired.Close()

	_, port, _ := net.SplitHostPort(strings.TrimPrefix(untrusted.URL, "https://"))
	for _, c := range []struct {
		name   string
		sender *delivery.Sender
		url    string
		want   []string
	}{
		{"untrusted issuer", delivery.NewSender("ua", loopbackOnly), untrusted.URL, []string{`TLS certificate not trusted: the partner's is signed by "O=Acme Co", which this agent does not trust`, "--server-ca"}},
		{"another host's", trusting, "https://localhost:" + port, []string{"TLS certificate for another host: the partner's is for example.com, *.example.com, 127.0.0.1, ::1, not localhost"}},
		{"expired", delivery.NewSender("ua", loopbackOnly, delivery.WithTLSConfig(&tls.Config{RootCAs: expiredRoots})), expired.URL, []string{`TLS certificate expired or not yet valid: "CN=expired partner" in the partner's chain is valid from 2020-01-01T00:00:00Z to 2021-01-01T00:00:00Z`, "renew"}},
	} {
		res := send(c.sender, t, c.url+"/hook")
		if res.OK() {
			t.Fatalf("%s: delivered", c.name)
		}
		for _, want := range c.want {
			if !strings.Contains(res.Err.Error(), want) {
				t.Errorf("%s: error %q, want it to say %q", c.name, res.Err, want)
			}
		}
		if strings.Contains(res.Err.Error(), "x509:") {
			t.Errorf("%s: error %q still shows the library's text", c.name, res.Err)
		}
	}
}

// expiredCertificate is a self-signed certificate for 127.0.0.1 that
// expired in 2021, and a pool that trusts it.
func expiredCertificate(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "expired partner"},
		NotBefore:             time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}, roots
}
