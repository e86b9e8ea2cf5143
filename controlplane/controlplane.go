// Package controlplane holds Rivora's configuration — destinations and their
// limits — serves the admin API, and pushes every change to the agents.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk/webhook"
)

// Fleet is the set of agents the control plane steers: in `rivora dev` the
// one agent in the same process.
type Fleet interface {
	// ApplyDestinations installs the current destinations everywhere.
	ApplyDestinations(list []*rivorav1.Destination) error
	// Pending counts a destination's undelivered, unarchived events.
	Pending(ctx context.Context, destinationID string) (int64, error)
	// ArchivePending dead-letters them (reason "deleted").
	ArchivePending(ctx context.Context, destinationID string) (int64, error)
	// Health reports destinations' budgets and backlogs ("" = all).
	Health(ctx context.Context, destinationID string) ([]*rivorav1.DestinationHealth, error)
}

// Default limits of a destination.
var DefaultLimits = &rivorav1.Limits{
	RatePerSecond: 50,
	Burst:         200,
	MaxAttempts:   8,
	Window:        durationpb.New(72 * time.Hour),
	Timeout:       durationpb.New(10 * time.Second),
	MaxInFlight:   32,
}

// ControlPlane serves rivora.v1.AdminService.
type ControlPlane struct {
	store *Store
	fleet Fleet
	log   *slog.Logger
	now   func() time.Time
}

// New returns a control plane over store, steering fleet. It pushes the
// current configuration to the fleet before returning.
func New(store *Store, fleet Fleet, log *slog.Logger) (*ControlPlane, error) {
	cp := &ControlPlane{store: store, fleet: fleet, log: log, now: time.Now}
	version, dests := store.Snapshot()
	if err := fleet.ApplyDestinations(dests); err != nil {
		return nil, fmt.Errorf("push config version %d: %w", version, err)
	}
	log.Info("config pushed", "version", version, "destinations", len(dests))
	return cp, nil
}

// Handle registers the admin service on mux.
func (cp *ControlPlane) Handle(mux *http.ServeMux, opts ...connect.HandlerOption) {
	mux.Handle(rivorav1connect.NewAdminServiceHandler(cp, opts...))
}

func (cp *ControlPlane) push(version uint64, dests []*rivorav1.Destination) error {
	if err := cp.fleet.ApplyDestinations(dests); err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("saved config version %d but could not apply it: %w", version, err))
	}
	return nil
}

func (cp *ControlPlane) CreateDestination(ctx context.Context, req *connect.Request[rivorav1.CreateDestinationRequest]) (*connect.Response[rivorav1.CreateDestinationResponse], error) {
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
	limits, err := effectiveLimits(m.GetLimits())
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	now := timestamppb.New(cp.now())
	d := &rivorav1.Destination{Id: m.GetId(), Url: m.GetUrl(), Secret: secret, Limits: limits, CreatedAt: now, UpdatedAt: now, PriorityClass: rivorav1.PriorityClass_PRIORITY_CLASS_NORMAL}
	version, dests, err := cp.store.Update(func(all map[string]*rivorav1.Destination) error {
		if _, exists := all[d.Id]; exists {
			return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("destination %q already exists; change it with `rivoractl destinations update %s`", d.Id, d.Id))
		}
		all[d.Id] = d
		return nil
	})
	if err != nil {
		return nil, asConnect(err)
	}
	if err := cp.push(version, dests); err != nil {
		return nil, err
	}
	cp.log.Info("destination created", "destination", d.Id, "url", d.Url, "version", version)
	return connect.NewResponse(&rivorav1.CreateDestinationResponse{Destination: d}), nil
}

func (cp *ControlPlane) GetDestination(ctx context.Context, req *connect.Request[rivorav1.GetDestinationRequest]) (*connect.Response[rivorav1.GetDestinationResponse], error) {
	d, ok := cp.store.Get(req.Msg.GetId())
	if !ok {
		return nil, notFound(req.Msg.GetId())
	}
	pending, err := cp.fleet.Pending(ctx, d.GetId())
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewResponse(&rivorav1.GetDestinationResponse{Destination: d, Pending: pending}), nil
}

