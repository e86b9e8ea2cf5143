package controlplane

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/legacysig"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
)

// maxVerifiedBody bounds the body VerifyDelivery checks: the admin
// service's messages are bounded to 4 MiB, headers included.
const maxVerifiedBody = 4<<20 - 64<<10

// VerifyDelivery checks a delivery a receiver got against the
// destination's signing secrets, so that `rivoractl listen --destination`
// verifies without the secret leaving the control plane (it is shown once,
// at create or rotation). The answer says yes or no, why not, and which
// secret matched by its fingerprint: nothing a caller could sign with.
func (h *adminHandler) VerifyDelivery(ctx context.Context, req *connect.Request[rivorav1.VerifyDeliveryRequest]) (*connect.Response[rivorav1.VerifyDeliveryResponse], error) {
	m := req.Msg
	if len(m.GetBody()) > maxVerifiedBody {
		return nil, errorf(ErrInvalid, "body is %d bytes; VerifyDelivery checks at most %d", len(m.GetBody()), maxVerifiedBody)
	}
	d, ok := h.cp.store.Get(m.GetDestinationId())
	if !ok || !scopeOf(ctx).destination(d) {
		return nil, notFound(m.GetDestinationId())
	}
	return connect.NewResponse(verifyDelivery(d, m, time.Now())), nil
}

// verifyDelivery checks m against what d signs with: its HMAC secret (v1)
// and its ed25519 public key (v1a), as its scheme says, each with the
// previous one while a rotation's grace lasts for m's timestamp (the
// agents sign with both until then); or its legacy signature when that is
// all it sends (verifyLegacy).
func verifyDelivery(d *rivorav1.Destination, m *rivorav1.VerifyDeliveryRequest, now time.Time) *rivorav1.VerifyDeliveryResponse {
	if resp := verifyLegacy(d, m, now); resp != nil {
		return resp
	}
	headers := http.Header{}
	headers.Set(webhook.HeaderID, m.GetWebhookId())
	headers.Set(webhook.HeaderTimestamp, m.GetWebhookTimestamp())
	headers.Set(webhook.HeaderSignature, m.GetWebhookSignature())
	inGrace := func(until *timestamppb.Timestamp) bool {
		ts, err := strconv.ParseInt(m.GetWebhookTimestamp(), 10, 64)
		return until != nil && err == nil && time.Unix(ts, 0).Before(until.AsTime())
	}
	type key struct {
		value string
		make  func(string) (*webhook.Verifier, error)
	}
	var keys []key
	if signsV1(d.GetSignatureScheme()) {
		keys = append(keys, key{d.GetSecret(), webhook.NewVerifier})
		if d.GetPreviousSecret() != "" && inGrace(d.GetPreviousSecretExpiresAt()) {
			keys = append(keys, key{d.GetPreviousSecret(), webhook.NewVerifier})
		}
	}
	if signsV1a(d.GetSignatureScheme()) {
		keys = append(keys, key{d.GetPublicKey(), webhook.NewPublicKeyVerifier})
		if d.GetPreviousPublicKey() != "" && inGrace(d.GetPreviousSigningKeyExpiresAt()) {
			keys = append(keys, key{d.GetPreviousPublicKey(), webhook.NewPublicKeyVerifier})
		}
	}
	err := webhook.ErrNoMatch
	for _, k := range keys {
		v, verr := k.make(k.value)
		if verr != nil {
			return &rivorav1.VerifyDeliveryResponse{Reason: fmt.Sprintf("destination %s has no usable signing key: %v", d.GetId(), verr)}
		}
		if err = v.WithClock(func() time.Time { return now }).Verify(headers, m.GetBody()); err == nil {
			return &rivorav1.VerifyDeliveryResponse{Verified: true, SecretFingerprint: auth.Fingerprint(k.value)}
		}
		if !errors.Is(err, webhook.ErrNoMatch) {
			break // missing headers or a stale timestamp: no other key helps
		}
	}
	return &rivorav1.VerifyDeliveryResponse{Reason: notVerifiedReason(err, d.GetId())}
}

// notVerifiedReason words a verification failure for a developer looking
// at a receiver's log.
func notVerifiedReason(err error, destination string) string {
	switch {
	case errors.Is(err, webhook.ErrMissingHeaders):
		return "missing webhook-id, webhook-timestamp or webhook-signature header: not sent by Rivora"
	case errors.Is(err, webhook.ErrInvalidTimestamp):
		// "webhook: timestamp outside tolerance: off by 9m0s"
		return fmt.Sprintf("%s (tolerance %s): a replayed or delayed request", strings.TrimPrefix(err.Error(), "webhook: "), webhook.DefaultTolerance)
	case errors.Is(err, webhook.ErrNoMatch):
		return fmt.Sprintf("no signature matches destination %s's secret: signed with another secret (a subscription with a secret of its own signs with that one), forged, or altered", destination)
	}
	return err.Error()
}

// verifyLegacy checks a delivery of d when d sends only its partner's
// legacy signature (replace_standard): with webhook-id and
// webhook-timestamp (Rivora sends them) and no webhook-signature, the
// legacy header's value as received (m's legacy_signature) against d's
// legacy contract, and the timestamp against the tolerance as for
// webhook-signature. nil when that is not the case: the Standard
// Webhooks check applies.
func verifyLegacy(d *rivorav1.Destination, m *rivorav1.VerifyDeliveryRequest, now time.Time) *rivorav1.VerifyDeliveryResponse {
	ls := d.GetLegacySignature()
	if !ls.GetReplaceStandard() || m.GetWebhookSignature() != "" || m.GetWebhookId() == "" || m.GetWebhookTimestamp() == "" {
		return nil
	}
	no := func(format string, args ...any) *rivorav1.VerifyDeliveryResponse {
		return &rivorav1.VerifyDeliveryResponse{Reason: fmt.Sprintf(format, args...)}
	}
	if m.GetLegacySignature() == "" {
		return no("destination %s sends only its partner's legacy signature, in header %s (--legacy-signature-only), not webhook-signature, and the request has no %s: not sent by Rivora (or by a listen too old to pass that header on)", d.GetId(), ls.GetHeader(), ls.GetHeader())
	}
	ts, err := strconv.ParseInt(m.GetWebhookTimestamp(), 10, 64)
	if err != nil {
		return no("webhook-timestamp %q is not Unix seconds: not sent by Rivora", m.GetWebhookTimestamp())
	}
	if off := now.Sub(time.Unix(ts, 0)).Abs(); off > webhook.DefaultTolerance {
		return no("timestamp outside tolerance: off by %s (tolerance %s): a replayed or delayed request", off.Truncate(time.Second), webhook.DefaultTolerance)
	}
	signer, err := legacysig.New(legacysig.Contract{Header: ls.GetHeader(), Template: ls.GetTemplate(), Algorithm: ls.GetAlgorithm(),
		Encoding: ls.GetEncoding(), Prefix: ls.GetPrefix(), Secret: ls.GetSecret()})
	if err != nil {
		return no("destination %s has no usable legacy signature: %v", d.GetId(), err)
	}
	if !hmac.Equal([]byte(signer.Sign(m.GetWebhookId(), ts, m.GetBody())), []byte(m.GetLegacySignature())) {
		return no("the legacy signature in %s does not match destination %s's legacy secret (it sends only that signature, --legacy-signature-only): signed with another secret, forged, or altered", ls.GetHeader(), d.GetId())
	}
	return &rivorav1.VerifyDeliveryResponse{Verified: true, SecretFingerprint: auth.Fingerprint(ls.GetSecret())}
}
