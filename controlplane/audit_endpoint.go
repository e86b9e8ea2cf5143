package controlplane

import (
	"context"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// defaultAuditLimit is how many entries ListAudit returns when the request
// does not say.
const defaultAuditLimit = 100

func (h *adminHandler) ListAudit(ctx context.Context, req *connect.Request[rivorav1.ListAuditRequest]) (*connect.Response[rivorav1.ListAuditResponse], error) {
	limit := int(req.Msg.GetLimit())
	if limit <= 0 {
		limit = defaultAuditLimit
	}
	entries, err := h.cp.audit.List(limit, req.Msg.GetDestinationId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.ListAuditResponse{Entries: entries}), nil
}
