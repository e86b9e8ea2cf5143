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
	view, version, err := h.cp.setOverride(req.Msg, caller(ctx))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.SetLimitsOverrideResponse{Limits: view, Version: version}), nil
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
