package e2e

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
)

// destinationJSON runs rivoractl with -o json and reads the Destination
// it prints.
func destinationJSON(t *testing.T, d *devProc, args ...string) (*rivorav1.Destination, string) {
	t.Helper()
	out := rivoractl(t, d, append(args, "-o", "json")...)
	dst := &rivorav1.Destination{}
	if err := protojson.Unmarshal([]byte(out), dst); err != nil {
		t.Fatalf("rivoractl %s -o json is not a Destination: %v\n%s", strings.Join(args, " "), err, out)
	}
	return dst, out
}

// verifyEd25519 is an outside verifier: crypto/ed25519 over the Standard
// Webhooks content, with the whpk_ key decoded by hand. It returns how
// many v1a entries of the delivery's webhook-signature verify.
func verifyEd25519(t *testing.T, publicKey string, r partner.Request) int {
	t.Helper()
	pub, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(publicKey, "whpk_"))
	if err != nil || len(pub) != ed25519.PublicKeySize {
		t.Fatalf("public key %q is not whpk_ + base64 of 32 bytes", publicKey)
	}
	content := []byte(r.Header.Get("webhook-id") + "." + r.Header.Get("webhook-timestamp") + "." + string(r.Payload))
	n := 0
	for _, entry := range strings.Fields(r.Header.Get("webhook-signature")) {
		sig, ok := strings.CutPrefix(entry, "v1a,")
		if !ok {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && ed25519.Verify(pub, content, raw) {
			n++
		}
	}
	return n
}

// schemesOf lists the versions in a webhook-signature value, in order.
func schemesOf(r partner.Request) string {
	var vs []string
	for _, entry := range strings.Fields(r.Header.Get("webhook-signature")) {
		v, _, _ := strings.Cut(entry, ",")
		vs = append(vs, v)
	}
	return strings.Join(vs, " ")
}

// TestSignatureV1a: a destination signing ed25519 (v1a) with a key given
// on create; its deliveries verify with the Go SDK and crypto/ed25519 by
// the public key that every answer shows; switched to both, a delivery
// carries a v1 and a v1a signature that each verify; a rotation signs
// with the new and the old key during its grace. The secret key appears
// in no answer, no audit entry and no log line.
func TestSignatureV1a(t *testing.T) {
	d := startDev(t, devOptions{})
	p := newPartner(t)
	signingKey, publicKey, err := webhook.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	var outputs []string
	created, out := destinationJSON(t, d, "destinations", "create", "ed", "--url", p.URL(), "--signature-scheme", "v1a", "--signing-key", signingKey, "--wait")
	outputs = append(outputs, out)
	if created.GetSignatureScheme() != "v1a" || created.GetPublicKey() != publicKey || created.GetSigningKeyFingerprint() == "" {
		t.Fatalf("create answered scheme %q, public key %q, key fingerprint %q; want v1a, %s and a fingerprint", created.GetSignatureScheme(), created.GetPublicKey(), created.GetSigningKeyFingerprint(), publicKey)
	}
	secret := created.GetSecret()
	if err := p.SetSecret(publicKey); err != nil { // the partner verifies v1a
		t.Fatal(err)
	}

	r := publishDelivered(t, d, p, "ed")
	if got := schemesOf(r); got != "v1a" {
		t.Fatalf("webhook-signature carries %q, want v1a alone", got)
	}
	if err := verifiesWith(t, publicKey, r); err != nil {
		t.Fatalf("the Go SDK does not verify the v1a delivery: %v", err)
	}
	if n := verifyEd25519(t, publicKey, r); n != 1 {
		t.Fatalf("crypto/ed25519 verifies %d v1a signatures, want 1", n)
	}

	// both: one of each, each verifying on its own; the key pair is kept.
	both, out := destinationJSON(t, d, "destinations", "update", "ed", "--signature-scheme", "both", "--wait")
	outputs = append(outputs, out)
	if both.GetPublicKey() != publicKey {
		t.Fatalf("update to both changed the public key to %q", both.GetPublicKey())
	}
	r = publishDelivered(t, d, p, "ed")
	if got := schemesOf(r); got != "v1 v1a" {
		t.Fatalf("with both, webhook-signature carries %q, want v1 v1a", got)
	}
	if err := verifiesWith(t, secret, r); err != nil {
		t.Fatalf("with both, the v1 signature does not verify with the secret: %v", err)
	}
	if err := verifiesWith(t, publicKey, r); err != nil || verifyEd25519(t, publicKey, r) != 1 {
		t.Fatalf("with both, the v1a signature does not verify with the public key (SDK: %v)", err)
	}

	// A rotation: the new key and the old sign during the grace.
	rotated, out := destinationJSON(t, d, "destinations", "rotate-secret", "ed", "--grace", "1h", "--wait")
	outputs = append(outputs, out)
	newPublic := rotated.GetPublicKey()
	if newPublic == publicKey || !strings.HasPrefix(newPublic, "whpk_") || rotated.GetPreviousPublicKey() != publicKey {
		t.Fatalf("rotate-secret answered public key %q, previous %q; want a new key and %s", newPublic, rotated.GetPreviousPublicKey(), publicKey)
	}
	r = publishDelivered(t, d, p, "ed")
	if got := schemesOf(r); got != "v1 v1 v1a v1a" {
		t.Fatalf("during the grace webhook-signature carries %q, want v1 v1 v1a v1a", got)
	}
	for _, pk := range []string{publicKey, newPublic} {
		if n := verifyEd25519(t, pk, r); n != 1 {
			t.Errorf("during the grace %s verifies %d v1a signatures, want 1", pk, n)
		}
	}

	table := rivoractl(t, d, "destinations", "get", "ed")
	if !strings.Contains(table, newPublic) || !strings.Contains(table, publicKey) {
		t.Errorf("destinations get does not show the public key and the previous one:\n%s", table)
	}
	outputs = append(outputs, table, rivoractl(t, d, "destinations", "get", "ed", "-o", "json"), rivoractl(t, d, "destinations", "list", "-o", "json"),
		rivoractl(t, d, "audit", "-o", "json"))
	log, _ := os.ReadFile(d.LogPath)
	for _, text := range append(outputs, string(log)) {
		if strings.Contains(text, "whsk_") || strings.Contains(text, strings.TrimPrefix(signingKey, "whsk_")) {
			t.Fatalf("an answer, the audit or the log carries a secret ed25519 key:\n%s", text)
		}
	}
}

