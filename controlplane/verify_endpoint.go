package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/auth"
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

// verifyDelivery checks m against d's current secret and, while a
// rotation's grace lasts for m's timestamp, its previous one (the agents
// sign with both until then).
func verifyDelivery(d *rivorav1.Destination, m *rivorav1.VerifyDeliveryRequest, now time.Time) *rivorav1.VerifyDeliveryResponse {
	headers := http.Header{}
	headers.Set(webhook.HeaderID, m.GetWebhookId())
	headers.Set(webhook.HeaderTimestamp, m.GetWebhookTimestamp())
	headers.Set(webhook.HeaderSignature, m.GetWebhookSignature())
	secrets := []string{d.GetSecret()}
	if prev, until := d.GetPreviousSecret(), d.GetPreviousSecretExpiresAt(); prev != "" && until != nil {
		if ts, err := strconv.ParseInt(m.GetWebhookTimestamp(), 10, 64); err == nil && time.Unix(ts, 0).Before(until.AsTime()) {
			secrets = append(secrets, prev)
		}
	}
	var err error
	for _, secret := range secrets {
		var v *webhook.Verifier
		if v, err = webhook.NewVerifier(secret); err != nil {
			return &rivorav1.VerifyDeliveryResponse{Reason: fmt.Sprintf("destination %s has no usable secret: %v", d.GetId(), err)}
		}
		if err = v.WithClock(func() time.Time { return now }).Verify(headers, m.GetBody()); err == nil {
			return &rivorav1.VerifyDeliveryResponse{Verified: true, SecretFingerprint: auth.Fingerprint(secret)}
		}
		if !errors.Is(err, webhook.ErrNoMatch) {
			break // missing headers or a stale timestamp: no other secret helps
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
		return fmt.Sprintf("no signature matches destination %s's secret: forged, altered, or signed with another secret", destination)
	}
	return err.Error()
}
