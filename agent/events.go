package agent

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// eventService answers "where is my event?" from the scheduler (pending)
// and the event's history (attempts, delivered, dead).
type eventService struct {
	a *Agent
}

func (s *eventService) GetEvent(ctx context.Context, req *connect.Request[rivorav1.GetEventRequest]) (*connect.Response[rivorav1.GetEventResponse], error) {
	id := req.Msg.GetEventId()
	if err := lanes.ValidateEventID("event_id", id); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	outcomes, err := s.a.history.Lookup(ctx, id)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	loc, pending := s.a.sched.Find(id)
	if !pending && len(outcomes) == 0 {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("event %s: %w here (never accepted, still moving into its lane, or its history expired)", id, errNotFound))
	}
	resp := &rivorav1.GetEventResponse{EventId: id}
	for _, o := range outcomes {
		if o.GetAttempt() != nil {
			resp.Attempts = append(resp.Attempts, o.GetAttempt())
		}
		resp.DestinationId, resp.CustomerId, resp.LaneKey = o.GetDestinationId(), o.GetCustomerId(), o.GetLaneKey()
		resp.Type, resp.AcceptedAt = o.GetType(), o.GetAcceptedAt()
		switch o.GetKind() {
		case rivorav1.EventOutcome_KIND_DELIVERED:
			resp.State = rivorav1.EventState_EVENT_STATE_DELIVERED
		case rivorav1.EventOutcome_KIND_DEAD:
			resp.State = rivorav1.EventState_EVENT_STATE_DEAD
			resp.DeadReason = o.GetDeadReason()
		}
	}
	if pending {
		resp.DestinationId, resp.CustomerId, resp.LaneKey = loc.Lane.Destination, loc.Lane.Customer, loc.Lane.Key
		resp.AcceptedAt = timestamppb.New(loc.Entry.AcceptedAt)
		if ev := loc.Entry.Event; ev != nil {
			resp.Type = ev.GetType()
		}
		resp.AheadInLane = int32(loc.Ahead)
		resp.State = rivorav1.EventState_EVENT_STATE_PENDING
		if loc.InFlight {
			resp.State = rivorav1.EventState_EVENT_STATE_IN_FLIGHT
		}
		if loc.Ahead == 0 && loc.Head.Attempts > 0 && !loc.InFlight {
			resp.NextAttemptAt = timestamppb.New(loc.Head.NotBefore)
		}
	}
	return connect.NewResponse(resp), nil
}
