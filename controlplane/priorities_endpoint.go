package controlplane

import (
	"context"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func (h *adminHandler) SetPriority(ctx context.Context, req *connect.Request[rivorav1.SetPriorityRequest]) (*connect.Response[rivorav1.SetPriorityResponse], error) {
	d, version, err := h.cp.setPriority(req.Msg, caller(ctx))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.SetPriorityResponse{Destination: h.cp.answer(d), Version: version}), nil
}
