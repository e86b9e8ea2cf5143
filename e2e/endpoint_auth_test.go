package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rivora/rivora/internal/tlsconf/tlstest"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// pki is one throwaway CA and a certificate it signed (good for servers
// and clients), as files.
type pki struct{ ca, cert, key string }

func newPKI(t *testing.T) pki {
	var p pki
	p.ca, p.cert, p.key = tlstest.Write(t, t.TempDir())
	return p
}

// mtlsPartner is a partner that serves https with server's certificate
// and takes only client certificates one of clientCAs signed (Go's
// tls.RequireAndVerifyClientCert).
func mtlsPartner(t *testing.T, secret string, server pki, clientCAs ...pki) *partner.Partner {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(server.cert, server.key)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	for _, ca := range clientCAs {
		if !roots.AppendCertsFromPEM(readFile(t, ca.ca)) {
			t.Fatalf("no certificate in %s", ca.ca)
		}
	}
	return partner.New(t, partner.Options{Secret: secret, TLS: &tls.Config{
		Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: roots, MinVersion: tls.VersionTLS12,
	}})
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// keyLine is a line from the middle of a PEM key: what would show if an
// answer, audit entry or log line carried the key.
func keyLine(t *testing.T, path string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(string(readFile(t, path))), "\n")
	if len(lines) < 3 {
		t.Fatalf("%s is not a PEM key", path)
	}
	return lines[1]
}

// ctlDestination runs a rivoractl destinations command with -o json
// --wait and reads the destination it prints.
func ctlDestination(t *testing.T, d *devProc, args ...string) *rivorav1.Destination {
	t.Helper()
	out := rivoractl(t, d, append(args, "-o", "json", "--wait")...)
	dst := &rivorav1.Destination{}
	if err := protojson.Unmarshal([]byte(out), dst); err != nil {
		t.Fatalf("rivoractl %s: not a Destination: %v\n%s", strings.Join(args, " "), err, out)
	}
	return dst
}

// waitAttemptError waits until an attempt of event id failed with an
// error containing want, and checks the event is still pending (held,
// not dead).
func waitAttemptError(t *testing.T, d *devProc, id, want string) {
	t.Helper()
	var last *rivorav1.GetEventResponse
	err := poll.Check(30*time.Second, 50*time.Millisecond, func() error {
		resp, err := d.Events().GetEvent(ctxTimeout(t, 5*time.Second), connect.NewRequest(&rivorav1.GetEventRequest{EventId: id}))
		if err != nil {
			return err
		}
		last = resp.Msg
		for _, a := range last.GetAttempts() {
			if strings.Contains(a.GetError(), want) {
				return nil
			}
		}
		return errNotYet
	})
	if err != nil {
		t.Fatalf("event %s: no attempt failed with %q within 30s: %v", id, want, last)
	}
	if s := last.GetState(); s != rivorav1.EventState_EVENT_STATE_PENDING && s != rivorav1.EventState_EVENT_STATE_IN_FLIGHT {
		t.Fatalf("event %s is %v after failing with %q, want it held (pending)", id, s, want)
	}
}

// waitHealthCause waits until dest's health is not healthy and its last
// transition's cause contains want, and returns the health.
func waitHealthCause(t *testing.T, d *devProc, dest, want string) *rivorav1.DestinationHealth {
	t.Helper()
	var last *rivorav1.DestinationHealth
	err := poll.Check(30*time.Second, 50*time.Millisecond, func() error {
		resp, err := d.Admin().GetDestinationHealth(ctxTimeout(t, 5*time.Second), connect.NewRequest(&rivorav1.GetDestinationHealthRequest{DestinationId: dest}))
		if err != nil {
			return err
		}
		for _, h := range resp.Msg.GetDestinations() {
			last = h
			if h.GetState() != "healthy" && strings.Contains(h.GetLastTransition().GetCause(), want) {
				return nil
			}
		}
		return errNotYet
	})
	if err != nil {
		t.Fatalf("destination %s: health never showed %q within 30s: %v", dest, want, last)
	}
	return last
}

