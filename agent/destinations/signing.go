package destinations

import (
	"net/http"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
)

// signerFromProto is the destination's signer: its secret, and while a
// rotation's grace lasts its previous secret too. The signer checks the
// grace's end against each delivery's timestamp, so the control plane
// pushes nothing when it passes.
func signerFromProto(pb *rivorav1.Destination) (*webhook.Signer, error) {
	signer, err := webhook.NewSigner(pb.GetSecret())
	if err != nil {
		return nil, err
	}
	if pb.GetPreviousSecret() == "" || pb.GetPreviousSecretExpiresAt() == nil {
		return signer, nil
	}
	return signer.WithPrevious(pb.GetPreviousSecret(), pb.GetPreviousSecretExpiresAt().AsTime())
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
