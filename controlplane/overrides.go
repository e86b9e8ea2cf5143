package controlplane

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// The limits operations behind AdminService (limits_endpoint.go serves
// them): what is in force and why, and audited runtime overrides above the
// reviewed limits file.

// limitsView is a destination's limits in force, where each field comes
// from, and what the defaults and the limits file alone give.
func (cp *ControlPlane) limitsView(d *rivorav1.Destination) *rivorav1.GetLimitsResponse {
	eff, sources := cp.effective(d)
	return &rivorav1.GetLimitsResponse{DestinationId: d.GetId(), Effective: eff, Sources: sources, File: cp.fileLimits(d.GetId()), Destination: d.GetConfigured(), LimitsFile: cp.limitsFileName()}
}

// limitsFileName is the base name of the limits file (--limits), "" when
// there is none.
func (cp *ControlPlane) limitsFileName() string {
	if cp.cfg.LimitsPath == "" {
		return ""
	}
	return filepath.Base(cp.cfg.LimitsPath)
}

func (cp *ControlPlane) destinationLimits(id string) (*rivorav1.GetLimitsResponse, error) {
	d, ok := cp.store.Get(id)
	if !ok {
		return nil, notFound(id)
	}
	return cp.limitsView(d), nil
}

// setOverride sets (or extends) a destination's override; fields it does
// not set keep the unexpired override's values.
func (cp *ControlPlane) setOverride(m *rivorav1.SetLimitsOverrideRequest, who actor) (*rivorav1.GetLimitsResponse, uint64, error) {
	set, changes, err := validateOverride(m)
	if err != nil {
		return nil, 0, err
	}
	updated, version, err := cp.changeDestination("limits.override", m.GetDestinationId(), who, m.GetReason(), func(d *rivorav1.Destination) (string, error) {
		return applyOverride(d, m, set, changes, who, cp.now())
	})
	if err != nil {
		return nil, 0, err
	}
	return cp.limitsView(updated), version, nil
}

// previewOverride is setOverride's dry run: the limits the override would
// give, checked the same way, changing nothing.
func (cp *ControlPlane) previewOverride(m *rivorav1.SetLimitsOverrideRequest, who actor) (*rivorav1.GetLimitsResponse, error) {
	set, changes, err := validateOverride(m)
	if err != nil {
		return nil, err
	}
	d, ok := cp.store.Get(m.GetDestinationId())
	if !ok {
		return nil, notFound(m.GetDestinationId())
	}
	d = proto.Clone(d).(*rivorav1.Destination)
	if _, err := applyOverride(d, m, set, changes, who, cp.now()); err != nil {
		return nil, err
	}
	return cp.limitsView(d), nil
}

// applyOverride puts m's override on d and describes it for the audit.
//
// An override has one expiry for all its fields. A change that adds
// fields to an override still in force keeps its expiry unless it gives
// a ttl of its own, which then applies to the fields set earlier too;
// the audit says which. (It used to drop the earlier expiry: a second
// `limits set` made a 30-minute rate cut permanent, and said nothing.) A
// ttl alone (no field) sets the expiry of the override in force; with
// none in force there is nothing for it to end.
func applyOverride(d *rivorav1.Destination, m *rivorav1.SetLimitsOverrideRequest, set *rivorav1.Limits, changes []string, who actor, now time.Time) (string, error) {
	o := &rivorav1.LimitsOverride{Limits: &rivorav1.Limits{}, Author: who.name, Reason: m.GetReason(), SetAt: timestamppb.New(now), Fields: map[string]*rivorav1.OverrideField{}}
	var earlier []string // fields of the override in force that m does not set
	prev := d.GetOverride()
	if prev != nil && prev.GetExpiresAt() != nil && !prev.GetExpiresAt().AsTime().After(now) {
		prev = nil // expired
	}
	if prev == nil && len(changes) == 0 {
		return "", errorf(ErrPrecondition, "destination %q has no limits override in force: a ttl alone sets when the override in force ends; give it with the limits to override (--rate, --burst, --max-attempts, --window, --timeout, --max-in-flight)", d.GetId())
	}
	if prev != nil {
		o.Limits = proto.Clone(prev.GetLimits()).(*rivorav1.Limits)
		for _, f := range limitFields {
			if fieldSet(prev.GetLimits(), f) && !fieldSet(set, f) {
				earlier = append(earlier, f)
				o.Fields[f] = overrideField(prev, f) // keeps its own reason
			}
		}
	}
	copySetFields(o.Limits, set)
	for _, f := range limitFields {
		if fieldSet(set, f) {
			o.Fields[f] = &rivorav1.OverrideField{Author: who.name, Reason: m.GetReason(), SetAt: o.GetSetAt()}
		}
	}
	detail := strings.Join(changes, ", ")
	switch ttl := m.GetTtl(); {
	case ttl != nil && len(changes) == 0:
		detail = fmt.Sprintf("expiry set: the override (%s) ends in %s", strings.Join(earlier, ", "), ttl.AsDuration())
		o.ExpiresAt = timestamppb.New(now.Add(ttl.AsDuration()))
	case ttl != nil:
		o.ExpiresAt = timestamppb.New(now.Add(ttl.AsDuration()))
		detail += fmt.Sprintf(" for %s", ttl.AsDuration())
		if len(earlier) > 0 {
			detail += fmt.Sprintf(" (this expiry now ends the fields set earlier too: %s)", strings.Join(earlier, ", "))
		}
	case prev != nil && prev.GetExpiresAt() != nil:
		o.ExpiresAt = prev.GetExpiresAt()
		detail += fmt.Sprintf(" until %s (the override's expiry, kept)", prev.GetExpiresAt().AsTime().UTC().Format(time.RFC3339))
	}
	d.Override = o
	return detail, nil
}

