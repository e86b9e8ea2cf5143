package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
)

// maxPauses bounds the pause history kept per destination.
const maxPauses = 64

func timestampNow(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

// change applies fn to the stored destinations as one new config version,
// records it in the audit log and pushes it to the agents.
func (cp *ControlPlane) change(action, destinationID, who, reason string, fn func(all map[string]*rivorav1.Destination) (detail string, err error)) (uint64, error) {
	var detail string
	version, err := cp.store.Update(func(all map[string]*rivorav1.Destination) error {
		var err error
		detail, err = fn(all)
		return err
	})
	if err != nil {
		return 0, asConnect(err)
	}
	cp.record(action, destinationID, author(who), detail, version, reason)
	cp.log.Info("config changed", "action", action, "destination", destinationID, "author", author(who), "version", version, "detail", detail)
	cp.broadcast()
	cp.agents.awaitApplied(version, applyGrace)
	return version, nil
}

// applyGrace is how long a change waits for the connected agents to apply
// it before answering, so that a client can use a destination right after
// creating it. A slow agent does not block the answer longer; `--wait`
// waits for real.
const applyGrace = 2 * time.Second

func (cp *ControlPlane) CreateDestination(ctx context.Context, req *connect.Request[rivorav1.CreateDestinationRequest]) (*connect.Response[rivorav1.CreateDestinationResponse], error) {
	if err := cp.leaderOnly(); err != nil {
		return nil, err
	}
	m := req.Msg
	if err := validateID(m.GetId()); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if err := validateURL(m.GetUrl()); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	secret := m.GetSecret()
	if secret == "" {
		var err error
		if secret, err = webhook.NewSecret(); err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
	} else if _, err := webhook.Key(secret); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("secret: %w", err))
	}
	configured := proto.Clone(orEmpty(m.GetLimits())).(*rivorav1.Limits)
	if err := validateSetLimits(configured); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	now := timestamppb.New(cp.now())
	d := &rivorav1.Destination{
		Id: m.GetId(), Url: m.GetUrl(), Secret: secret, Configured: configured,
		CreatedAt: now, UpdatedAt: now, PriorityClass: rivorav1.PriorityClass_PRIORITY_CLASS_NORMAL,
	}
	version, err := cp.change("destination.create", d.Id, m.GetAuthor(), "", func(all map[string]*rivorav1.Destination) (string, error) {
		if _, exists := all[d.Id]; exists {
			return "", connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("destination %q already exists; change it with `rivoractl destinations update %s`", d.Id, d.Id))
		}
		all[d.Id] = d
		return "url " + d.Url, nil
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.CreateDestinationResponse{Destination: cp.render(d), Version: version}), nil
}

func (cp *ControlPlane) GetDestination(ctx context.Context, req *connect.Request[rivorav1.GetDestinationRequest]) (*connect.Response[rivorav1.GetDestinationResponse], error) {
	if err := cp.leaderOnly(); err != nil {
		return nil, err
	}
	d, ok := cp.store.Get(req.Msg.GetId())
	if !ok {
		return nil, notFound(req.Msg.GetId())
	}
	pending, err := cp.agents.pending(ctx, d.GetId())
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewResponse(&rivorav1.GetDestinationResponse{Destination: cp.render(d), Pending: pending}), nil
}

func (cp *ControlPlane) ListDestinations(ctx context.Context, req *connect.Request[rivorav1.ListDestinationsRequest]) (*connect.Response[rivorav1.ListDestinationsResponse], error) {
	if err := cp.leaderOnly(); err != nil {
		return nil, err
	}
	_, dests := cp.snapshot()
	return connect.NewResponse(&rivorav1.ListDestinationsResponse{Destinations: dests}), nil
}

