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
		return connect.NewResponse(&rivorav1.SetLimitsOverrideResponse{
			Limits: view, DryRun: true, PendingEvents: pending, ProjectedDrainTime: drainTime(pending, view.GetEffective().GetRatePerSecond()),
		}), nil
	}
	view, version, err := h.cp.setOverride(m, caller(ctx))
	if err != nil {
		return nil, err
	}
	resp := &rivorav1.SetLimitsOverrideResponse{Limits: view, Version: version}
	// The change is made; its drain time is a courtesy, left out when the
	// agents cannot count now.
	if pending, err := h.cp.agents.pending(ctx, m.GetDestinationId(), ""); err == nil {
		resp.PendingEvents, resp.ProjectedDrainTime = pending, drainTime(pending, view.GetEffective().GetRatePerSecond())
	}
	return connect.NewResponse(resp), nil
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
	return connect.NewResponse(&rivorav1.DiffLimitsResponse{Drifts: h.cp.limitsDrifts()}), nil
}
