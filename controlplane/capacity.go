package controlplane

import (
	"github.com/rivora/rivora/controlplane/notices"
)

// DefaultMaxDestinations is the default cap on registered destinations
// (Config.MaxDestinations, --max-destinations). Every destination costs
// every agent memory, a budget and a feed entry, and every change is
// pushed to every agent: a runaway script must not register millions.
const DefaultMaxDestinations = 10_000

// maxDestinations is the cap in force.
func (cp *ControlPlane) maxDestinations() int {
	if cp.cfg.MaxDestinations > 0 {
		return cp.cfg.MaxDestinations
	}
	return DefaultMaxDestinations
}

// checkCapacity refuses one more destination once the cap is reached
// (ErrExhausted). The operator-webhook destination Rivora keeps for
// itself does not count.
func (cp *ControlPlane) checkCapacity(tx *DestinationTx) error {
	n := tx.Len()
	if tx.Has(notices.DestinationID) {
		n--
	}
	if limit := cp.maxDestinations(); n >= limit {
		return errorf(ErrExhausted, "the cell has %d destinations, the most --max-destinations allows (%d): delete unused ones (`rivoractl destinations delete ID`) or start the control plane with a higher --max-destinations", n, limit)
	}
	return nil
}
