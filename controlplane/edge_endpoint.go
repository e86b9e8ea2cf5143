package controlplane

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// edgeHandler serves rivora.v1.EdgeService: the redacted config stream
// edges accept events by, and their buffer reports. Like agentHandler it
// keeps no state; the gates in front of it (Handle: leader only, the cell
// token) are the agents'.
type edgeHandler struct {
	cp *ControlPlane
}

// WatchEdge registers the edge on its first watch (registerEdge), then
// streams it the agents' config, redacted (forEdge), until the edge goes,
// this control plane stops leading, an operator removes the edge, or
// another edge process takes its name. A process whose name another
// running one holds is refused (claimEdge).
func (s *edgeHandler) WatchEdge(ctx context.Context, req *connect.Request[rivorav1.WatchEdgeRequest], stream *connect.ServerStream[rivorav1.WatchEdgeResponse]) error {
	cp := s.cp
	name, instance := req.Msg.GetEdgeName(), req.Msg.GetInstanceId()
	if err := validateEdgeName("edge_name", name); err != nil {
		return err
	}
	if err := cp.claimEdge(name, instance); err != nil {
		return err
	}
	if err := cp.registerEdge(name); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := cp.edges.watch(name, instance, cancel, cp.now())
	defer func() { done(cp.now()) }()
	cp.log.Info("edge watching", "edge", name, "applied_version", req.Msg.GetAppliedVersion())
	return cp.feedEdge(ctx, name, func(resp *rivorav1.WatchResponse) error {
		return stream.Send(&rivorav1.WatchEdgeResponse{Config: forEdge(resp)})
	})
}

// ReportEdge keeps a registered edge's report of its buffer (reportEdge).
func (s *edgeHandler) ReportEdge(ctx context.Context, req *connect.Request[rivorav1.ReportEdgeRequest]) (*connect.Response[rivorav1.ReportEdgeResponse], error) {
	if err := s.cp.reportEdge(req.Msg.GetEdgeName(), req.Msg.GetInstanceId(), req.Msg.GetBuffer()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&rivorav1.ReportEdgeResponse{}), nil
}

// forEdge is an agents' config response as an edge gets it, a copy (the
// feed keeps what it sent to compute the next delta): no signing secret,
// previous secret or custom header value of any destination or
// subscription (each replaced by its fingerprint, as API answers show
// them: an edge never delivers), no partitions and no other edges'
// names. The API tokens (hashes) stay: the edge authenticates publishers
// with them.
func forEdge(resp *rivorav1.WatchResponse) *rivorav1.WatchResponse {
	out := proto.Clone(resp).(*rivorav1.WatchResponse)
	for _, d := range out.GetDestinations() {
		withoutSecret(d)
	}
	for _, sub := range out.GetSubscriptions() {
		withoutSubscriptionSecrets(sub)
	}
	out.Partitions, out.Edges, out.EdgesChanged = nil, nil, false
	return out
}