// firstAttemptsOnly fails unless every request the partner got for ids
// was the event's first attempt and there was one per id.
func firstAttemptsOnly(t *testing.T, p *partner.Partner, ids []string, phase string) {
	t.Helper()
	for _, id := range ids {
		if n := p.Sent(id); n != 1 {
			t.Errorf("%s: event %s reached the partner %d times, want once", phase, id, n)
		}
	}
	for _, r := range p.Requests() {
		for _, id := range ids {
			if r.ID == id && r.Attempt != 1 {
				t.Errorf("%s: event %s delivered on attempt %d, want 1 (no failed attempt)", phase, id, r.Attempt)
			}
		}
	}
}

// A partner that demands a client certificate (tls.RequireAndVerifyClientCert)
// gets signed deliveries only from the destination that presents one its
// CAs signed; a rotation with overlap causes no failed attempt (the
// partner takes both, or takes only the old one: the fallback); a
// rotation to a wrong certificate without overlap is refused as the
// destination's fault (events held, health and the attempt's error say
// why) until the certificate is fixed. No answer, audit entry or log line
// carries a private key.
func TestDestinationClientCertificate(t *testing.T) {
	if rivoractlBuild != nil {
		t.Fatalf("rivoractl did not build: %v", rivoractlBuild)
	}
	d := startDev(t, devOptions{})
	server, old, fresh, wrong, wrong2 := newPKI(t), newPKI(t), newPKI(t), newPKI(t), newPKI(t)
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	p := mtlsPartner(t, secret, server, old, fresh)
	p.SetAlive(d.diedErr)

	created := ctlDestination(t, d, "destinations", "create", "bank", "--url", p.URL(), "--secret", secret,
		"--server-ca", server.ca, "--client-cert", old.cert, "--client-key", old.key)
	cc := created.GetClientCertificate()
	if cc.GetSubject() != "CN=127.0.0.1" || cc.GetIssuer() != "CN=rivora test CA" || !strings.HasPrefix(cc.GetFingerprint(), "sha256:") ||
		cc.GetNotAfter() == nil || cc.GetKeyPem() != "" || !strings.HasPrefix(cc.GetKeyFingerprint(), "sha256:") {
		t.Fatalf("create answered client certificate %v; want its subject, issuer, not-after, fingerprint and the key's fingerprint only", cc)
	}
	ctlDestination(t, d, "destinations", "create", "nocert", "--url", p.URL(), "--secret", secret, "--server-ca", server.ca)

	first := publishN(t, d.SDK(), "bank", "l1", 3)
	p.WaitDelivered(t, first, 30*time.Second)
	firstAttemptsOnly(t, p, first, "with the partner's certificate")
	refused := publishN(t, d.SDK(), "nocert", "l1", 1)[0]
	waitAttemptError(t, d, refused, "TLS handshake refused")
	if n := p.Sent(refused); n != 0 {
		t.Fatalf("the destination without a client certificate reached the partner's handler %d times", n)
	}

	errorsOf := func() float64 {
		return metricValue(t, d, `rivora_delivery_attempts_total{class="error",destination="bank"}`)
	}
	// The partner takes the old and the new certificate.
	ctlDestination(t, d, "destinations", "update", "bank", "--client-cert", fresh.cert, "--client-key", fresh.key)
	rotated := publishN(t, d.SDK(), "bank", "l2", 3)
	p.WaitDelivered(t, rotated, 30*time.Second)
	firstAttemptsOnly(t, p, rotated, "after a rotation the partner takes")
	// A certificate the partner does not take yet: the replaced one is the
	// fallback during the overlap, within the same attempt.
	upd := ctlDestination(t, d, "destinations", "update", "bank", "--client-cert", wrong.cert, "--client-key", wrong.key, "--client-cert-overlap", "1h")
	if prev := upd.GetPreviousClientCertificate(); prev.GetOverlapUntil() == nil || prev.GetKeyPem() != "" || prev.GetFingerprint() == upd.GetClientCertificate().GetFingerprint() {
		t.Fatalf("update answered previous certificate %v; want the replaced one, its overlap's end, no key", prev)
	}
	fallback := publishN(t, d.SDK(), "bank", "l3", 3)
	p.WaitDelivered(t, fallback, 30*time.Second)
	firstAttemptsOnly(t, p, fallback, "a rotation the partner refuses, within the overlap")
	if n := errorsOf(); n != 0 {
		t.Fatalf("%v attempts to bank failed without an answer during rotations with overlap, want 0", n)
	}
	// ... and health says that the fallback carries the deliveries, until
	// when; the overlap alone can be moved.
	if health := rivoractl(t, d, "destinations", "health", "bank"); !strings.Contains(health, "CERT REFUSED") || !strings.Contains(health, upd.GetPreviousClientCertificate().GetOverlapUntil().AsTime().UTC().Format(time.RFC3339)[:16]) {
		t.Errorf("health during a refused rotation lacks the refusal and the fallback's end:\n%s", health)
	}

	// A wrong certificate without overlap: the destination's fault.
	ctlDestination(t, d, "destinations", "update", "bank", "--client-cert", wrong2.cert, "--client-key", wrong2.key, "--client-cert-overlap", "0s")
	held := publishN(t, d.SDK(), "bank", "l4", 1)[0]
	waitAttemptError(t, d, held, "TLS handshake refused")
	h := waitHealthCause(t, d, "bank", "TLS handshake refused")
	if got := h.GetClientCertificateNotAfter(); got == nil || time.Until(got.AsTime()) > 25*time.Hour || !h.GetClientCertificateExpiring() {
		t.Errorf("health shows certificate expiry %v (expiring %v); want the not-after of a certificate valid for a day, expiring: the default warning is 14 days", got, h.GetClientCertificateExpiring())
	}
	if errorsOf() == 0 {
		t.Fatalf("refused handshakes not counted as failed attempts")
	}
	if n := p.Sent(held); n != 0 {
		t.Fatalf("the held event reached the partner's handler %d times", n)
	}
	ctlDestination(t, d, "destinations", "update", "bank", "--client-cert", fresh.cert, "--client-key", fresh.key, "--client-cert-overlap", "0s")
	p.WaitDelivered(t, []string{held}, 30*time.Second)

	// No answer, audit entry or log line carries a private key.
	keys := []string{keyLine(t, old.key), keyLine(t, fresh.key), keyLine(t, wrong.key), keyLine(t, wrong2.key)}
	texts := map[string]string{
		"destinations get":  rivoractl(t, d, "destinations", "get", "bank", "-o", "json"),
		"destinations list": rivoractl(t, d, "destinations", "list", "-o", "json"),
		"audit":             rivoractl(t, d, "audit", "--destination", "bank", "-o", "json"),
		"the server's log":  d.Tail(1 << 20),
	}
	if !strings.Contains(texts["audit"], cc.GetFingerprint()) {
		t.Errorf("the audit log does not name the client certificate %s:\n%s", cc.GetFingerprint(), texts["audit"])
	}
	for where, text := range texts {
		for _, k := range keys {
			if strings.Contains(text, k) {
				t.Errorf("%s carries a client certificate's private key", where)
			}
		}
	}
}

