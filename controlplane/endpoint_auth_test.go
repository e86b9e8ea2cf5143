package controlplane_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/tlsconf/tlstest"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// pemPair is a certificate (signed by its own throwaway CA) and its key.
type pemPair struct{ ca, cert, key string }

func newPEMPair(t *testing.T) pemPair {
	t.Helper()
	ca, cert, key := tlstest.Write(t, t.TempDir())
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return pemPair{read(ca), read(cert), read(key)}
}

func (p pemPair) client() *rivorav1.Certificate {
	return &rivorav1.Certificate{CertificatePem: p.cert, KeyPem: p.key}
}

func (d *dev) update(req *rivorav1.UpdateDestinationRequest) (*rivorav1.Destination, error) {
	resp, err := d.Admin.UpdateDestination(context.Background(), connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetDestination(), nil
}

// Client certificates and OAuth2 credentials are checked, summarized in
// answers with their key and secret as fingerprints only, carried whole
// on the agents' feed, audited without them; a replaced certificate stays
// the fallback for the overlap.
func TestEndpointAuth(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	a, b := newPEMPair(t), newPEMPair(t)
	const clientSecret = "oauth2-client-secret-unit"
	created := d.create(&rivorav1.CreateDestinationRequest{Id: "bank", Url: "https://example.com/hook",
		ClientCertificate: a.client(), ServerCa: &rivorav1.Certificate{CertificatePem: a.ca},
		Oauth2: &rivorav1.OAuth2ClientCredentials{TokenUrl: "https://auth.example.com/token", ClientId: "rivora", ClientSecret: clientSecret, Scopes: []string{"hooks"}},
	}).GetDestination()
	cc := created.GetClientCertificate()
	if cc.GetKeyPem() != "" || cc.GetKeyFingerprint() != auth.Fingerprint(a.key) || cc.GetSubject() != "CN=127.0.0.1" || cc.GetIssuer() != "CN=rivora test CA" ||
		len(cc.GetFingerprint()) != len("sha256:")+64 || cc.GetNotAfter().AsTime().Before(time.Now()) || cc.GetCertificatePem() != a.cert {
		t.Fatalf("create answered client certificate %v", cc)
	}
	if o := created.GetOauth2(); o.GetClientSecret() != "" || o.GetClientSecretFingerprint() != auth.Fingerprint(clientSecret) || o.GetClientId() != "rivora" {
		t.Fatalf("create answered OAuth2 %v", o)
	}
	if created.GetServerCa().GetSubject() != "CN=rivora test CA" {
		t.Fatalf("create answered server CA %v", created.GetServerCa())
	}

	// Rotation keeps the previous certificate for the overlap.
	before := time.Now()
	upd, err := d.update(&rivorav1.UpdateDestinationRequest{Id: "bank", ClientCertificate: b.client(), ClientCertificateOverlap: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	prev := upd.GetPreviousClientCertificate()
	if prev.GetFingerprint() != cc.GetFingerprint() || prev.GetKeyPem() != "" || prev.GetOverlapUntil().AsTime().Before(before.Add(time.Hour-time.Second)) {
		t.Fatalf("update kept previous certificate %v, want the replaced one until an hour from now, without its key", prev)
	}

	// The overlap alone moves its end, or ends it now (0); with no
	// replaced certificate left there is none to change.
	moved, err := d.update(&rivorav1.UpdateDestinationRequest{Id: "bank", ClientCertificateOverlap: durationpb.New(3 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if until := moved.GetPreviousClientCertificate().GetOverlapUntil().AsTime(); until.Before(before.Add(3*time.Hour-time.Second)) || moved.GetClientCertificate().GetFingerprint() != upd.GetClientCertificate().GetFingerprint() {
		t.Fatalf("overlap moved to %v (current %v), want 3h from now, the current certificate kept", until, moved.GetClientCertificate())
	}
	if ended, err := d.update(&rivorav1.UpdateDestinationRequest{Id: "bank", ClientCertificateOverlap: durationpb.New(0)}); err != nil || ended.GetPreviousClientCertificate() != nil {
		t.Fatalf("overlap 0 alone: %v, %v; want the replaced certificate dropped", ended.GetPreviousClientCertificate(), err)
	}
	_, err = d.update(&rivorav1.UpdateDestinationRequest{Id: "bank", ClientCertificateOverlap: durationpb.New(time.Hour)})
	wantCode(t, "overlap without a replaced certificate", err, connect.CodeInvalidArgument, "no replaced certificate")
	if _, err = d.update(&rivorav1.UpdateDestinationRequest{Id: "bank", ClientCertificate: a.client(), ClientCertificateOverlap: durationpb.New(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err = d.update(&rivorav1.UpdateDestinationRequest{Id: "bank", ClientCertificate: b.client(), ClientCertificateOverlap: durationpb.New(time.Hour)}); err != nil {
		t.Fatal(err)
	}

	feed := watchOnce(t, d).GetDestinations()
	if len(feed) != 1 || feed[0].GetClientCertificate().GetKeyPem() != b.key || feed[0].GetPreviousClientCertificate().GetKeyPem() != a.key || feed[0].GetOauth2().GetClientSecret() != clientSecret {
		t.Fatalf("the agents' feed lacks the keys or the client secret: %v", feed)
	}

	for _, c := range []struct {
		name string
		req  *rivorav1.UpdateDestinationRequest
		want string
	}{
		{"key of another certificate", &rivorav1.UpdateDestinationRequest{Id: "bank", ClientCertificate: &rivorav1.Certificate{CertificatePem: a.cert, KeyPem: b.key}}, "private key does not match"},
		{"certificate without key", &rivorav1.UpdateDestinationRequest{Id: "bank", ClientCertificate: &rivorav1.Certificate{CertificatePem: a.cert}}, "both the certificate and its private key"},
		{"the current one again", &rivorav1.UpdateDestinationRequest{Id: "bank", ClientCertificate: b.client()}, "current certificate"},
		{"overlap too long", &rivorav1.UpdateDestinationRequest{Id: "bank", ClientCertificate: a.client(), ClientCertificateOverlap: durationpb.New(200 * time.Hour)}, "7 days"},
		{"server CA with a key", &rivorav1.UpdateDestinationRequest{Id: "bank", ServerCa: &rivorav1.Certificate{CertificatePem: a.ca, KeyPem: a.key}}, "never a private key"},
		{"server CA not PEM", &rivorav1.UpdateDestinationRequest{Id: "bank", ServerCa: &rivorav1.Certificate{CertificatePem: "nope"}}, "no PEM certificate"},
		{"token URL of the metadata service", &rivorav1.UpdateDestinationRequest{Id: "bank", Oauth2: &rivorav1.OAuth2ClientCredentials{TokenUrl: "http://169.254.169.254/token"}}, "169.254.169.254"},
		{"token URL with credentials", &rivorav1.UpdateDestinationRequest{Id: "bank", Oauth2: &rivorav1.OAuth2ClientCredentials{TokenUrl: "https://u:p@auth.example.com/token"}}, "credentials"},
		{"scope with a space", &rivorav1.UpdateDestinationRequest{Id: "bank", Oauth2: &rivorav1.OAuth2ClientCredentials{Scopes: []string{"a b"}}}, "one scope per flag"},
		{"an http URL with a client certificate", &rivorav1.UpdateDestinationRequest{Id: "bank", Url: new("http://bank.example.com/h")}, "https URLs only"},
	} {
		_, err := d.update(c.req)
		wantCode(t, c.name, err, connect.CodeInvalidArgument, c.want)
	}
	_, err = d.Admin.CreateDestination(context.Background(), connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "plain", Url: "http://example.com/h", ServerCa: &rivorav1.Certificate{CertificatePem: a.ca}}))
	wantCode(t, "create an http destination pinning a CA", err, connect.CodeInvalidArgument, "https URLs only")
	if _, err := d.Admin.CreateDestination(context.Background(), connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "half", Url: "https://example.com/h",
		Oauth2: &rivorav1.OAuth2ClientCredentials{TokenUrl: "https://auth.example.com/token", ClientId: "x"}})); err == nil {
		t.Fatalf("OAuth2 without a client secret was accepted")
	} else {
		wantCode(t, "OAuth2 without a secret", err, connect.CodeInvalidArgument, "--oauth2-client-secret")
	}

	// A secret alone changes only the secret; removal drops them.
	upd, err = d.update(&rivorav1.UpdateDestinationRequest{Id: "bank", Oauth2: &rivorav1.OAuth2ClientCredentials{ClientSecret: "new-secret"}})
	if err != nil || upd.GetOauth2().GetTokenUrl() != "https://auth.example.com/token" || upd.GetOauth2().GetClientSecretFingerprint() != auth.Fingerprint("new-secret") {
		t.Fatalf("update of the client secret alone: %v, %v", upd.GetOauth2(), err)
	}
	upd, err = d.update(&rivorav1.UpdateDestinationRequest{Id: "bank", RemoveClientCertificate: true, RemoveOauth2: true, RemoveServerCa: true})
	if err != nil || upd.GetClientCertificate() != nil || upd.GetPreviousClientCertificate() != nil || upd.GetOauth2() != nil || upd.GetServerCa() != nil {
		t.Fatalf("removal left %v, %v", upd, err)
	}

	audit, err := d.Admin.ListAudit(context.Background(), connect.NewRequest(&rivorav1.ListAuditRequest{DestinationId: "bank"}))
	if err != nil {
		t.Fatal(err)
	}
	text, _ := protojson.Marshal(audit.Msg)
	keyLine := strings.Split(a.key, "\n")[1]
	for _, s := range []string{keyLine, strings.Split(b.key, "\n")[1], clientSecret, "new-secret"} {
		if strings.Contains(string(text), s) {
			t.Fatalf("the audit log carries a key or client secret: %s", text)
		}
	}
	if !strings.Contains(string(text), cc.GetFingerprint()) || !strings.Contains(string(text), auth.Fingerprint(clientSecret)) {
		t.Fatalf("the audit log does not name the certificate and secret by fingerprint: %s", text)
	}
}

// A realistic client certificate chain (a leaf and two intermediates,
// RSA-4096: ~6 KB) and its key are accepted, and so is it as a pinned CA
// bundle; a chain or bundle over 64 KiB, or a key over 16 KiB, is still
// refused.
func TestEndpointAuthTakesALongChain(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	chain, key := rsa4096Chain(t)
	if len(chain) < 5<<10 {
		t.Fatalf("the test chain is %d bytes; want one over 5 KiB", len(chain))
	}
	if _, err := d.Admin.CreateDestination(context.Background(), connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "bank", Url: "https://example.com/hook",
		ClientCertificate: &rivorav1.Certificate{CertificatePem: chain, KeyPem: key}, ServerCa: &rivorav1.Certificate{CertificatePem: chain}})); err != nil {
		t.Fatalf("a %d-byte chain, a %d-byte key: %v", len(chain), len(key), err)
	}
	long := strings.Repeat(chain, (64<<10)/len(chain)+1)
	_, err := d.update(&rivorav1.UpdateDestinationRequest{Id: "bank", ClientCertificate: &rivorav1.Certificate{CertificatePem: long, KeyPem: key}})
	wantCode(t, "a chain over 64 KiB", err, connect.CodeInvalidArgument, "certificate_pem", "the limit is 65536")
	_, err = d.update(&rivorav1.UpdateDestinationRequest{Id: "bank", ServerCa: &rivorav1.Certificate{CertificatePem: long}})
	wantCode(t, "a CA bundle over 64 KiB", err, connect.CodeInvalidArgument, "certificate_pem", "the limit is 65536")
	_, err = d.update(&rivorav1.UpdateDestinationRequest{Id: "bank", ClientCertificate: &rivorav1.Certificate{CertificatePem: chain, KeyPem: strings.Repeat(key, 6)}})
	wantCode(t, "a key over 16 KiB", err, connect.CodeInvalidArgument, "key_pem", "the limit is 16384")
}

// rsa4096Chain is a PEM chain of a leaf and two intermediates (leaf
// first) under a throwaway root, all of one RSA-4096 key (one key: its
// size, not its uniqueness, makes the chain's length), and that key.
func rsa4096Chain(t *testing.T) (chain, key string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 4096)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	issue := func(cn string, serial int64, parent *x509.Certificate, ca bool) *x509.Certificate {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn, Organization: []string{"Rivora test"}},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: ca, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		if parent == nil {
			parent = tmpl
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &k.PublicKey, k)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	root := issue("root", 1, nil, true)
	mid1 := issue("intermediate 1", 2, root, true)
	mid2 := issue("intermediate 2", 3, mid1, true)
	leaf := issue("leaf", 4, mid2, false)
	for _, c := range []*x509.Certificate{leaf, mid2, mid1} {
		chain += string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))
	}
	return chain, string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}))
}
