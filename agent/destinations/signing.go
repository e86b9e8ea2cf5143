package destinations

import (
	"net/http"
	"time"

	"github.com/rivora/rivora/internal/legacysig"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
)

// v1Secret is pb's current v1 (HMAC) secret, "" when it signs v1a
// (ed25519) only.
func v1Secret(pb *rivorav1.Destination) string {
	if pb.GetSignatureScheme() == webhook.SchemeV1a {
		return ""
	}
	return pb.GetSecret()
}

// v1aKeys are pb's ed25519 key and a rotation's previous one with the
// end of its grace, when pb signs v1a; "" when it does not.
func v1aKeys(pb *rivorav1.Destination) (key, previous string, until time.Time) {
	if scheme := pb.GetSignatureScheme(); scheme != webhook.SchemeV1a && scheme != webhook.SchemeBoth {
		return "", "", time.Time{}
	}
	if pb.GetPreviousSigningKey() != "" && pb.GetPreviousSigningKeyExpiresAt() != nil {
		previous, until = pb.GetPreviousSigningKey(), pb.GetPreviousSigningKeyExpiresAt().AsTime()
	}
	return pb.GetSigningKey(), previous, until
}

// signerFromProto is the destination's signer for its signature scheme:
// v1 with its secret, v1a with its ed25519 key, or both; and while a
// rotation's grace lasts the previous secret or key too. The signer
// checks the grace's end against each delivery's timestamp, so the
// control plane pushes nothing when it passes.
func signerFromProto(pb *rivorav1.Destination) (*webhook.Signer, error) {
	scheme := pb.GetSignatureScheme()
	var signer *webhook.Signer
	var err error
	if scheme == webhook.SchemeV1a {
		signer, err = webhook.NewEd25519Signer(pb.GetSigningKey())
	} else {
		signer, err = webhook.NewSigner(pb.GetSecret())
		if err == nil && pb.GetPreviousSecret() != "" && pb.GetPreviousSecretExpiresAt() != nil {
			signer, err = signer.WithPrevious(pb.GetPreviousSecret(), pb.GetPreviousSecretExpiresAt().AsTime())
		}
		if err == nil && scheme == webhook.SchemeBoth {
			signer, err = signer.WithEd25519(pb.GetSigningKey())
		}
	}
	if err != nil {
		return nil, err
	}
	if scheme != webhook.SchemeV1a && scheme != webhook.SchemeBoth {
		return signer, nil
	}
	if pb.GetPreviousSigningKey() == "" || pb.GetPreviousSigningKeyExpiresAt() == nil {
		return signer, nil
	}
	return signer.WithPreviousEd25519(pb.GetPreviousSigningKey(), pb.GetPreviousSigningKeyExpiresAt().AsTime())
}

// legacyFromProto is the destination's legacy signer (nil when it has
// none).
func legacyFromProto(pb *rivorav1.LegacySignature) (*legacysig.Signer, error) {
	if pb == nil {
		return nil, nil
	}
	return legacysig.New(legacysig.Contract{Header: pb.GetHeader(), Template: pb.GetTemplate(), Algorithm: pb.GetAlgorithm(),
		Encoding: pb.GetEncoding(), Prefix: pb.GetPrefix(), Secret: pb.GetSecret()})
}

// headersFromProto is the destination's custom headers, as the control
// plane validated them (nil when none).
func headersFromProto(list []*rivorav1.Header) http.Header {
	if len(list) == 0 {
		return nil
	}
	h := make(http.Header, len(list))
	for _, x := range list {
		h[http.CanonicalHeaderKey(x.GetName())] = []string{x.GetValue()}
	}
	return h
}