func (cp *ControlPlane) UpdateDestination(ctx context.Context, req *connect.Request[rivorav1.UpdateDestinationRequest]) (*connect.Response[rivorav1.UpdateDestinationResponse], error) {
	if err := cp.leaderOnly(); err != nil {
		return nil, err
	}
	m := req.Msg
	var updated *rivorav1.Destination
	version, err := cp.change("destination.update", m.GetId(), m.GetAuthor(), "", func(all map[string]*rivorav1.Destination) (string, error) {
		d, ok := all[m.GetId()]
		if !ok {
			return "", notFound(m.GetId())
		}
		var changes []string
		if m.Url != nil {
			if err := validateURL(m.GetUrl()); err != nil {
				return "", connect.NewError(connect.CodeInvalidArgument, err)
			}
			d.Url = m.GetUrl()
			changes = append(changes, "url "+d.Url)
		}
		if m.Secret != nil {
			if _, err := webhook.Key(m.GetSecret()); err != nil {
				return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("secret: %w", err))
			}
			d.Secret = m.GetSecret()
			changes = append(changes, "secret rotated")
		}
		set := &rivorav1.Limits{RatePerSecond: m.GetRatePerSecond(), Burst: m.GetBurst(), MaxAttempts: m.GetMaxAttempts(), Window: m.GetWindow(), Timeout: m.GetTimeout(), MaxInFlight: m.GetMaxInFlight()}
		if err := validateSetLimits(set); err != nil {
			return "", connect.NewError(connect.CodeInvalidArgument, err)
		}
		if d.Configured == nil {
			d.Configured = &rivorav1.Limits{}
		}
		for _, f := range limitFields {
			if fieldSet(set, f) {
				copyField(d.Configured, set, f)
				changes = append(changes, f+" "+fieldText(set, f))
			}
		}
		if len(changes) == 0 {
			return "", connect.NewError(connect.CodeInvalidArgument, errors.New("nothing to update: set --url, --secret or a limit"))
		}
		d.UpdatedAt = timestamppb.New(cp.now())
		updated = d
		return strings.Join(changes, ", "), nil
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.UpdateDestinationResponse{Destination: cp.render(updated), Version: version}), nil
}

func (cp *ControlPlane) DeleteDestination(ctx context.Context, req *connect.Request[rivorav1.DeleteDestinationRequest]) (*connect.Response[rivorav1.DeleteDestinationResponse], error) {
	if err := cp.leaderOnly(); err != nil {
		return nil, err
	}
	id := req.Msg.GetId()
	if _, ok := cp.store.Get(id); !ok {
		return nil, notFound(id)
	}
	pending, err := cp.agents.pending(ctx, id)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	var archived int64
	if pending > 0 {
		if !req.Msg.GetForce() {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("destination %q has %d pending events; wait for them, or delete with --force to archive them as dead letters", id, pending))
		}
		if archived, err = cp.agents.archivePending(ctx, id); err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("archive pending events of %q (%d archived so far): %w", id, archived, err))
		}
	}
	version, err := cp.change("destination.delete", id, req.Msg.GetAuthor(), "", func(all map[string]*rivorav1.Destination) (string, error) {
		delete(all, id)
		return fmt.Sprintf("%d pending events archived", archived), nil
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.DeleteDestinationResponse{Archived: archived, Version: version}), nil
}

func (cp *ControlPlane) SetPriority(ctx context.Context, req *connect.Request[rivorav1.SetPriorityRequest]) (*connect.Response[rivorav1.SetPriorityResponse], error) {
	if err := cp.leaderOnly(); err != nil {
		return nil, err
	}
	m := req.Msg
	setsClass := m.GetClass() != rivorav1.PriorityClass_PRIORITY_CLASS_UNSPECIFIED
	setsWeight := m.Weight != nil
	if _, known := rivorav1.PriorityClass_name[int32(m.GetClass())]; !known {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("class %d is not a priority class; use high, normal or low", m.GetClass()))
	}
	if !setsClass && !setsWeight {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("nothing to change: set a class, or a customer and its weight"))
	}
	if setsWeight {
		if err := validateID(m.GetCustomerId()); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("customer: %w", err))
		}
		if w := m.GetWeight(); !(w >= 0.01 && w <= 10_000) {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("weight must be between 0.01 and 10000, got %v", w))
		}
	} else if m.GetCustomerId() != "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("a customer needs a weight"))
	}
	var updated *rivorav1.Destination
	version, err := cp.change("priority.set", m.GetDestinationId(), m.GetAuthor(), "", func(all map[string]*rivorav1.Destination) (string, error) {
		d, ok := all[m.GetDestinationId()]
		if !ok {
			return "", notFound(m.GetDestinationId())
		}
		var changes []string
		if setsClass {
			d.PriorityClass = m.GetClass()
			changes = append(changes, "class "+strings.ToLower(strings.TrimPrefix(m.GetClass().String(), "PRIORITY_CLASS_")))
		}
		if setsWeight {
			if d.CustomerWeights == nil {
				d.CustomerWeights = make(map[string]float64)
			}
			d.CustomerWeights[m.GetCustomerId()] = m.GetWeight()
			changes = append(changes, fmt.Sprintf("customer %s weight %g", m.GetCustomerId(), m.GetWeight()))
		}
		d.UpdatedAt = timestamppb.New(cp.now())
		updated = d
		return strings.Join(changes, ", "), nil
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.SetPriorityResponse{Destination: cp.render(updated), Version: version}), nil
}

