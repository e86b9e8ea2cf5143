package controlplane

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/ids"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// setPriority sets a destination's priority class, a customer's weight
// within it, or both.
func (cp *ControlPlane) setPriority(m *rivorav1.SetPriorityRequest, who actor) (*rivorav1.Destination, uint64, error) {
	if err := validatePriority(m); err != nil {
		return nil, 0, err
	}
	setsClass := m.GetClass() != rivorav1.PriorityClass_PRIORITY_CLASS_UNSPECIFIED
	return cp.changeDestination("priority.set", m.GetDestinationId(), who, m.GetReason(), func(d *rivorav1.Destination) (string, error) {
		var changes []string
		if setsClass {
			d.PriorityClass = m.GetClass()
			changes = append(changes, "class "+strings.ToLower(strings.TrimPrefix(m.GetClass().String(), "PRIORITY_CLASS_")))
		}
		if m.Weight != nil {
			if d.CustomerWeights == nil {
				d.CustomerWeights = make(map[string]float64)
			}
			d.CustomerWeights[m.GetCustomerId()] = m.GetWeight()
			changes = append(changes, fmt.Sprintf("customer %s weight %g", m.GetCustomerId(), m.GetWeight()))
		}
		d.UpdatedAt = timestamppb.New(cp.now())
		return strings.Join(changes, ", "), nil
	})
}

// validatePriority checks a SetPriorityRequest (an ErrInvalid).
func validatePriority(m *rivorav1.SetPriorityRequest) error {
	setsClass := m.GetClass() != rivorav1.PriorityClass_PRIORITY_CLASS_UNSPECIFIED
	setsWeight := m.Weight != nil
	if _, known := rivorav1.PriorityClass_name[int32(m.GetClass())]; !known {
		return errorf(ErrInvalid, "class %d is not a priority class; use high, normal or low", m.GetClass())
	}
	if !setsClass && !setsWeight {
		return tag(ErrInvalid, errors.New("nothing to change: set a class, or a customer and its weight"))
	}
	if !setsWeight {
		if m.GetCustomerId() != "" {
			return tag(ErrInvalid, errors.New("a customer needs a weight"))
		}
		return nil
	}
	if err := ids.Validate("id", m.GetCustomerId()); err != nil {
		return errorf(ErrInvalid, "customer: %w", err)
	}
	if w := m.GetWeight(); !(w >= 0.01 && w <= 10_000) {
		return errorf(ErrInvalid, "weight must be between 0.01 and 10000, got %v", w)
	}
	return nil
}
