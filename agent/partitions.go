package agent

import (
	"context"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// partitionService implements rivora.v1.PartitionService for the control
// plane.
type partitionService struct {
	a *Agent
}

func (s *partitionService) CountPending(ctx context.Context, req *connect.Request[rivorav1.CountPendingRequest]) (*connect.Response[rivorav1.CountPendingResponse], error) {
	n, err := s.a.Pending(ctx, req.Msg.GetDestinationId())
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewResponse(&rivorav1.CountPendingResponse{Pending: n}), nil
}

func (s *partitionService) ArchivePending(ctx context.Context, req *connect.Request[rivorav1.ArchivePendingRequest]) (*connect.Response[rivorav1.ArchivePendingResponse], error) {
	n, err := s.a.ArchivePending(ctx, req.Msg.GetDestinationId())
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewResponse(&rivorav1.ArchivePendingResponse{Archived: n}), nil
}

func (s *partitionService) GetHealth(ctx context.Context, req *connect.Request[rivorav1.GetHealthRequest]) (*connect.Response[rivorav1.GetHealthResponse], error) {
	h, err := s.a.Health(ctx, req.Msg.GetDestinationId())
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewResponse(&rivorav1.GetHealthResponse{Destinations: h}), nil
}
