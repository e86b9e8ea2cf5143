package controlplane

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/legacysig"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
)

// VerifyDelivery's check: the current secret, the previous one only for
// deliveries stamped before its grace ended, and a reason for each way a
// delivery fails.
func TestVerifyDelivery(t *testing.T) {
	current, previous := mustSecret(t), mustSecret(t)
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	d := &rivorav1.Destination{Id: "orders", Secret: current, PreviousSecret: previous, PreviousSecretExpiresAt: timestamppb.New(now.Add(-time.Minute))}
	body := []byte(`{"order":1}`)
	signed := func(secret string, at time.Time) *rivorav1.VerifyDeliveryRequest {
		s, err := webhook.NewSigner(secret)
		if err != nil {
			t.Fatal(err)
		}
		return &rivorav1.VerifyDeliveryRequest{DestinationId: "orders", WebhookId: "evt_1", WebhookTimestamp: strconv.FormatInt(at.Unix(), 10),
			WebhookSignature: s.Sign("evt_1", at.Unix(), body), Body: body}
	}
	check := func(name string, req *rivorav1.VerifyDeliveryRequest, wantOK bool, want string) {
		t.Helper()
		got := verifyDelivery(d, req, now)
		if got.GetVerified() != wantOK || !strings.Contains(got.GetReason()+got.GetSecretFingerprint(), want) {
			t.Errorf("%s: got %v, want verified=%v and %q", name, got, wantOK, want)
		}
		if strings.Contains(got.String(), current) || strings.Contains(got.String(), previous) {
			t.Errorf("%s: the answer shows a secret: %v", name, got)
		}
	}
	check("current secret", signed(current, now), true, "sha256:")
	check("previous secret within its grace", signed(previous, now.Add(-2*time.Minute)), true, "sha256:")
	check("previous secret after its grace", signed(previous, now), false, "no signature matches destination orders's secret")
	altered := signed(current, now)
	altered.Body = []byte(`{"order":2}`)
	check("altered body", altered, false, "no signature matches")
	check("stale timestamp", signed(current, now.Add(-10*time.Minute)), false, "timestamp outside tolerance: off by 10m0s")
	missing := signed(current, now)
	missing.WebhookSignature = ""
	check("no signature", missing, false, "missing webhook-id, webhook-timestamp or webhook-signature")
}

// A destination that sends only its partner's legacy signature
// (--legacy-signature-only) sends webhook-id and webhook-timestamp but no
// webhook-signature: its deliveries are verified with the legacy header's
// value and contract (and the timestamp's tolerance), and one without
// that header is said to lack it, not to miss webhook-signature. Without
// webhook-id and webhook-timestamp, or from a destination that sends
// webhook-signature, nothing changes.
func TestVerifyDeliveryOfALegacySignatureOnlyDestination(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	legacy, err := legacySignature(&rivorav1.LegacySignature{Header: "x-partner-signature", Template: "{id}.{timestamp}.{body}", Prefix: "sha256=", Secret: "partner-secret", ReplaceStandard: true})
	if err != nil {
		t.Fatal(err)
	}
	d := &rivorav1.Destination{Id: "erp", Secret: mustSecret(t), LegacySignature: legacy}
	body := []byte(`{"order":1}`)
	signed := func(at time.Time, secret string) *rivorav1.VerifyDeliveryRequest {
		s, err := legacysig.New(legacysig.Contract{Header: "X-Partner-Signature", Template: "{id}.{timestamp}.{body}", Prefix: "sha256=", Secret: secret})
		if err != nil {
			t.Fatal(err)
		}
		return &rivorav1.VerifyDeliveryRequest{DestinationId: "erp", WebhookId: "evt_1", WebhookTimestamp: strconv.FormatInt(at.Unix(), 10), Body: body,
			LegacySignature: s.Sign("evt_1", at.Unix(), body)}
	}
	check := func(name string, dest *rivorav1.Destination, req *rivorav1.VerifyDeliveryRequest, wantOK bool, want ...string) {
		t.Helper()
		got := verifyDelivery(dest, req, now)
		if got.GetVerified() != wantOK || strings.Contains(got.String(), "partner-secret") {
			t.Errorf("%s: got %v, want verified=%v, without the secret", name, got, wantOK)
		}
		for _, w := range want {
			if !strings.Contains(got.GetReason()+got.GetSecretFingerprint(), w) {
				t.Errorf("%s: got %v, want %q", name, got, w)
			}
		}
	}
	check("the legacy signature", d, signed(now, "partner-secret"), true, auth.Fingerprint("partner-secret"))
	check("another legacy secret", d, signed(now, "other"), false, "the legacy signature in X-Partner-Signature does not match destination erp's legacy secret")
	altered := signed(now, "partner-secret")
	altered.Body = []byte(`{"order":2}`)
	check("altered body", d, altered, false, "does not match")
	check("stale timestamp", d, signed(now.Add(-10*time.Minute), "partner-secret"), false, "timestamp outside tolerance: off by 10m0s")
	none := signed(now, "partner-secret")
	none.LegacySignature = ""
	check("no legacy header", d, none, false, "sends only its partner's legacy signature, in header X-Partner-Signature", "the request has no X-Partner-Signature")
	check("no webhook-id or webhook-timestamp", d, &rivorav1.VerifyDeliveryRequest{DestinationId: "erp", Body: body}, false, "not sent by Rivora")
	both := &rivorav1.Destination{Id: "erp", Secret: d.GetSecret(), LegacySignature: &rivorav1.LegacySignature{Header: "X-Partner-Signature", Secret: "partner-secret"}}
	check("no webhook-signature from a destination that sends it", both, signed(now, "partner-secret"), false, "missing webhook-id, webhook-timestamp or webhook-signature")
}

func mustSecret(t *testing.T) string {
	t.Helper()
	s, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A destination that signs v1a (ed25519) is checked with its public key;
// one that signs only v1a has no HMAC secret to try.
func TestVerifyDeliveryEd25519(t *testing.T) {
	signingKey, publicKey, err := webhook.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := webhook.NewEd25519Signer(signingKey)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	body := []byte(`{"order":1}`)
	req := &rivorav1.VerifyDeliveryRequest{DestinationId: "orders", WebhookId: "evt_1", WebhookTimestamp: strconv.FormatInt(now.Unix(), 10),
		WebhookSignature: signer.Sign("evt_1", now.Unix(), body), Body: body}
	d := &rivorav1.Destination{Id: "orders", SignatureScheme: webhook.SchemeV1a, PublicKey: publicKey}
	if got := verifyDelivery(d, req, now); !got.GetVerified() {
		t.Fatalf("a v1a delivery against its destination's public key: %v", got)
	}
	req.Body = []byte(`{"order":2}`)
	if got := verifyDelivery(d, req, now); got.GetVerified() || !strings.Contains(got.GetReason(), "no signature matches") {
		t.Fatalf("an altered v1a delivery: %v, want not verified", got)
	}
}
