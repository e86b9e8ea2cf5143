package delivery_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/internal/ssrf"
	"github.com/rivora/rivora/internal/tlsconf/tlstest"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// testPKI is a CA and a certificate it signed, as PEM.
type testPKI struct{ ca, cert, key string }

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	caFile, certFile, keyFile := tlstest.Write(t, t.TempDir())
	read := func(path string) string {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	return testPKI{ca: read(caFile), cert: read(certFile), key: read(keyFile)}
}

// mtlsServer serves https with server's certificate and takes client
// certificates signed by the CAs of clients only; it counts requests.
func mtlsServer(t *testing.T, server testPKI, clients ...testPKI) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	cert, err := tls.X509KeyPair([]byte(server.cert), []byte(server.key))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	for _, c := range clients {
		pool.AppendCertsFromPEM([]byte(c.ca))
	}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, &n
}

// tlsEndpoint is the endpoint of a destination at url presenting cert
// (with prev as the fallback until prevUntil, when set) and pinning ca.
func tlsEndpoint(t *testing.T, url string, ca, cert testPKI, prev *testPKI, prevUntil time.Time) destinations.Endpoint {
	t.Helper()
	pb := &rivorav1.Destination{Id: "bank", Url: url, Secret: secret,
		ClientCertificate: &rivorav1.Certificate{CertificatePem: cert.cert, KeyPem: cert.key, Fingerprint: fingerprint(t, cert.cert)},
		ServerCa:          &rivorav1.Certificate{CertificatePem: ca.ca, Fingerprint: "sha256:ca"},
	}
	if prev != nil {
		pb.PreviousClientCertificate = &rivorav1.Certificate{CertificatePem: prev.cert, KeyPem: prev.key, Fingerprint: fingerprint(t, prev.cert), OverlapUntil: timestamppb.New(prevUntil)}
	}
	d, err := destinations.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	return d.Endpoint(nil)
}

// fingerprint is what the control plane computes: SHA-256 of the DER.
func fingerprint(t *testing.T, certPEM string) string {
	t.Helper()
	block, _ := pem.Decode([]byte(certPEM))
	if block == nil {
		t.Fatal("no PEM certificate")
	}
	sum := sha256.Sum256(block.Bytes)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func TestSendClientCertificate(t *testing.T) {
	server, good, other := newTestPKI(t), newTestPKI(t), newTestPKI(t)
	srv, requests := mtlsServer(t, server, good)
	s := delivery.NewSender("rivora/test (agent-1)", loopbackOnly)
	send := func(e destinations.Endpoint) delivery.Result {
		return s.Send(context.Background(), delivery.Request{Endpoint: e, Event: event(), Attempt: 1, Timeout: 5 * time.Second})
	}

	if res := send(tlsEndpoint(t, srv.URL, server, good, nil, time.Time{})); !res.OK() || res.CertificateRefused {
		t.Fatalf("with the certificate the partner takes: %+v, want 204", res)
	}
	// The partner refuses the certificate: the destination's fault, and
	// the error says what happened.
	res := send(tlsEndpoint(t, srv.URL, server, other, nil, time.Time{}))
	if res.OK() || !res.DestinationFault() || res.NotSent || !strings.Contains(res.Err.Error(), "TLS handshake refused by the partner") {
		t.Fatalf("with a certificate the partner refuses: %+v, want the destination's fault naming the refused handshake", res)
	}
	// During an overlap the previous certificate is used for the same
	// attempt; after it, not.
	if res := send(tlsEndpoint(t, srv.URL, server, other, &good, time.Now().Add(time.Hour))); !res.OK() || !res.CertificateRefused {
		t.Fatalf("a refused certificate with the previous one as fallback: %+v, want 204 in one attempt, the refusal marked", res)
	}
	if res := send(tlsEndpoint(t, srv.URL, server, good, &other, time.Now().Add(time.Hour))); !res.OK() || res.CertificateRefused {
		t.Fatalf("a new certificate the partner takes, with a fallback: %+v, want 204, no refusal", res)
	}
	if res := send(tlsEndpoint(t, srv.URL, server, other, &good, time.Now().Add(-time.Second))); res.OK() {
		t.Fatalf("the fallback was used after its overlap ended")
	}
	// A pinned CA that did not sign the partner's certificate.
	if res := send(tlsEndpoint(t, srv.URL, other, good, nil, time.Time{})); res.OK() || !res.DestinationFault() || !strings.Contains(res.Err.Error(), "certificate") {
		t.Fatalf("with a pinned CA that did not sign the partner's certificate: %+v, want a failed handshake", res)
	}
	if n := requests.Load(); n != 3 {
		t.Fatalf("the partner answered %d requests, want 3 (the refused handshakes never reach it)", n)
	}
}

// tokenServer is an OAuth2 token endpoint answering status (200: a
// token "tok-N" good for lifetime) and counting requests.
type tokenServer struct {
	*httptest.Server
	requests atomic.Int64
	status   atomic.Int64
	lifetime time.Duration
	mu       sync.Mutex
	forms    []string
}

func newTokenServer(t *testing.T, lifetime time.Duration) *tokenServer {
	ts := &tokenServer{lifetime: lifetime}
	ts.status.Store(http.StatusOK)
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := ts.requests.Add(1)
		id, sec, _ := r.BasicAuth()
		body, _ := io.ReadAll(r.Body)
		ts.mu.Lock()
		ts.forms = append(ts.forms, id+":"+sec+" "+string(body))
		ts.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if st := int(ts.status.Load()); st != http.StatusOK {
			w.WriteHeader(st)
			io.WriteString(w, `{"error":"invalid_client","error_description":"unknown client"}`)
			return
		}
		fmt.Fprintf(w, `{"access_token":"tok-%d","token_type":"Bearer","expires_in":%d}`, n, int(ts.lifetime.Seconds()))
	}))
	t.Cleanup(ts.Close)
	return ts
}

