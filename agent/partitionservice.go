package agent

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent/owner"
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
	h, err := s.a.Health(ctx, req.Msg.GetDestinationId(), req.Msg.GetRateHistory())
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewResponse(&rivorav1.GetHealthResponse{Destinations: h}), nil
}

// AppendLocal stores events of a partition this agent owns straight into its
// lanes (the ingest gateway's fast path); owned is false when it does not
// own p, or the partition is being released.
func (a *Agent) AppendLocal(ctx context.Context, p int, events []*rivorav1.Event, data [][]byte, msgIDs []string) ([]bool, bool, error) {
	part := a.partition(p)
	if part == nil {
		return nil, false, nil
	}
	items := make([]owner.Item, len(events))
	for i := range events {
		items[i] = owner.Item{Event: events[i], Data: data[i], MsgID: msgIDs[i]}
	}
	dups, err := part.Append(ctx, items)
	if errors.Is(err, owner.ErrNotOwned) && len(dups) == 0 {
		return nil, false, nil
	}
	return dups, true, err
}