// tokenEndpoint is a partner's OAuth2 token endpoint (client-credentials
// grant): it issues "tok-N" for an hour to the client whose HTTP Basic
// credentials match, and 401 invalid_client to any other.
type tokenEndpoint struct {
	srv          *httptest.Server
	id, secret   string
	issued       atomic.Int64
	refused      atomic.Int64
	currentToken atomic.Value // string
}

func newTokenEndpoint(t *testing.T, id, secret string) *tokenEndpoint {
	te := &tokenEndpoint{id: id, secret: secret}
	te.currentToken.Store("")
	te.srv = listenLocal(t, "token endpoint", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotID, gotSecret, ok := r.BasicAuth()
		if err := r.ParseForm(); err != nil || r.Method != http.MethodPost || r.PostForm.Get("grant_type") != "client_credentials" {
			http.Error(w, `{"error":"invalid_request"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if !ok || gotID != te.id || gotSecret != te.secret {
			te.refused.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":"invalid_client"}`)
			return
		}
		token := fmt.Sprintf("tok-%d", te.issued.Add(1))
		te.currentToken.Store(token)
		fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600,"scope":%q}`, token, r.PostForm.Get("scope"))
	}))
	return te
}

// A partner behind an OAuth2 token endpoint gets every delivery with a
// valid bearer, the token fetched once for its lifetime, not per
// attempt; a token endpoint answering 401 is the destination's lastError
// and holds its events (token requests paced, not one per attempt) until
// the credentials are fixed; a token URL the SSRF guard denies is
// refused. No answer, audit entry or log line carries the client secret.
func TestDestinationOAuth2(t *testing.T) {
	if rivoractlBuild != nil {
		t.Fatalf("rivoractl did not build: %v", rivoractlBuild)
	}
	d := startDev(t, devOptions{})
	const goodSecret, badSecret = "oauth-secret-that-works-1", "oauth-secret-revoked-2"
	te := newTokenEndpoint(t, "rivora", goodSecret)
	p := partner.New(t, partner.Options{Verify: true, Answer: func(r partner.Request) int {
		if r.Header.Get("Authorization") != "Bearer "+te.currentToken.Load().(string) {
			return http.StatusUnauthorized
		}
		return 0
	}})
	p.SetAlive(d.diedErr)
	created := ctlDestination(t, d, "destinations", "create", "erp", "--url", p.URL(),
		"--oauth2-token-url", te.srv.URL+"/token", "--oauth2-client-id", "rivora", "--oauth2-client-secret", goodSecret, "--oauth2-scope", "webhooks")
	if o := created.GetOauth2(); o.GetClientSecret() != "" || !strings.HasPrefix(o.GetClientSecretFingerprint(), "sha256:") || o.GetTokenUrl() != te.srv.URL+"/token" {
		t.Fatalf("create answered OAuth2 settings %v; want the secret as a fingerprint only", o)
	}
	if err := p.SetSecret(created.GetSecret()); err != nil {
		t.Fatal(err)
	}
	fetches := func(result string) float64 {
		return metricValue(t, d, `rivora_oauth2_token_fetches_total{destination="erp",result="`+result+`"}`)
	}

	var ids []string
	for lane := range 4 {
		ids = append(ids, publishN(t, d.SDK(), "erp", fmt.Sprintf("l%d", lane), 5)...)
	}
	p.WaitDelivered(t, ids, 30*time.Second)
	firstAttemptsOnly(t, p, ids, "with a valid bearer")
	if n, ok := te.issued.Load(), fetches("ok"); n != 1 || ok != 1 {
		t.Fatalf("%d deliveries took %d tokens from the endpoint (metric: %v), want 1 for the token's lifetime", len(ids), n, ok)
	}

	// The endpoint refuses the credentials: the destination's fault.
	ctlDestination(t, d, "destinations", "update", "erp", "--oauth2-client-secret", badSecret)
	var held []string
	for lane := range 4 {
		held = append(held, publishN(t, d.SDK(), "erp", fmt.Sprintf("h%d", lane), 1)...)
	}
	waitAttemptError(t, d, held[0], "oauth2 token endpoint: 401 invalid_client")
	waitHealthCause(t, d, "erp", "oauth2 token endpoint: 401 invalid_client")
	attemptErrors := func() float64 {
		return metricValue(t, d, `rivora_delivery_attempts_total{class="error",destination="erp"}`)
	}
	poll.True(t, "12 failed attempts to erp", 30*time.Second, func() bool { return attemptErrors() >= 12 })
	// The endpoint counts a refusal before it answers, the agent's metric
	// once it read the answer: compare the two between fetches.
	var refused int64
	var failed float64
	if poll.Within(10*time.Second, func() bool {
		refused, failed = te.refused.Load(), fetches("error")
		return float64(refused) == failed
	}) != nil {
		t.Fatalf("the failing token endpoint got %d requests, the agent counted %v failed fetches", refused, failed)
	}
	if attempts := attemptErrors(); refused > 5 || float64(refused) >= attempts/2 {
		t.Fatalf("the failing token endpoint got %d requests (metric: %v) for %v failed attempts; want them paced (at most 5, under half the attempts)", refused, failed, attempts)
	} else {
		t.Logf("the failing token endpoint got %d requests for %v failed attempts", refused, attempts)
	}
	for _, id := range held {
		if n := p.Sent(id); n != 0 {
			t.Fatalf("event %s reached the partner %d times without a token", id, n)
		}
	}
	ctlDestination(t, d, "destinations", "update", "erp", "--oauth2-client-secret", goodSecret)
	p.WaitDelivered(t, held, 30*time.Second)
	if n := te.issued.Load(); n != 2 {
		t.Fatalf("the token endpoint issued %d tokens, want 2 (one per credentials)", n)
	}

	// A token endpoint the SSRF guard denies is refused up front.
	if _, errOut, err := runRivoractl(d, "destinations", "update", "erp", "--oauth2-token-url", "http://169.254.169.254/token"); err == nil || !strings.Contains(errOut, "169.254.169.254") {
		t.Fatalf("a metadata token URL: err %v, stderr %q; want it refused by the SSRF guard", err, errOut)
	}

	texts := map[string]string{
		"destinations get": rivoractl(t, d, "destinations", "get", "erp", "-o", "json"),
		"audit":            rivoractl(t, d, "audit", "--destination", "erp", "-o", "json"),
		"the server's log": d.Tail(1 << 20),
	}
	for where, text := range texts {
		for _, s := range []string{goodSecret, badSecret} {
			if strings.Contains(text, s) {
				t.Errorf("%s carries an OAuth2 client secret", where)
			}
		}
	}
}

// A client certificate that expires within --cert-expiry-warning is
// notified to the operator webhook once per certificate, with its
// not-after.
func TestCertificateExpiryNotice(t *testing.T) {
	if rivoractlBuild != nil {
		t.Fatalf("rivoractl did not build: %v", rivoractlBuild)
	}
	op := newOperatorEndpoint(t)
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	op.setSecret(t, secret)
	d := startDev(t, devOptions{Args: []string{"--operator-webhook", op.url, "--operator-webhook-secret", secret, "--cert-expiry-warning", "48h"}})
	first, second := newPKI(t), newPKI(t) // valid for a day
	ctlDestination(t, d, "destinations", "create", "bank", "--url", "https://127.0.0.1:9/hook", "--client-cert", first.cert, "--client-key", first.key)
	poll.True(t, "destination.certificate_expiring for bank", 30*time.Second, func() bool {
		return len(op.accepted("destination.certificate_expiring", "bank")) == 1
	})
	n := op.accepted("destination.certificate_expiring", "bank")[0]
	if at, err := time.Parse(time.RFC3339, fmt.Sprint(n["notAfter"])); err != nil || time.Until(at) > 25*time.Hour || !strings.Contains(fmt.Sprint(n["message"]), "--client-cert") {
		t.Fatalf("notice %v: want the certificate's not-after (a day from now) and how to replace it", n)
	}
	// Another certificate is notified; bank's is not again.
	ctlDestination(t, d, "destinations", "create", "bank2", "--url", "https://127.0.0.1:9/hook", "--client-cert", second.cert, "--client-key", second.key)
	poll.True(t, "destination.certificate_expiring for bank2", 30*time.Second, func() bool {
		return len(op.accepted("destination.certificate_expiring", "bank2")) == 1
	})
	if got := op.attempted("destination.certificate_expiring", "bank"); got != 1 {
		t.Fatalf("bank's certificate was notified %d times, want once", got)
	}
}
