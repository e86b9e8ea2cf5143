package webhook

import (
	"fmt"
	"time"
)

// WithPrevious returns a signer for s's secret that also signs with
// previous every delivery whose webhook-timestamp is before until: the
// grace period of a secret rotation, during which receivers still holding
// the previous secret keep verifying (a Verifier accepts any one matching
// signature). The end is checked against each delivery's timestamp, so
// the signer needs no change when the grace ends; a zero until signs with
// s's secret alone.
func (s *Signer) WithPrevious(previous string, until time.Time) (*Signer, error) {
	p, err := NewSigner(previous)
	if err != nil {
		return nil, fmt.Errorf("previous secret: %w", err)
	}
	if s.key == nil {
		return nil, fmt.Errorf("previous secret: the signer does not sign v1")
	}
	out := s.clone()
	out.previous, out.previousUntil = p, until
	return out, nil
}
