package controlplane

import (
	"context"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Secret rotation: a destination's new secret signs at once, and its
// previous one keeps signing too until the grace period ends, so a
// receiver switches at its own pace (Standard Webhooks: several
// space-separated signatures, one match is enough). The agents check the
// end of the grace when they sign: nothing is pushed when it passes.

const (
	// DefaultRotationGrace is how long the previous secret keeps signing
	// when the request does not say.
	DefaultRotationGrace = 24 * time.Hour
	// MaxRotationGrace bounds the grace period: an old secret is retired
	// within a week.
	MaxRotationGrace = 7 * 24 * time.Hour
)

func (h *adminHandler) RotateDestinationSecret(ctx context.Context, req *connect.Request[rivorav1.RotateDestinationSecretRequest]) (*connect.Response[rivorav1.RotateDestinationSecretResponse], error) {
	d, version, err := h.cp.rotateSecret(req.Msg, caller(ctx), scopeOf(ctx))
	if err != nil {
		return nil, err
	}
	// Like create's, the one answer that shows the (new) secret; a
	// destination signing v1a alone rotated only its ed25519 key, whose
	// public key every answer shows, and its unchanged secret stays hidden.
	answer := h.cp.answer(d)
	if signsV1(d.GetSignatureScheme()) {
		answer = h.cp.answerWithSecret(d)
	}
	return connect.NewResponse(&rivorav1.RotateDestinationSecretResponse{Destination: scopeOf(ctx).shown(answer), Version: version}), nil
}

// rotateSecret makes secret (generated when empty) the destination's
// signing secret and keeps the current one signing for the grace period;
// a destination signing v1a rotates its ed25519 key the same way (and
// only that key when it signs v1a alone).
// A previous secret still in its grace is dropped: only the last two
// secrets sign.
func (cp *ControlPlane) rotateSecret(m *rivorav1.RotateDestinationSecretRequest, who actor, sc scope) (*rivorav1.Destination, uint64, error) {
	id := m.GetDestinationId()
	if err := reserved(id); err != nil {
		return nil, 0, err
	}
	grace, err := rotationGrace(m.GetGrace())
	if err != nil {
		return nil, 0, err
	}
	return cp.changeDestination("destination.rotate_secret", id, who, "", func(d *rivorav1.Destination) (string, error) {
		if !sc.destination(d) {
			return "", notFound(id)
		}
		scheme := d.GetSignatureScheme()
		if m.GetSigningKey() != "" && !signsV1a(scheme) {
			return "", errorf(ErrInvalid, "signing key: destination %q signs v1 (HMAC) only; set its signature scheme to v1a or both first", id)
		}
		if m.GetSecret() != "" && !signsV1(scheme) {
			return "", errorf(ErrInvalid, "secret: destination %q signs v1a (ed25519) only; rotate its key (--signing-key, or none to have one generated), or set its scheme to v1 or both first", id)
		}
		now := cp.now()
		var details []string
		if signsV1(scheme) {
			secret, err := secretOrNew(m.GetSecret())
			if err != nil {
				return "", err
			}
			if secret == d.GetSecret() {
				return "", errorf(ErrInvalid, "secret: that is destination %q's current secret; pass another one, or none to have one generated", id)
			}
			r := rotate(d.GetSecret(), secret, grace, now)
			d.Secret, d.PreviousSecret, d.PreviousSecretExpiresAt = secret, r.previous, r.until
			details = append(details, r.detail)
		}
		if signsV1a(scheme) {
			detail, err := rotateSigningKey(d, m.GetSigningKey(), grace, now)
			if err != nil {
				return "", err
			}
			details = append(details, detail)
		}
		d.UpdatedAt = timestamppb.New(now)
		return strings.Join(details, "; "), nil
	})
}

// rotation is what rotating a secret leaves: the previous secret and
// when it stops signing ("" and nil: at once), and the audit detail.
type rotation struct {
	previous string
	until    *timestamppb.Timestamp
	detail   string
}

// rotate replaces old by secret at now, old signing too for grace.
func rotate(old, secret string, grace time.Duration, now time.Time) rotation {
	if old == "" {
		return rotation{detail: fmt.Sprintf("secret set to %s (its deliveries were signed with its destination's secret)", auth.Fingerprint(secret))}
	}
	if grace == 0 {
		return rotation{detail: fmt.Sprintf("secret rotated to %s; previous secret %s no longer signs (no grace)", auth.Fingerprint(secret), auth.Fingerprint(old))}
	}
	until := now.Add(grace)
	return rotation{previous: old, until: timestamppb.New(until), detail: fmt.Sprintf("secret rotated to %s; previous secret %s signs too until %s (grace %s)",
		auth.Fingerprint(secret), auth.Fingerprint(old), until.UTC().Format(time.RFC3339), grace)}
}

// rotationGrace is a request's grace period: DefaultRotationGrace when
// unset, 0 to MaxRotationGrace otherwise.
func rotationGrace(g *durationpb.Duration) (time.Duration, error) {
	if g == nil {
		return DefaultRotationGrace, nil
	}
	if err := g.CheckValid(); err != nil {
		return 0, errorf(ErrInvalid, "grace: %w", err)
	}
	grace := g.AsDuration()
	if grace < 0 || grace > MaxRotationGrace {
		return 0, errorf(ErrInvalid, "grace %s: want 0 (no overlap: the previous secret stops signing at once) up to %s (7 days)", grace, MaxRotationGrace)
	}
	return grace, nil
}

// answerWithSecret is answer, but showing the signing secret: for the
// answers to create and rotate, the only ones that do. The previous
// secret and custom header values stay hidden.
func (cp *ControlPlane) answerWithSecret(d *rivorav1.Destination) *rivorav1.Destination {
	out := cp.answer(d)
	out.Secret = d.GetSecret()
	return out
}

// withoutPreviousSecret replaces a rotation's previous secret by its
// fingerprint (its expiry stays: operators see when it stops signing).
func withoutPreviousSecret(d *rivorav1.Destination) {
	d.PreviousSecretFingerprint = auth.Fingerprint(d.GetPreviousSecret())
	d.PreviousSecret = ""
}

// clearPreviousSecret ends a rotation's grace at once (a secret set with
// UpdateDestination replaces the old one without overlap).
func clearPreviousSecret(d *rivorav1.Destination) {
	d.PreviousSecret, d.PreviousSecretExpiresAt, d.PreviousSecretFingerprint = "", nil, ""
}
