package tlsconf_test

import (
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rivora/rivora/internal/tlsconf"
	"github.com/rivora/rivora/internal/tlsconf/tlstest"
)

func TestServerRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := tlstest.Write(t, dir)
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tlsconf.Server(cert, key); err != nil {
		t.Fatalf("Server(cert, key): %v", err)
	}
	for _, tc := range []struct {
		name, cert, key, mention string
	}{
		{"no key", cert, "", "--tls-cert needs --tls-key"},
		{"no cert", "", key, "--tls-key needs --tls-cert"},
		{"missing cert file", filepath.Join(dir, "nope.pem"), key, "--tls-cert"},
		{"missing key file", cert, filepath.Join(dir, "nope.pem"), "--tls-key"},
		{"garbage cert", garbage, key, garbage},
		{"key of another certificate", cert, ca, ca},
	} {
		_, err := tlsconf.Server(tc.cert, tc.key)
		if err == nil || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: err %v, want one mentioning %q", tc.name, err, tc.mention)
		}
	}
	if _, err := tlsconf.Pool(garbage); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("Pool(garbage): err %v, want no PEM certificate", err)
	}
	if _, err := tlsconf.Mutual(cert, key, ""); err == nil || !strings.Contains(err.Error(), "--tls-ca") {
		t.Errorf("Mutual without a CA: err %v, want one asking for --tls-ca", err)
	}
}

func TestFilesCheck(t *testing.T) {
	for _, f := range []tlsconf.Files{{}, {Cert: "c", Key: "k"}, {CA: "ca"}, {Cert: "c", Key: "k", CA: "ca"}} {
		if err := f.Check(); err != nil {
			t.Errorf("%+v: %v", f, err)
		}
	}
	for _, f := range []tlsconf.Files{{Cert: "c"}, {Key: "k"}, {Cert: "c", CA: "ca"}} {
		if err := f.Check(); err == nil {
			t.Errorf("%+v: no error", f)
		}
	}
}

// serveTLS serves 200 with the protocol in the body, over TLS with HTTP/2.
func serveTLS(t *testing.T, cert, key string) *httptest.Server {
	t.Helper()
	cfg, err := tlsconf.Server(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(r.Proto)) }))
	srv.EnableHTTP2 = true
	srv.TLS = cfg
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func TestClientTransportVerifiesWithTheCA(t *testing.T) {
	ca, cert, key := tlstest.Write(t, t.TempDir())
	srv := serveTLS(t, cert, key)
	if rt, err := tlsconf.ClientTransport(""); rt != nil || err != nil {
		t.Fatalf(`ClientTransport("") = %v, %v; want nil, nil`, rt, err)
	}
	rt, err := tlsconf.ClientTransport(ca)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: rt}).Get(srv.URL)
	if err != nil {
		t.Fatalf("GET over TLS with the CA: %v", err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Errorf("protocol %s, want HTTP/2", resp.Proto)
	}

	// A server whose certificate another CA signed is refused.
	_, otherCert, otherKey := tlstest.Write(t, t.TempDir())
	other := serveTLS(t, otherCert, otherKey)
	_, err = (&http.Client{Transport: rt}).Get(other.URL)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("GET a server of another CA: err %v, want an unknown authority", err)
	}
}

func TestTrustingOwn(t *testing.T) {
	_, cert, key := tlstest.Write(t, t.TempDir())
	srv := serveTLS(t, cert, key)
	cfg, err := tlsconf.Server(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := tlsconf.TrustingOwn(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: rt}).Get(srv.URL)
	if err != nil {
		t.Fatalf("GET its own listener: %v", err)
	}
	resp.Body.Close()
}