func (cp *ControlPlane) GetDestinationHealth(ctx context.Context, req *connect.Request[rivorav1.GetDestinationHealthRequest]) (*connect.Response[rivorav1.GetDestinationHealthResponse], error) {
	if err := cp.leaderOnly(); err != nil {
		return nil, err
	}
	id := req.Msg.GetDestinationId()
	if id != "" {
		if _, ok := cp.store.Get(id); !ok {
			return nil, notFound(id)
		}
	}
	health, err := cp.agents.health(ctx, id)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewResponse(&rivorav1.GetDestinationHealthResponse{Destinations: health}), nil
}

func (cp *ControlPlane) PauseDestination(ctx context.Context, req *connect.Request[rivorav1.PauseDestinationRequest]) (*connect.Response[rivorav1.PauseDestinationResponse], error) {
	if err := cp.leaderOnly(); err != nil {
		return nil, err
	}
	m := req.Msg
	var updated *rivorav1.Destination
	version, err := cp.change("destination.pause", m.GetDestinationId(), m.GetAuthor(), m.GetReason(), func(all map[string]*rivorav1.Destination) (string, error) {
		d, ok := all[m.GetDestinationId()]
		if !ok {
			return "", notFound(m.GetDestinationId())
		}
		if d.GetPaused() {
			return "", connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("destination %q is already paused; resume it with `rivoractl destinations resume %s`", d.GetId(), d.GetId()))
		}
		d.Paused = true
		d.Pauses = append(d.Pauses, &rivorav1.PauseInterval{Start: timestamppb.New(cp.now()), Reason: m.GetReason(), Author: author(m.GetAuthor())})
		if len(d.Pauses) > maxPauses {
			d.Pauses = d.Pauses[len(d.Pauses)-maxPauses:]
		}
		updated = d
		return "paused", nil
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.PauseDestinationResponse{Destination: cp.render(updated), Version: version}), nil
}

func (cp *ControlPlane) ResumeDestination(ctx context.Context, req *connect.Request[rivorav1.ResumeDestinationRequest]) (*connect.Response[rivorav1.ResumeDestinationResponse], error) {
	if err := cp.leaderOnly(); err != nil {
		return nil, err
	}
	m := req.Msg
	var updated *rivorav1.Destination
	version, err := cp.change("destination.resume", m.GetDestinationId(), m.GetAuthor(), "", func(all map[string]*rivorav1.Destination) (string, error) {
		d, ok := all[m.GetDestinationId()]
		if !ok {
			return "", notFound(m.GetDestinationId())
		}
		if !d.GetPaused() {
			return "", connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("destination %q is not paused", d.GetId()))
		}
		d.Paused = false
		var lasted time.Duration
		if n := len(d.Pauses); n > 0 && d.Pauses[n-1].GetEnd() == nil {
			d.Pauses[n-1].End = timestamppb.New(cp.now())
			lasted = d.Pauses[n-1].GetEnd().AsTime().Sub(d.Pauses[n-1].GetStart().AsTime())
		}
		updated = d
		return fmt.Sprintf("resumed after %s", lasted.Round(time.Millisecond)), nil
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.ResumeDestinationResponse{Destination: cp.render(updated), Version: version}), nil
}

