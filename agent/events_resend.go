package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// ResendEvent delivers a delivered or dead-lettered event again: the
// delivered event from the history, a dead one from the dead-letter
// archive, re-ingested at the tail of its lane with its own event id and
// marked resent; audited (event.resend).
func (s *eventService) ResendEvent(ctx context.Context, req *connect.Request[rivorav1.ResendEventRequest]) (*connect.Response[rivorav1.ResendEventResponse], error) {
	id, reason := req.Msg.GetEventId(), strings.TrimSpace(req.Msg.GetReason())
	if err := lanes.ValidateEventID("event_id", id); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if reason == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("reason is required: say why the event is sent again (it goes to the audit log)"))
	}
	if loc, pending := s.a.sched.Find(id); pending {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("event %s is still pending in lane %s (%d ahead of it); it will be delivered, there is nothing to resend", id, loc.Lane, loc.Ahead))
	}
	ev, was, err := s.resendable(ctx, id)
	if err != nil {
		return nil, err
	}
	resent, err := s.a.gateway.Resend(ctx, ev)
	if err != nil {
		return nil, err
	}
	resp := &rivorav1.ResendEventResponse{
		EventId: id, DestinationId: resent.GetDestinationId(), CustomerId: resent.GetCustomerId(), LaneKey: resent.GetLaneKey(), Was: was,
	}
	err = s.a.recordAudit(ctx, &rivorav1.AuditEntry{
		Author: req.Msg.GetAuthor(), Action: "event.resend", DestinationId: resent.GetDestinationId(), Reason: reason,
		Detail: fmt.Sprintf("resent event %s (%s, type %s) to customer %s lane %s", id, stateWord(was), resent.GetType(), resent.GetCustomerId(), resent.GetLaneKey()),
	})
	if err != nil {
		// Resent: saying so matters more than the audit's failure; a retry
		// would send it yet again.
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("event %s was resent, but: %w", id, err))
	}
	return connect.NewResponse(resp), nil
}

// resendable finds what to send again: the event as last delivered (the
// history keeps it) or as it died (the dead-letter archive).
func (s *eventService) resendable(ctx context.Context, id string) (*rivorav1.Event, rivorav1.EventState, error) {
	outcomes, err := s.a.history.Lookup(ctx, id)
	if err != nil {
		return nil, 0, connect.NewError(connect.CodeUnavailable, err)
	}
	was := rivorav1.EventState_EVENT_STATE_UNSPECIFIED
	for _, o := range outcomes {
		switch o.GetKind() {
		case rivorav1.EventOutcome_KIND_DELIVERED:
			was = rivorav1.EventState_EVENT_STATE_DELIVERED
		case rivorav1.EventOutcome_KIND_DEAD:
			was = rivorav1.EventState_EVENT_STATE_DEAD
		}
	}
	switch was {
	case rivorav1.EventState_EVENT_STATE_DELIVERED:
		ev, err := s.a.history.Body(ctx, id)
		if err != nil {
			return nil, was, connect.NewError(connect.CodeUnavailable, err)
		}
		if ev == nil {
			return nil, was, connect.NewError(connect.CodeNotFound, fmt.Errorf("event %s was delivered, but its body is no longer in the history (expired, or delivered by a version that did not keep it)", id))
		}
		return ev, was, nil
	case rivorav1.EventState_EVENT_STATE_DEAD:
		dl, err := s.a.deadLetters.GetDeadLetter(ctx, connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: id, DestinationId: outcomes[0].GetDestinationId()}))
		if connect.CodeOf(err) == connect.CodeNotFound {
			return nil, was, connect.NewError(connect.CodeUnavailable, fmt.Errorf("event %s is dead but its dead letter is not in the archive yet; retry in a few seconds", id))
		}
		if err != nil {
			return nil, was, err
		}
		return dl.Msg.GetDeadLetter().GetEvent(), was, nil
	}
	return nil, was, connect.NewError(connect.CodeNotFound, fmt.Errorf("event %s: %w as delivered or dead here (never accepted, still moving into its lane, or its history expired); see `rivoractl events get %s`", id, errNotFound, id))
}

func stateWord(st rivorav1.EventState) string {
	switch st {
	case rivorav1.EventState_EVENT_STATE_DELIVERED:
		return "was delivered"
	case rivorav1.EventState_EVENT_STATE_DEAD:
		return "was dead"
	}
	return st.String()
}
