package controlplane

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// The edge registry is being built (issue 25): these answer Unimplemented
// until it lands.

func (h *adminHandler) ListEdges(context.Context, *connect.Request[rivorav1.ListEdgesRequest]) (*connect.Response[rivorav1.ListEdgesResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("edges: not built yet"))
}

func (h *adminHandler) GetEdge(context.Context, *connect.Request[rivorav1.GetEdgeRequest]) (*connect.Response[rivorav1.GetEdgeResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("edges: not built yet"))
}

func (h *adminHandler) RemoveEdge(context.Context, *connect.Request[rivorav1.RemoveEdgeRequest]) (*connect.Response[rivorav1.RemoveEdgeResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("edges: not built yet"))
}