// overrideField is who set field f of override o, why and when: its own
// record, or, for an override stored before fields were recorded, its
// latest change's.
func overrideField(o *rivorav1.LimitsOverride, f string) *rivorav1.OverrideField {
	if of, ok := o.GetFields()[f]; ok {
		return of
	}
	return &rivorav1.OverrideField{Author: o.GetAuthor(), Reason: o.GetReason(), SetAt: o.GetSetAt()}
}

// validateOverride checks an override request (the same for a change
// and its dry run) and returns the limits it sets, described.
func validateOverride(m *rivorav1.SetLimitsOverrideRequest) (*rivorav1.Limits, []string, error) {
	set := &rivorav1.Limits{RatePerSecond: m.GetRatePerSecond(), Burst: m.GetBurst(), MaxAttempts: m.GetMaxAttempts(), Window: m.GetWindow(), Timeout: m.GetTimeout(), MaxInFlight: m.GetMaxInFlight()}
	// A dry run changes nothing, so there is nothing to audit a reason for.
	if strings.TrimSpace(m.GetReason()) == "" && !m.GetDryRun() {
		return nil, nil, tag(ErrInvalid, errors.New("an override needs a reason (--reason \"…\"): the audit log says why limits changed"))
	}
	if err := checkLimits(set); err != nil {
		return nil, nil, err
	}
	changes := copySetFields(&rivorav1.Limits{}, set)
	if len(changes) == 0 && m.GetTtl() == nil {
		return nil, nil, tag(ErrInvalid, errors.New("nothing to override: set at least one limit (--rate, --burst, …), or a ttl alone to set when the override in force ends"))
	}
	if ttl := m.GetTtl(); ttl != nil && ttl.AsDuration() <= 0 {
		return nil, nil, errorf(ErrInvalid, "ttl must be positive, got %s", ttl.AsDuration())
	}
	return set, changes, nil
}

func (cp *ControlPlane) clearOverride(id string, who actor, reason string) (*rivorav1.GetLimitsResponse, uint64, error) {
	updated, version, err := cp.changeDestination("limits.clear", id, who, reason, func(d *rivorav1.Destination) (string, error) {
		if d.GetOverride() == nil {
			return "", errorf(ErrPrecondition, "destination %q has no limits override", d.GetId())
		}
		d.Override = nil
		return "override cleared", nil
	})
	if err != nil {
		return nil, 0, err
	}
	return cp.limitsView(updated), version, nil
}

// limitsDrifts lists, per destination and field, where the limits in
// force differ from what the limits file gives. With no limits file there
// is no reviewed value to drift from: it lists the fields runtime
// overrides set, each beside what the destination has without it (its
// own setting, else the built-in default); a destination's own settings
// (create, update) are its configuration, not drift.
func (cp *ControlPlane) limitsDrifts() []*rivorav1.LimitsDrift {
	_, dests := cp.store.Snapshot()
	noFile := cp.cfg.LimitsPath == ""
	var drifts []*rivorav1.LimitsDrift
	for _, d := range dests {
		eff, sources := cp.effective(d)
		base := cp.fileLimits(d.GetId())
		if noFile {
			bare := proto.Clone(d).(*rivorav1.Destination)
			bare.Override = nil
			base, _ = cp.effective(bare)
		}
		for _, f := range limitFields {
			override := sources[f].GetSource() == "override"
			if (noFile && override) || (!noFile && fieldText(eff, f) != fieldText(base, f)) {
				drifts = append(drifts, &rivorav1.LimitsDrift{
					DestinationId: d.GetId(), Field: f, FileValue: fieldText(base, f), EffectiveValue: fieldText(eff, f), Source: sources[f],
				})
			}
		}
	}
	return drifts
}