func (cp *ControlPlane) ListDestinations(ctx context.Context, req *connect.Request[rivorav1.ListDestinationsRequest]) (*connect.Response[rivorav1.ListDestinationsResponse], error) {
	_, dests := cp.store.Snapshot()
	return connect.NewResponse(&rivorav1.ListDestinationsResponse{Destinations: dests}), nil
}

func (cp *ControlPlane) UpdateDestination(ctx context.Context, req *connect.Request[rivorav1.UpdateDestinationRequest]) (*connect.Response[rivorav1.UpdateDestinationResponse], error) {
	m := req.Msg
	var updated *rivorav1.Destination
	version, dests, err := cp.store.Update(func(all map[string]*rivorav1.Destination) error {
		d, ok := all[m.GetId()]
		if !ok {
			return notFound(m.GetId())
		}
		if m.Url != nil {
			if err := validateURL(m.GetUrl()); err != nil {
				return connect.NewError(connect.CodeInvalidArgument, err)
			}
			d.Url = m.GetUrl()
		}
		if m.Secret != nil {
			if _, err := webhook.Key(m.GetSecret()); err != nil {
				return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("secret: %w", err))
			}
			d.Secret = m.GetSecret()
		}
		lim := d.GetLimits()
		if m.RatePerSecond != nil {
			lim.RatePerSecond = m.GetRatePerSecond()
		}
		if m.Burst != nil {
			lim.Burst = m.GetBurst()
		}
		if m.MaxAttempts != nil {
			lim.MaxAttempts = m.GetMaxAttempts()
		}
		if m.MaxInFlight != nil {
			lim.MaxInFlight = m.GetMaxInFlight()
		}
		if m.Window != nil {
			lim.Window = m.GetWindow()
		}
		if m.Timeout != nil {
			lim.Timeout = m.GetTimeout()
		}
		if err := validateLimits(lim); err != nil {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
		d.UpdatedAt = timestamppb.New(cp.now())
		updated = d
		return nil
	})
	if err != nil {
		return nil, asConnect(err)
	}
	if err := cp.push(version, dests); err != nil {
		return nil, err
	}
	cp.log.Info("destination updated", "destination", updated.GetId(), "version", version)
	return connect.NewResponse(&rivorav1.UpdateDestinationResponse{Destination: updated}), nil
}

func (cp *ControlPlane) DeleteDestination(ctx context.Context, req *connect.Request[rivorav1.DeleteDestinationRequest]) (*connect.Response[rivorav1.DeleteDestinationResponse], error) {
	id := req.Msg.GetId()
	if _, ok := cp.store.Get(id); !ok {
		return nil, notFound(id)
	}
	pending, err := cp.fleet.Pending(ctx, id)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	var archived int64
	if pending > 0 {
		if !req.Msg.GetForce() {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("destination %q has %d pending events; wait for them, or delete with --force to archive them as dead letters", id, pending))
		}
		if archived, err = cp.fleet.ArchivePending(ctx, id); err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("archive pending events of %q (%d archived so far): %w", id, archived, err))
		}
	}
	version, dests, err := cp.store.Update(func(all map[string]*rivorav1.Destination) error {
		delete(all, id)
		return nil
	})
	if err != nil {
		return nil, asConnect(err)
	}
	if err := cp.push(version, dests); err != nil {
		return nil, err
	}
	cp.log.Info("destination deleted", "destination", id, "archived", archived, "version", version)
	return connect.NewResponse(&rivorav1.DeleteDestinationResponse{Archived: archived}), nil
}