func (cp *ControlPlane) limitsView(d *rivorav1.Destination) *rivorav1.GetLimitsResponse {
	eff, sources := cp.effective(d)
	return &rivorav1.GetLimitsResponse{DestinationId: d.GetId(), Effective: eff, Sources: sources, File: cp.fileLimits(d.GetId())}
}

func (cp *ControlPlane) GetLimits(ctx context.Context, req *connect.Request[rivorav1.GetLimitsRequest]) (*connect.Response[rivorav1.GetLimitsResponse], error) {
	if err := cp.leaderOnly(); err != nil {
		return nil, err
	}
	d, ok := cp.store.Get(req.Msg.GetDestinationId())
	if !ok {
		return nil, notFound(req.Msg.GetDestinationId())
	}
	return connect.NewResponse(cp.limitsView(d)), nil
}

func (cp *ControlPlane) SetLimitsOverride(ctx context.Context, req *connect.Request[rivorav1.SetLimitsOverrideRequest]) (*connect.Response[rivorav1.SetLimitsOverrideResponse], error) {
	if err := cp.leaderOnly(); err != nil {
		return nil, err
	}
	m := req.Msg
	if strings.TrimSpace(m.GetReason()) == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("an override needs a reason (--reason \"…\"): the audit log says why limits changed"))
	}
	set := &rivorav1.Limits{RatePerSecond: m.GetRatePerSecond(), Burst: m.GetBurst(), MaxAttempts: m.GetMaxAttempts(), Window: m.GetWindow(), Timeout: m.GetTimeout(), MaxInFlight: m.GetMaxInFlight()}
	if err := validateSetLimits(set); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	var changes []string
	for _, f := range limitFields {
		if fieldSet(set, f) {
			changes = append(changes, f+" "+fieldText(set, f))
		}
	}
	if len(changes) == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("nothing to override: set at least one limit (--rate, --burst, …)"))
	}
	if ttl := m.GetTtl(); ttl != nil && ttl.AsDuration() <= 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("ttl must be positive, got %s", ttl.AsDuration()))
	}
	var updated *rivorav1.Destination
	version, err := cp.change("limits.override", m.GetDestinationId(), m.GetAuthor(), m.GetReason(), func(all map[string]*rivorav1.Destination) (string, error) {
		d, ok := all[m.GetDestinationId()]
		if !ok {
			return "", notFound(m.GetDestinationId())
		}
		now := cp.now()
		o := &rivorav1.LimitsOverride{Limits: &rivorav1.Limits{}, Author: author(m.GetAuthor()), Reason: m.GetReason(), SetAt: timestamppb.New(now)}
		if prev := d.GetOverride(); prev != nil && (prev.GetExpiresAt() == nil || prev.GetExpiresAt().AsTime().After(now)) {
			o.Limits = proto.Clone(prev.GetLimits()).(*rivorav1.Limits)
		}
		for _, f := range limitFields {
			if fieldSet(set, f) {
				copyField(o.Limits, set, f)
			}
		}
		detail := strings.Join(changes, ", ")
		if ttl := m.GetTtl(); ttl != nil {
			o.ExpiresAt = timestamppb.New(now.Add(ttl.AsDuration()))
			detail += fmt.Sprintf(" for %s", ttl.AsDuration())
		}
		d.Override = o
		updated = d
		return detail, nil
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.SetLimitsOverrideResponse{Limits: cp.limitsView(updated), Version: version}), nil
}

func (cp *ControlPlane) ClearLimitsOverride(ctx context.Context, req *connect.Request[rivorav1.ClearLimitsOverrideRequest]) (*connect.Response[rivorav1.ClearLimitsOverrideResponse], error) {
	if err := cp.leaderOnly(); err != nil {
		return nil, err
	}
	m := req.Msg
	var updated *rivorav1.Destination
	version, err := cp.change("limits.clear", m.GetDestinationId(), m.GetAuthor(), m.GetReason(), func(all map[string]*rivorav1.Destination) (string, error) {
		d, ok := all[m.GetDestinationId()]
		if !ok {
			return "", notFound(m.GetDestinationId())
		}
		if d.GetOverride() == nil {
			return "", connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("destination %q has no limits override", d.GetId()))
		}
		d.Override = nil
		updated = d
		return "override cleared", nil
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.ClearLimitsOverrideResponse{Limits: cp.limitsView(updated), Version: version}), nil
}