func oauth2Endpoint(t *testing.T, url, tokenURL, clientSecret string) destinations.Endpoint {
	t.Helper()
	d, err := destinations.FromProto(&rivorav1.Destination{Id: "erp", Url: url, Secret: secret,
		Headers: []*rivorav1.Header{{Name: "Authorization", Value: "Basic custom"}},
		Oauth2:  &rivorav1.OAuth2ClientCredentials{TokenUrl: tokenURL, ClientId: "rivora", ClientSecret: clientSecret, Scopes: []string{"a", "b"}, Audience: "https://erp"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d.Endpoint(nil)
}

func TestSendOAuth2Bearer(t *testing.T) {
	ts := newTokenServer(t, time.Hour)
	srv, got := partner(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	s := delivery.NewSender("rivora/test (agent-1)", loopbackOnly)
	e := oauth2Endpoint(t, srv.URL, ts.URL+"/token", "s3cret")

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if res := s.Send(context.Background(), delivery.Request{Endpoint: e, Event: event(), Attempt: 1, Timeout: 5 * time.Second}); !res.OK() {
				t.Errorf("Send = %+v, want 204", res)
			}
		})
	}
	wg.Wait()
	for range 8 {
		if h := (<-got).header.Get("Authorization"); h != "Bearer tok-1" {
			t.Fatalf("Authorization = %q, want the token (over the custom header)", h)
		}
	}
	if n := ts.requests.Load(); n != 1 {
		t.Fatalf("8 concurrent attempts made %d token requests, want 1", n)
	}
	form := ts.forms[0]
	for _, want := range []string{"rivora:s3cret ", "grant_type=client_credentials", "scope=a+b", "audience=https%3A%2F%2Ferp"} {
		if !strings.Contains(form, want) {
			t.Fatalf("token request %q lacks %q", form, want)
		}
	}

	// Changed credentials fetch a new token at once.
	e2 := oauth2Endpoint(t, srv.URL, ts.URL+"/token", "s3cret-2")
	if res := s.Send(context.Background(), delivery.Request{Endpoint: e2, Event: event(), Attempt: 1, Timeout: 5 * time.Second}); !res.OK() {
		t.Fatalf("Send = %+v", res)
	}
	if h := (<-got).header.Get("Authorization"); h != "Bearer tok-2" {
		t.Fatalf("after a credentials change Authorization = %q, want a new token", h)
	}
}

func TestSendOAuth2TokenEndpointFails(t *testing.T) {
	ts := newTokenServer(t, time.Hour)
	ts.status.Store(http.StatusUnauthorized)
	srv, _ := partner(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	s := delivery.NewSender("rivora/test (agent-1)", loopbackOnly)
	e := oauth2Endpoint(t, srv.URL, ts.URL+"/token", "wrong")
	for range 5 {
		res := s.Send(context.Background(), delivery.Request{Endpoint: e, Event: event(), Attempt: 1, Timeout: 5 * time.Second})
		if res.OK() || !res.DestinationFault() || res.NotSent || res.Err.Error() != "oauth2 token endpoint: 401 invalid_client (unknown client)" {
			t.Fatalf("Send = %+v, want the destination's fault: oauth2 token endpoint: 401 invalid_client (unknown client)", res)
		}
	}
	if n := ts.requests.Load(); n != 1 {
		t.Fatalf("5 attempts within a second made %d token requests, want 1 (paced)", n)
	}
}

// A token endpoint's refusal is the destination owner's text, stored with
// every attempt and printed to operators: it is bounded and has no
// control characters (a megabyte of description and a terminal escape
// were stored whole, with every attempt).
func TestSendOAuth2TokenErrorIsBoundedAndPrintable(t *testing.T) {
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":"\u001b]0;PWNED\u0007bad","error_description":"%s"}`, strings.Repeat("x", 100_000))
	}))
	t.Cleanup(tokens.Close)
	srv, _ := partner(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	s := delivery.NewSender("rivora/test (agent-1)", loopbackOnly)
	res := s.Send(context.Background(), delivery.Request{Endpoint: oauth2Endpoint(t, srv.URL, tokens.URL+"/token", "s3cret"), Event: event(), Attempt: 1, Timeout: 5 * time.Second})
	msg := res.Err.Error()
	if res.OK() || len(msg) > 600 || strings.ContainsAny(msg, "\x1b\x07") || !strings.HasPrefix(msg, "oauth2 token endpoint: 400 ?]0;PWNED?bad (xxx") {
		t.Fatalf("error (%d bytes) %.120q…; want at most 600 bytes, without control characters", len(msg), msg)
	}
}

