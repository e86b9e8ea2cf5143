package agent

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/lanes"
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
	// The lane first, then the history: an event that ends between the
	// two was recorded before its lane let it go.
	loc, pending := s.a.sched.Find(id)
	outcomes, err := s.a.history.Lookup(ctx, id)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	if !pending && len(outcomes) == 0 {
		// The same answer as for another customer's event (auth.Policies).
		return nil, auth.EventNotFound(id)
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
		if loc.Ahead == 0 && !loc.Head.LastAttemptAt.IsZero() && !loc.InFlight && !heldByParked(loc) {
			resp.NextAttemptAt = timestamppb.New(loc.Head.NotBefore)
		}
		s.explainWaiting(resp, loc)
	}
	return connect.NewResponse(resp), nil
}

// explainWaiting fills in why a pending event waits, its attempts used
// and its window.
func (s *eventService) explainWaiting(resp *rivorav1.GetEventResponse, loc scheduler.Location) {
	now := time.Now()
	maxAttempts := 0
	if d, ok := s.a.registry.Get(loc.Lane.Destination); ok {
		maxAttempts = d.Retry.MaxAttempts
		start := loc.Entry.AcceptedAt
		if end := d.Retry.WindowEnd(start.Add(d.PausedBetween(start, now))); !end.IsZero() {
			resp.WindowEndsAt = timestamppb.New(end)
		}
	}
	resp.MaxAttempts = int32(maxAttempts)
	if loc.Ahead == 0 {
		resp.AttemptsUsed = int32(loc.Head.Attempts)
	}
	resp.Waiting = waitingReason(loc, maxAttempts)
}

// heldByParked: the head waits for its parked destination, not for its
// own retry time.
func heldByParked(loc scheduler.Location) bool {
	return loc.Head.HeldByDestination && loc.Destination.Health == budget.Parked
}

// waitingReason says, in one line, why a pending event is not being
// delivered now ("" while in flight).
func waitingReason(loc scheduler.Location, maxAttempts int) string {
	switch {
	case loc.InFlight:
		return ""
	case loc.Ahead > 0:
		return fmt.Sprintf("behind %d earlier %s in its lane", loc.Ahead, plural(loc.Ahead, "event"))
	}
	used := fmt.Sprintf("%d of %d attempts used", loc.Head.Attempts, maxAttempts)
	if maxAttempts <= 0 {
		used = fmt.Sprintf("%d attempts used", loc.Head.Attempts)
	}
	dest := loc.Destination
	switch {
	case dest.Paused:
		return "held: destination paused; " + used
	case loc.Head.HeldByDestination && dest.Health != budget.Healthy:
		return fmt.Sprintf("held: destination %s%s; %s", dest.Health, since(dest.Since), used)
	case loc.Head.LastAttemptAt.IsZero():
		return "due: waiting for its destination's budget"
	case loc.Head.NotBefore.After(time.Now()):
		return fmt.Sprintf("retry at %s after %s; %s", loc.Head.NotBefore.UTC().Format(time.RFC3339), lastFailure(loc.Head), used)
	}
	return fmt.Sprintf("due: retry after %s; %s", lastFailure(loc.Head), used)
}

func since(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return " since " + t.UTC().Format(time.RFC3339)
}

func lastFailure(h scheduler.Head) string {
	if h.LastStatus != 0 {
		return fmt.Sprintf("HTTP %d", h.LastStatus)
	}
	return "no response"
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
