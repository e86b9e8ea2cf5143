package controlplane

import (
	"context"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// ListEdges is what the control plane knows of every registered edge,
// sorted by name.
func (h *adminHandler) ListEdges(ctx context.Context, _ *connect.Request[rivorav1.ListEdgesRequest]) (*connect.Response[rivorav1.ListEdgesResponse], error) {
	return connect.NewResponse(&rivorav1.ListEdgesResponse{Edges: h.cp.edgeStatuses()}), nil
}

// GetEdge is what the control plane knows of one edge (NotFound naming
// it when it is not registered).
func (h *adminHandler) GetEdge(ctx context.Context, req *connect.Request[rivorav1.GetEdgeRequest]) (*connect.Response[rivorav1.GetEdgeResponse], error) {
	if err := validateEdgeName("name", req.Msg.GetName()); err != nil {
		return nil, err
	}
	s, err := h.cp.edgeStatus(req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.GetEdgeResponse{Edge: s}), nil
}

// RemoveEdge forgets an edge (removeEdge), audited.
func (h *adminHandler) RemoveEdge(ctx context.Context, req *connect.Request[rivorav1.RemoveEdgeRequest]) (*connect.Response[rivorav1.RemoveEdgeResponse], error) {
	if err := h.cp.removeEdge(req.Msg.GetName(), req.Msg.GetForce(), caller(ctx)); err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.RemoveEdgeResponse{}), nil
}