// A 401 answered to the bearer token is the destination's fault (its
// events are held, not charged), and says so before the partner's body.
// A 401 without OAuth2 stays the event's.
func TestSendOAuth2TokenRefused(t *testing.T) {
	ts := newTokenServer(t, time.Hour)
	srv, _ := partner(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "token revoked")
	})
	s := delivery.NewSender("rivora/test (agent-1)", loopbackOnly)
	res := s.Send(context.Background(), delivery.Request{Endpoint: oauth2Endpoint(t, srv.URL, ts.URL+"/token", "s3cret"), Event: event(), Attempt: 1, Timeout: 5 * time.Second})
	if !res.TokenRefused || !res.DestinationFault() || res.Status != http.StatusUnauthorized {
		t.Fatalf("Send = %+v, want a refused token: the destination's fault", res)
	}
	if msg := res.Err.Error(); !strings.HasPrefix(msg, "HTTP 401 (the partner refused the OAuth2 access token;") || !strings.HasSuffix(msg, ": token revoked") {
		t.Errorf("error %q: want the refused token named before the partner's body", msg)
	}
	plain := s.Send(context.Background(), delivery.Request{Endpoint: endpoint(t, srv.URL), Event: event(), Attempt: 1, Timeout: 5 * time.Second})
	if plain.TokenRefused || plain.DestinationFault() || plain.Err.Error() != "HTTP 401: token revoked" {
		t.Errorf("Send without OAuth2 = %+v, want the event's 401", plain)
	}
}