func (cp *ControlPlane) DiffLimits(ctx context.Context, req *connect.Request[rivorav1.DiffLimitsRequest]) (*connect.Response[rivorav1.DiffLimitsResponse], error) {
	if err := cp.leaderOnly(); err != nil {
		return nil, err
	}
	_, dests := cp.store.Snapshot()
	resp := &rivorav1.DiffLimitsResponse{}
	for _, d := range dests {
		eff, sources := cp.effective(d)
		file := cp.fileLimits(d.GetId())
		for _, f := range limitFields {
			if fieldText(eff, f) != fieldText(file, f) {
				resp.Drifts = append(resp.Drifts, &rivorav1.LimitsDrift{
					DestinationId: d.GetId(), Field: f, FileValue: fieldText(file, f), EffectiveValue: fieldText(eff, f), Source: sources[f],
				})
			}
		}
	}
	return connect.NewResponse(resp), nil
}

func (cp *ControlPlane) ListAudit(ctx context.Context, req *connect.Request[rivorav1.ListAuditRequest]) (*connect.Response[rivorav1.ListAuditResponse], error) {
	if err := cp.leaderOnly(); err != nil {
		return nil, err
	}
	limit := int(req.Msg.GetLimit())
	if limit <= 0 {
		limit = 100
	}
	entries, err := cp.audit.List(limit, req.Msg.GetDestinationId())
	if err != nil {
		return nil, asConnect(err)
	}
	return connect.NewResponse(&rivorav1.ListAuditResponse{Entries: entries}), nil
}

func (cp *ControlPlane) GetConfigStatus(ctx context.Context, req *connect.Request[rivorav1.GetConfigStatusRequest]) (*connect.Response[rivorav1.GetConfigStatusResponse], error) {
	if err := cp.leaderOnly(); err != nil {
		return nil, err
	}
	version, _ := cp.store.Snapshot()
	return connect.NewResponse(&rivorav1.GetConfigStatusResponse{Version: version, Agents: cp.agents.status()}), nil
}

func orEmpty(l *rivorav1.Limits) *rivorav1.Limits {
	if l == nil {
		return &rivorav1.Limits{}
	}
	return l
}

// validateID mirrors the agent's rule for ids used as subject tokens.
func validateID(id string) error {
	if id == "" {
		return errors.New("id is empty")
	}
	if len(id) > 64 {
		return fmt.Errorf("id %.20q… is %d bytes; the limit is 64", id, len(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("id %q has %q at byte %d; use letters, digits, '_' and '-'", id, c, i)
		}
	}
	return nil
}

func validateURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("url %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("url %q must be an absolute http:// or https:// URL", raw)
	}
	return nil
}

// validateSetLimits checks the fields that are set (zero = unset).
func validateSetLimits(l *rivorav1.Limits) error {
	switch {
	case !(l.GetRatePerSecond() >= 0 && l.GetRatePerSecond() <= 1e7): // NaN too: it would lift every limit
		return fmt.Errorf("rate_per_second must be in (0, 1e7], got %v", l.GetRatePerSecond())
	case l.GetBurst() < 0:
		return fmt.Errorf("burst must be at least 1, got %d", l.GetBurst())
	case l.GetMaxAttempts() < 0:
		return fmt.Errorf("max_attempts must be at least 1, got %d", l.GetMaxAttempts())
	case l.GetWindow() != nil && l.GetWindow().AsDuration() <= 0:
		return fmt.Errorf("window must be positive, got %s", l.GetWindow().AsDuration())
	case l.GetTimeout() != nil && (l.GetTimeout().AsDuration() <= 0 || l.GetTimeout().AsDuration() > 5*time.Minute):
		return fmt.Errorf("timeout must be in (0, 5m], got %s", l.GetTimeout().AsDuration())
	case l.GetMaxInFlight() < 0:
		return fmt.Errorf("max_in_flight must be at least 1, got %d", l.GetMaxInFlight())
	}
	return nil
}
