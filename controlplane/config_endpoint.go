package controlplane

import (
	"context"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// GetConfigStatus is the config version and, per agent, what it applied
// and owns, and what is known of each registered edge. A customer token
// (its --wait after a change) is told per agent only whether it is
// connected and which of its own token's changes it applied: nothing of
// the cell's agents' names, addresses, partitions or health, nor of its
// edges, nor of the cell's config version, which counts every customer's
// changes (ownVersions): version is the newest version its own changes
// produced, each agent's applied_version the newest of those the agent
// applied (0: none, or none this control plane remembers).
func (h *adminHandler) GetConfigStatus(ctx context.Context, req *connect.Request[rivorav1.GetConfigStatusRequest]) (*connect.Response[rivorav1.GetConfigStatusResponse], error) {
	version, _ := h.cp.store.Snapshot()
	agents := h.cp.agents.status()
	if !scopeOf(ctx).limited() {
		return connect.NewResponse(&rivorav1.GetConfigStatusResponse{Version: version, Agents: agents, Edges: h.cp.edgeStatuses()}), nil
	}
	token := caller(ctx).tokenID
	applied := make([]*rivorav1.AgentStatus, len(agents))
	for i, a := range agents {
		applied[i] = &rivorav1.AgentStatus{Connected: a.GetConnected(), AppliedVersion: h.cp.own.floor(token, a.GetAppliedVersion())}
	}
	return connect.NewResponse(&rivorav1.GetConfigStatusResponse{Version: h.cp.own.floor(token, version), Agents: applied}), nil
}
