package webhook_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/sdk/webhook"
)

func newKeyPair(t *testing.T) (string, string) {
	t.Helper()
	sk, pk, err := webhook.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	return sk, pk
}

func publicVerifier(t *testing.T, pk string, now time.Time) *webhook.Verifier {
	t.Helper()
	v, err := webhook.NewPublicKeyVerifier(pk)
	if err != nil {
		t.Fatalf("NewPublicKeyVerifier: %v", err)
	}
	return v.WithClock(func() time.Time { return now })
}

// TestEd25519SignVerifies: a v1a signature verifies with the public key
// in the SDK and with crypto/ed25519 directly over id.timestamp.body; a
// changed body, another key and a v1 verifier do not accept it.
func TestEd25519SignVerifies(t *testing.T) {
	sk, pk := newKeyPair(t)
	s, err := webhook.NewEd25519Signer(sk)
	if err != nil {
		t.Fatal(err)
	}
	sig := s.Sign(vectorID, vectorTimestamp, []byte(vectorBody))
	if !strings.HasPrefix(sig, "v1a,") || strings.Contains(sig, " ") {
		t.Fatalf("signature %q: want one v1a entry", sig)
	}
	if err := publicVerifier(t, pk, vectorClock()).Verify(headers(vectorID, vectorTimestamp, sig), []byte(vectorBody)); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(pk, "whpk_"))
	sigBytes, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(sig, "v1a,"))
	if !ed25519.Verify(raw, []byte(vectorID+".1614265330."+vectorBody), sigBytes) {
		t.Fatal("crypto/ed25519 does not verify the signature over id.timestamp.body")
	}
	if err := publicVerifier(t, pk, vectorClock()).Verify(headers(vectorID, vectorTimestamp, sig), []byte(vectorBody+" ")); !errors.Is(err, webhook.ErrNoMatch) {
		t.Fatalf("a changed body: %v, want ErrNoMatch", err)
	}
	_, other := newKeyPair(t)
	if err := publicVerifier(t, other, vectorClock()).Verify(headers(vectorID, vectorTimestamp, sig), []byte(vectorBody)); !errors.Is(err, webhook.ErrNoMatch) {
		t.Fatalf("another public key: %v, want ErrNoMatch", err)
	}
	if err := vectorVerifier(t).Verify(headers(vectorID, vectorTimestamp, sig), []byte(vectorBody)); !errors.Is(err, webhook.ErrNoMatch) {
		t.Fatalf("a v1 verifier given only v1a: %v, want ErrNoMatch", err)
	}
}

// TestBothSchemesEachVerify: a signer of both sends the vector's v1
// entry and a v1a entry; each verifier accepts the header.
func TestBothSchemesEachVerify(t *testing.T) {
	sk, pk := newKeyPair(t)
	hs, err := webhook.NewSigner(vectorSecret)
	if err != nil {
		t.Fatal(err)
	}
	s, err := hs.WithEd25519(sk)
	if err != nil {
		t.Fatal(err)
	}
	sig := s.Sign(vectorID, vectorTimestamp, []byte(vectorBody))
	entries := strings.Fields(sig)
	if len(entries) != 2 || entries[0] != vectorSignature || !strings.HasPrefix(entries[1], "v1a,") {
		t.Fatalf("signature %q: want the vector's v1 entry then one v1a", sig)
	}
	h := headers(vectorID, vectorTimestamp, sig)
	if err := vectorVerifier(t).Verify(h, []byte(vectorBody)); err != nil {
		t.Fatalf("v1 verifier: %v", err)
	}
	if err := publicVerifier(t, pk, vectorClock()).Verify(h, []byte(vectorBody)); err != nil {
		t.Fatalf("v1a verifier: %v", err)
	}
}