// A destination's token endpoint behind its partner's private CA, asking
// for the client certificate (RFC 8705), gets it, and is trusted through
// the destination's pinned CA: before, token requests used the agent's
// TLS settings alone and failed with an unknown authority.
func TestSendOAuth2TokenEndpointUsesTheDestinationsTLS(t *testing.T) {
	server, client := newTestPKI(t), newTestPKI(t)
	var presented atomic.Int64
	tokenSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			presented.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"access_token":"tok-tls","token_type":"Bearer","expires_in":3600}`)
	}))
	cert, err := tls.X509KeyPair([]byte(server.cert), []byte(server.key))
	if err != nil {
		t.Fatal(err)
	}
	clientCAs := x509.NewCertPool()
	clientCAs.AppendCertsFromPEM([]byte(client.ca))
	tokenSrv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs}
	tokenSrv.StartTLS()
	t.Cleanup(tokenSrv.Close)
	partnerSrv, requests := mtlsServer(t, server, client)

	d, err := destinations.FromProto(&rivorav1.Destination{Id: "erp", Url: partnerSrv.URL, Secret: secret,
		ClientCertificate: &rivorav1.Certificate{CertificatePem: client.cert, KeyPem: client.key, Fingerprint: fingerprint(t, client.cert)},
		ServerCa:          &rivorav1.Certificate{CertificatePem: server.ca, Fingerprint: "sha256:ca"},
		Oauth2:            &rivorav1.OAuth2ClientCredentials{TokenUrl: tokenSrv.URL + "/token", ClientId: "rivora", ClientSecret: "s3cret"},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := delivery.NewSender("rivora/test (agent-1)", loopbackOnly)
	if res := s.Send(context.Background(), delivery.Request{Endpoint: d.Endpoint(nil), Event: event(), Attempt: 1, Timeout: 5 * time.Second}); !res.OK() {
		t.Fatalf("Send = %+v, want 204 with a token from the private-CA endpoint", res)
	}
	if presented.Load() != 1 || requests.Load() != 1 {
		t.Fatalf("token requests with a client certificate: %d, partner requests: %d; want 1 and 1", presented.Load(), requests.Load())
	}
}

func TestSendOAuth2TokenURLGuarded(t *testing.T) {
	ts := newTokenServer(t, time.Hour)
	srv, _ := partner(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	// A guard that denies loopback: the token is fetched before the
	// delivery, so it is the token request the guard refuses.
	s := delivery.NewSender("rivora/test (agent-1)", ssrf.New(nil))
	e := oauth2Endpoint(t, srv.URL, ts.URL+"/token", "s3cret")
	res := s.Send(context.Background(), delivery.Request{Endpoint: e, Event: event(), Attempt: 1, Timeout: 5 * time.Second})
	if res.OK() || !strings.HasPrefix(res.Err.Error(), "oauth2 token endpoint: ") || !strings.Contains(res.Err.Error(), "127.0.0.1") {
		t.Fatalf("Send = %+v, want the token request refused by the SSRF guard", res)
	}
	if n := ts.requests.Load(); n != 0 {
		t.Fatalf("the guarded token endpoint got %d requests", n)
	}
}

// closedURL is the URL of an HTTP server on 127.0.0.1 that was started
// and closed: a request to it is refused.
func closedURL(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	return srv.URL
}

// hangingUpURL is the URL of an HTTP server on 127.0.0.1 that closes
// every connection without an answer.
func hangingUpURL(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestSendOAuth2TokenErrorHidesTheURLsSecrets: a token request that fails
// in transport (refused, or hung up on) is the attempt's error without
// the token URL's query, where a credential may be — that error is the
// event's last error, which customers read. It names the URL's path for
// a customer's own destination, and only its origin for a shared one
// (whose path is the operators').
func TestSendOAuth2TokenErrorHidesTheURLsSecrets(t *testing.T) {
	srv, got := partner(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	const querySecret = "QS3CRET-assertion"
	for _, base := range []string{closedURL(t), hangingUpURL(t)} {
		for _, owner := range []string{"", "acme"} {
			tokenURL := base + "/oauth/token?client_assertion=" + querySecret + "&tenant=t1"
			d, err := destinations.FromProto(&rivorav1.Destination{Id: "erp", Url: srv.URL, Secret: secret, OwnerCustomer: owner,
				Oauth2: &rivorav1.OAuth2ClientCredentials{TokenUrl: tokenURL, ClientId: "rivora", ClientSecret: "s3cret"}})
			if err != nil {
				t.Fatal(err)
			}
			s := delivery.NewSender("rivora/test (agent-1)", loopbackOnly)
			res := s.Send(context.Background(), delivery.Request{Endpoint: d.Endpoint(nil), Event: event(), Attempt: 1, Timeout: 5 * time.Second})
			msg := fmt.Sprint(res.Err)
			shown := base + "/oauth/token"
			if owner == "" {
				shown = base
			}
			want := "oauth2 token endpoint: request to " + shown + " failed: "
			if res.OK() || !res.DestinationFault() || !strings.HasPrefix(msg, want) {
				t.Fatalf("owner %q, token URL %s: Send = %+v; want the destination's fault, its error starting %q", owner, tokenURL, res, want)
			}
			if strings.Contains(msg, querySecret) || strings.Contains(msg, "tenant") || strings.Contains(msg, "?") || (owner == "" && strings.Contains(msg, "/oauth/token")) {
				t.Fatalf("owner %q: the attempt's error %q names the token URL's query (or a shared destination's path)", owner, msg)
			}
		}
	}
	select {
	case r := <-got:
		t.Fatalf("the partner got a request without a token: %v", r.header)
	default:
	}
}
