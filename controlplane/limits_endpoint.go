package controlplane

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func (h *adminHandler) GetLimits(ctx context.Context, req *connect.Request[rivorav1.GetLimitsRequest]) (*connect.Response[rivorav1.GetLimitsResponse], error) {
	view, err := h.cp.destinationLimits(req.Msg.GetDestinationId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(view), nil
}

func (h *adminHandler) SetLimitsOverride(ctx context.Context, req *connect.Request[rivorav1.SetLimitsOverrideRequest]) (*connect.Response[rivorav1.SetLimitsOverrideResponse], error) {
	m := req.Msg
	if m.GetDryRun() {
		view, err := h.cp.previewOverride(m, caller(ctx))
		if err != nil {
			return nil, err
		}
		resp := &rivorav1.SetLimitsOverrideResponse{Limits: view, DryRun: true}
		pending, err := h.cp.countForOverride(ctx, resp, m)
		if err != nil {
			return nil, errorf(ErrUnavailable, "count the pending events of %q for the projected drain time: %w; retry", m.GetDestinationId(), err)
		}
		h.cp.projectDrain(ctx, resp, m.GetDestinationId(), pending)
		return connect.NewResponse(resp), nil
	}
	view, version, err := h.cp.setOverride(m, caller(ctx))
	if err != nil {
		return nil, err
	}
	resp := &rivorav1.SetLimitsOverrideResponse{Limits: view, Version: version}
	// The change is made; its drain time is a courtesy, left out when the
	// agents cannot count now.
	if pending, err := h.cp.countForOverride(ctx, resp, m); err == nil {
		h.cp.projectDrain(ctx, resp, m.GetDestinationId(), pending)
	}
	return connect.NewResponse(resp), nil
}

// countForOverride counts the destination's pending events and, when the
// override sets max_attempts, its lane heads that already used that many
// or more (resp.heads_at_max_attempts): they die at their next turn; when
// it sets window, its events already past it (resp.events_past_window):
// they die at their next failure, all at once while it is parked.
func (cp *ControlPlane) countForOverride(ctx context.Context, resp *rivorav1.SetLimitsOverrideResponse, m *rivorav1.SetLimitsOverrideRequest) (pending int64, err error) {
	var least int32
	if m.MaxAttempts != nil {
		least = resp.GetLimits().GetEffective().GetMaxAttempts()
	}
	var window time.Duration
	if m.GetWindow() != nil {
		window = resp.GetLimits().GetEffective().GetWindow().AsDuration()
	}
	c, err := cp.agents.pendingAndHeads(ctx, m.GetDestinationId(), least, window)
	if err == nil {
		resp.HeadsAtMaxAttempts, resp.EventsPastWindow = c.heads, c.pastWindow
	}
	return c.pending, err
}

// projectDrain says in resp how long destination id's pending events take
// at the rate it would run at under the override — destinations health's
// drain time at that rate, plus what is left of a partner's Retry-After
// hold —, or, while it is paused, disabled, unusable or parked, that they do not
// drain now whatever the rate (as its health says).
func (cp *ControlPlane) projectDrain(ctx context.Context, resp *rivorav1.SetLimitsOverrideResponse, id string, pending int64) {
	resp.PendingEvents = pending
	h, err := cp.ownerHealth(ctx, id)
	if pending > 0 {
		switch d, ok := cp.store.Get(id); {
		case ok && d.GetDisabled():
			resp.NoDrainReason = "the destination is disabled (its partner answered 410 Gone): nothing goes out until it is resumed"
			return
		case ok && d.GetPaused():
			resp.NoDrainReason = "the destination is paused: nothing goes out until it is resumed"
			return
		case err != nil:
			resp.NoDrainReason = fmt.Sprintf("no drain time: the owner of its partition did not say how it stands (%v)", err)
			return
		case h.GetUnusable() != "":
			resp.NoDrainReason = "the destination's config is unusable on the owner of its partition (" + h.GetUnusable() + "): nothing goes out until a config of it builds there"
			return
		case h.GetState() == "parked":
			resp.NoDrainReason = "the destination is parked: only probes go out until its partner answers"
			return
		}
	}
	// drainTime reads the pending count from the health: the one counted
	// for the override.
	counted := &rivorav1.DestinationHealth{}
	if h != nil {
		counted = proto.Clone(h).(*rivorav1.DestinationHealth)
	}
	counted.PendingEvents = pending
	if pending > 0 && deliveredShare(counted) == 0 {
		resp.NoDrainReason = fmt.Sprintf("none of the last minute's %d attempts was delivered (%.0f%% 429, %.0f%% 5xx, %.0f%% other 4xx, %.0f%% no answer): nothing drains until its partner accepts events, whatever the rate",
			h.GetAttemptsLastMinute(), 100*h.GetThrottledShare(), 100*h.GetServerErrorShare(), 100*h.GetClientErrorShare(), 100*h.GetNoAnswerShare())
		return
	}
	// Only the arrivals taken off the rate: those on a backlog older
	// than the window (drainTime).
	resp.ArrivalsPerSecond = streamArrivals(counted)
	drain := drainTime(counted, runRate(h, resp.GetLimits().GetEffective().GetRatePerSecond()))
	resp.ProjectedDrainTime = heldDrainTime(drain, h.GetHoldUntil(), cp.now())
}

// runRate is the rate a destination whose health is h runs at once its
// limit is rate: the limit while healthy; a degraded (cut) budget keeps
// its current rate when the limit is above it, and recovers from there as
// the partner lets it (the budget's SetLimits).
func runRate(h *rivorav1.DestinationHealth, rate float64) float64 {
	if h.GetState() == "degraded" && h.GetCurrentRate() < rate {
		return h.GetCurrentRate()
	}
	return rate
}

// ownerHealth is destination id's health as the owner of its partition
// sees it: nil and an error when that is not known within stateTimeout
// (no owner right now, an agent slow to answer), nil alone when the owner
// has nothing of it.
func (cp *ControlPlane) ownerHealth(ctx context.Context, id string) (*rivorav1.DestinationHealth, error) {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	health, err := cp.agents.ownersHealth(ctx, id, false, cp.cfg.Partitions)
	for _, h := range health {
		if h.GetDestinationId() == id {
			return h, nil
		}
	}
	return nil, err
}

func (h *adminHandler) ClearLimitsOverride(ctx context.Context, req *connect.Request[rivorav1.ClearLimitsOverrideRequest]) (*connect.Response[rivorav1.ClearLimitsOverrideResponse], error) {
	m := req.Msg
	view, version, err := h.cp.clearOverride(m.GetDestinationId(), caller(ctx), m.GetReason())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.ClearLimitsOverrideResponse{Limits: view, Version: version}), nil
}

func (h *adminHandler) DiffLimits(ctx context.Context, req *connect.Request[rivorav1.DiffLimitsRequest]) (*connect.Response[rivorav1.DiffLimitsResponse], error) {
	return connect.NewResponse(&rivorav1.DiffLimitsResponse{Drifts: h.cp.limitsDrifts(), LimitsFile: h.cp.limitsFileName()}), nil
}