// legacyReceiver is a partner written to a legacy contract: it accepts a
// POST only when X-Signature is "sha256=" + hex HMAC-SHA256 of the body
// with its secret, and records the ids it accepted and the requests'
// headers.
type legacyReceiver struct {
	url    string
	mu     sync.Mutex
	ok     map[string]http.Header
	refuse int
}

func startLegacyReceiver(t *testing.T, secret string) *legacyReceiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lr := &legacyReceiver{url: "http://" + l.Addr().String() + "/legacy", ok: map[string]http.Header{}}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(body)
		want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		lr.mu.Lock()
		defer lr.mu.Unlock()
		if !hmac.Equal([]byte(r.Header.Get("X-Signature")), []byte(want)) {
			lr.refuse++
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		lr.ok[r.Header.Get("webhook-id")] = r.Header.Clone()
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return lr
}

// accepted waits until the receiver accepted id and returns its headers.
func (lr *legacyReceiver) accepted(t *testing.T, id string) http.Header {
	t.Helper()
	var h http.Header
	err := poll.Check(30*time.Second, 20*time.Millisecond, func() error {
		lr.mu.Lock()
		defer lr.mu.Unlock()
		if h = lr.ok[id]; h == nil {
			return fmt.Errorf("the legacy receiver has not accepted %s (refused %d)", id, lr.refuse)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestLegacySignature: a destination with a partner's legacy contract
// ("X-Signature: sha256=<hex HMAC-SHA256 of the body>") is delivered to a
// receiver that checks exactly that, beside webhook-signature, then
// instead of it; its secret shows only as a fingerprint.
func TestLegacySignature(t *testing.T) {
	d := startDev(t, devOptions{})
	const legacySecret = "partner-legacy-s3cret"
	lr := startLegacyReceiver(t, legacySecret)
	created, out := destinationJSON(t, d, "destinations", "create", "old", "--url", lr.url, "--legacy-signature-header", "x-signature",
		"--legacy-signature-secret", legacySecret, "--legacy-signature-encoding", "sha256=hex", "--wait")
	l := created.GetLegacySignature()
	if l.GetHeader() != "X-Signature" || l.GetTemplate() != "{body}" || l.GetPrefix() != "sha256=" || l.GetEncoding() != "hex" || l.GetAlgorithm() != "hmac-sha256" || l.GetSecret() != "" || l.GetSecretFingerprint() == "" {
		t.Fatalf("create answered legacy signature %v", l)
	}
	publish := func() string {
		out := rivoractl(t, d, "publish", "--destination", "old", "--customer", "c1", "--lane", "l1", "--type", "t", "--data", `{"order":7}`)
		id := eventIDPattern.FindString(out)
		if id == "" {
			t.Fatalf("publish printed no event id: %q", out)
		}
		return id
	}
	h := lr.accepted(t, publish())
	if !strings.HasPrefix(h.Get("webhook-signature"), "v1,") {
		t.Fatalf("beside the legacy header, webhook-signature = %q, want v1,…", h.Get("webhook-signature"))
	}
	if err := verifiesWithHeader(created.GetSecret(), h, []byte(`{"order":7}`)); err != nil {
		t.Fatalf("the Standard Webhooks signature beside the legacy one does not verify: %v", err)
	}

	// Instead of webhook-signature.
	outs := []string{out, rivoractl(t, d, "destinations", "update", "old", "--legacy-signature-header", "X-Signature",
		"--legacy-signature-secret", legacySecret, "--legacy-signature-encoding", "sha256=hex", "--legacy-signature-only", "--wait")}
	h = lr.accepted(t, publish())
	if h.Get("webhook-signature") != "" || h.Get("webhook-id") == "" || h.Get("webhook-timestamp") == "" {
		t.Fatalf("with --legacy-signature-only: webhook-signature %q (want none), webhook-id %q, webhook-timestamp %q", h.Get("webhook-signature"), h.Get("webhook-id"), h.Get("webhook-timestamp"))
	}

	outs = append(outs, rivoractl(t, d, "destinations", "get", "old"), rivoractl(t, d, "destinations", "get", "old", "-o", "json"), rivoractl(t, d, "audit", "-o", "json"))
	log, _ := os.ReadFile(d.LogPath)
	for _, text := range append(outs, string(log)) {
		if strings.Contains(text, legacySecret) {
			t.Fatalf("an answer, the audit or the log carries the legacy secret:\n%s", text)
		}
	}
	_, errOut, err := runRivoractl(d, "destinations", "update", "old", "--legacy-signature-header", "X-Signature", "--legacy-signature-secret", "s", "--legacy-signature-template", "{id}")
	if err == nil || !strings.Contains(errOut, "must include {body}") {
		t.Fatalf("a template without {body}: err %v, stderr %q", err, errOut)
	}
}

func verifiesWithHeader(secret string, h http.Header, body []byte) error {
	v, err := webhook.NewVerifier(secret)
	if err != nil {
		return err
	}
	return v.Verify(h, body)
}