// TestPreviousEd25519SignsUntilGraceEnds: during a rotation both keys
// sign; at the grace's end only the new one does.
func TestPreviousEd25519SignsUntilGraceEnds(t *testing.T) {
	oldSK, oldPK := newKeyPair(t)
	newSK, newPK := newKeyPair(t)
	cur, err := webhook.NewEd25519Signer(newSK)
	if err != nil {
		t.Fatal(err)
	}
	until := time.Unix(vectorTimestamp+60, 0)
	s, err := cur.WithPreviousEd25519(oldSK, until)
	if err != nil {
		t.Fatal(err)
	}
	during := s.Sign(vectorID, vectorTimestamp, []byte(vectorBody))
	if n := len(strings.Fields(during)); n != 2 {
		t.Fatalf("during the grace: %q, want 2 entries", during)
	}
	for _, pk := range []string{oldPK, newPK} {
		if err := publicVerifier(t, pk, vectorClock()).Verify(headers(vectorID, vectorTimestamp, during), []byte(vectorBody)); err != nil {
			t.Fatalf("during the grace, %s: %v", pk, err)
		}
	}
	after := s.Sign(vectorID, until.Unix(), []byte(vectorBody))
	if n := len(strings.Fields(after)); n != 1 {
		t.Fatalf("at the grace's end: %q, want 1 entry", after)
	}
	if err := publicVerifier(t, oldPK, until).Verify(headers(vectorID, until.Unix(), after), []byte(vectorBody)); !errors.Is(err, webhook.ErrNoMatch) {
		t.Fatalf("old key after the grace: %v, want ErrNoMatch", err)
	}
}

// TestParseSigningKey: the 64-byte key and its 32-byte seed are the same
// key; a mismatched public half, a wrong length or prefix are refused.
func TestParseSigningKey(t *testing.T) {
	sk, pk := newKeyPair(t)
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(sk, "whsk_"))
	seed := "whsk_" + base64.StdEncoding.EncodeToString(raw[:32])
	if got, err := webhook.PublicKeyOf(seed); err != nil || got != pk {
		t.Fatalf("PublicKeyOf(seed) = %q, %v; want %q", got, err, pk)
	}
	bad := append([]byte{}, raw...)
	bad[63] ^= 1
	for key, want := range map[string]string{
		"whsk_" + base64.StdEncoding.EncodeToString(bad):      "not the public key",
		"whsk_" + base64.StdEncoding.EncodeToString(raw[:20]): "is 20 bytes",
		"whsec_" + base64.StdEncoding.EncodeToString(raw):     `must start with "whsk_"`,
		"whsk_not base64": "must be base64",
	} {
		if _, err := webhook.ParseSigningKey(key); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSigningKey(%.12s…) = %v, want an error saying %q", key, err, want)
		}
	}
}

// The v1a vector the TypeScript SDK's tests verify: the spec's id,
// timestamp and body, signed with the key whose seed is bytes 1 to 32
// (ed25519 signatures are deterministic).
const (
	v1aVectorKey       = "whsk_AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyB5tVYuj+ZU+UB4sRLoqYunkB+FOuaVvtfg45ELrQSWZA=="
	v1aVectorPublic    = "whpk_ebVWLo/mVPlAeLES6KmLp5AfhTrmlb7X4OORC60ElmQ="
	v1aVectorSignature = "v1a,OVJuLC0iOuaBuQulpz9A/zDgvqV8z8miLUJk2j15ZMONwDNhOvPJ3rO4owAHFyjFq80+pUUjrNfTHAZs1RQnDw=="
)

func TestEd25519Vector(t *testing.T) {
	if pk, err := webhook.PublicKeyOf(v1aVectorKey); err != nil || pk != v1aVectorPublic {
		t.Fatalf("PublicKeyOf = %q, %v; want %q", pk, err, v1aVectorPublic)
	}
	s, err := webhook.NewEd25519Signer(v1aVectorKey)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Sign(vectorID, vectorTimestamp, []byte(vectorBody)); got != v1aVectorSignature {
		t.Fatalf("Sign = %q, want %q", got, v1aVectorSignature)
	}
}