func (cp *ControlPlane) SetPriority(ctx context.Context, req *connect.Request[rivorav1.SetPriorityRequest]) (*connect.Response[rivorav1.SetPriorityResponse], error) {
	m := req.Msg
	setsClass := m.GetClass() != rivorav1.PriorityClass_PRIORITY_CLASS_UNSPECIFIED
	setsWeight := m.Weight != nil
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
	version, dests, err := cp.store.Update(func(all map[string]*rivorav1.Destination) error {
		d, ok := all[m.GetDestinationId()]
		if !ok {
			return notFound(m.GetDestinationId())
		}
		if setsClass {
			d.PriorityClass = m.GetClass()
		}
		if setsWeight {
			if d.CustomerWeights == nil {
				d.CustomerWeights = make(map[string]float64)
			}
			d.CustomerWeights[m.GetCustomerId()] = m.GetWeight()
		}
		d.UpdatedAt = timestamppb.New(cp.now())
		updated = d
		return nil
	})
	if err != nil {
		return nil, asConnect(err)
	}
	if err := cp.push(version, dests); err != nil {
		return nil, err
	}
	cp.log.Info("priority set", "destination", updated.GetId(), "class", m.GetClass().String(), "customer", m.GetCustomerId(), "weight", m.GetWeight(), "version", version)
	return connect.NewResponse(&rivorav1.SetPriorityResponse{Destination: updated}), nil
}

func (cp *ControlPlane) GetDestinationHealth(ctx context.Context, req *connect.Request[rivorav1.GetDestinationHealthRequest]) (*connect.Response[rivorav1.GetDestinationHealthResponse], error) {
	id := req.Msg.GetDestinationId()
	if id != "" {
		if _, ok := cp.store.Get(id); !ok {
			return nil, notFound(id)
		}
	}
	health, err := cp.fleet.Health(ctx, id)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewResponse(&rivorav1.GetDestinationHealthResponse{Destinations: health}), nil
}

func notFound(id string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("destination %q does not exist; see `rivoractl destinations list`", id))
}

func asConnect(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	return connect.NewError(connect.CodeInternal, err)
}

// validateID mirrors the agent's rule for ids used as subject tokens.
func validateID(id string) error {
	if id == "" {
		return errors.New("destination id is empty")
	}
	if len(id) > 64 {
		return fmt.Errorf("destination id is %d bytes; the limit is 64", len(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("destination id %q has %q at byte %d; use letters, digits, '_' and '-'", id, c, i)
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

// effectiveLimits fills unset fields with the defaults.
func effectiveLimits(in *rivorav1.Limits) (*rivorav1.Limits, error) {
	out := &rivorav1.Limits{
		RatePerSecond: DefaultLimits.RatePerSecond,
		Burst:         DefaultLimits.Burst,
		MaxAttempts:   DefaultLimits.MaxAttempts,
		Window:        DefaultLimits.Window,
		Timeout:       DefaultLimits.Timeout,
		MaxInFlight:   DefaultLimits.MaxInFlight,
	}
	if in.GetRatePerSecond() != 0 {
		out.RatePerSecond = in.GetRatePerSecond()
	}
	if in.GetBurst() != 0 {
		out.Burst = in.GetBurst()
	}
	if in.GetMaxAttempts() != 0 {
		out.MaxAttempts = in.GetMaxAttempts()
	}
	if in.GetWindow() != nil {
		out.Window = in.GetWindow()
	}
	if in.GetTimeout() != nil {
		out.Timeout = in.GetTimeout()
	}
	if in.GetMaxInFlight() != 0 {
		out.MaxInFlight = in.GetMaxInFlight()
	}
	return out, validateLimits(out)
}

func validateLimits(l *rivorav1.Limits) error {
	switch {
	case l.GetRatePerSecond() <= 0:
		return fmt.Errorf("rate_per_second must be positive, got %v", l.GetRatePerSecond())
	case l.GetBurst() < 1:
		return fmt.Errorf("burst must be at least 1, got %d", l.GetBurst())
	case l.GetMaxAttempts() < 1:
		return fmt.Errorf("max_attempts must be at least 1, got %d", l.GetMaxAttempts())
	case l.GetWindow().AsDuration() <= 0:
		return fmt.Errorf("window must be positive, got %s", l.GetWindow().AsDuration())
	case l.GetTimeout().AsDuration() <= 0 || l.GetTimeout().AsDuration() > 5*time.Minute:
		return fmt.Errorf("timeout must be in (0, 5m], got %s", l.GetTimeout().AsDuration())
	case l.GetMaxInFlight() < 1:
		return fmt.Errorf("max_in_flight must be at least 1, got %d", l.GetMaxInFlight())
	}
	return nil
}
