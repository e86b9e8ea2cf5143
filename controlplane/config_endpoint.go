package controlplane

import (
	"context"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// GetConfigStatus is the config version and, per agent, what it applied
// and owns, and what is known of each registered edge.
func (h *adminHandler) GetConfigStatus(ctx context.Context, req *connect.Request[rivorav1.GetConfigStatusRequest]) (*connect.Response[rivorav1.GetConfigStatusResponse], error) {
	version, _ := h.cp.store.Snapshot()
	return connect.NewResponse(&rivorav1.GetConfigStatusResponse{Version: version, Agents: h.cp.agents.status(), Edges: h.cp.edgeStatuses()}), nil
}
