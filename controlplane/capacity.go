package controlplane

import (
	"github.com/rivora/rivora/controlplane/notices"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
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

// MaxOwnDestinationsPerCustomer bounds the destinations one customer
// owns (created with a customer token, owner_customer): else one
// self-service customer could take the whole cell's --max-destinations,
// and the operators could register no partner.
const MaxOwnDestinationsPerCustomer = 100

// checkCapacity refuses one more destination once the cap is reached
// (ErrExhausted), and one more of a customer's own (owner: "" for an
// operator's) once it owns MaxOwnDestinationsPerCustomer. The
// operator-webhook destination Rivora keeps for itself does not count.
func (cp *ControlPlane) checkCapacity(tx *DestinationTx, owner string) error {
	if owner != "" {
		owned := 0
		tx.Each(func(d *rivorav1.Destination) {
			if d.GetOwnerCustomer() == owner {
				owned++
			}
		})
		if owned >= MaxOwnDestinationsPerCustomer {
			return limitReached("destinations_per_customer", MaxOwnDestinationsPerCustomer, "customer %q owns %d destinations, the most one customer may own (%d): delete unused ones (`rivoractl destinations delete ID`)", owner, owned, MaxOwnDestinationsPerCustomer)
		}
	}
	n := tx.Len()
	if tx.Has(notices.DestinationID) {
		n--
	}
	if limit := cp.maxDestinations(); n >= limit {
		return limitReached("max_destinations", limit, "the cell has %d destinations, the most --max-destinations allows (%d): delete unused ones (`rivoractl destinations delete ID`) or start the control plane with a higher --max-destinations", n, limit)
	}
	return nil
}
