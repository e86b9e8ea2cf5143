package controlplane

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

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
