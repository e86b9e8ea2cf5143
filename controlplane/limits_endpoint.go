package controlplane

import (
	"context"

	"connectrpc.com/connect"

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
		pending, err := h.cp.agents.pending(ctx, m.GetDestinationId(), "")
		if err != nil {
			return nil, errorf(ErrUnavailable, "count the pending events of %q for the projected drain time: %w; retry", m.GetDestinationId(), err)
		}
		resp := &rivorav1.SetLimitsOverrideResponse{Limits: view, DryRun: true}
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
	if pending, err := h.cp.agents.pending(ctx, m.GetDestinationId(), ""); err == nil {
		h.cp.projectDrain(ctx, resp, m.GetDestinationId(), pending)
	}
	return connect.NewResponse(resp), nil
}

// projectDrain says in resp how long destination id's pending events take
// at the override's rate, or, while it is paused or parked, that they do
// not drain now whatever the rate (as its health says).
func (cp *ControlPlane) projectDrain(ctx context.Context, resp *rivorav1.SetLimitsOverrideResponse, id string, pending int64) {
	resp.PendingEvents = pending
	if pending > 0 {
		switch cp.destinationStates(ctx, []string{id})[id] {
		case "paused":
			resp.NoDrainReason = "the destination is paused: nothing goes out until it is resumed"
			return
		case "down":
			resp.NoDrainReason = "the destination is parked: only probes go out until its partner answers"
			return
		}
	}
	resp.ProjectedDrainTime = drainTime(pending, resp.GetLimits().GetEffective().GetRatePerSecond(), 0)
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
