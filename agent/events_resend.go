package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// ResendEvent delivers a delivered or dead-lettered event again: the
// delivered event from the history, a dead one from the dead-letter
// archive, re-ingested at the tail of its lane with its own event id and
// marked resent; audited (event.resend).
//
// A resend is stored once per way the event ended: its dedup id names the
// event and the time it was delivered or died (for a dead letter, the
// same id a replay of it uses), so two operators resending it at once, or
// a retry after a lost answer, send it once (AlreadyExists for the
// other) within the ingest dedup window.
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
	found, err := s.resendable(ctx, id)
	if err != nil {
		return nil, err
	}
	// Only the owner of its partition knows whether it is pending again.
	if _, err := s.a.ownedDestination(found.event.GetDestinationId()); err != nil {
		return nil, err
	}
	resent, duplicate, err := s.a.gateway.Resend(ctx, found.event, found.dedupID)
	if err != nil {
		return nil, err
	}
	if duplicate {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("event %s (%s at %s) was already resent; see `rivoractl events get %s`", id, stateWord(found.was), found.endedAt.UTC().Format(time.RFC3339Nano), id))
	}
	// Stored: the audit entry is written even if the caller hangs up.
	ctx = context.WithoutCancel(ctx)
	resp := &rivorav1.ResendEventResponse{
		EventId: id, DestinationId: resent.GetDestinationId(), CustomerId: resent.GetCustomerId(), LaneKey: resent.GetLaneKey(), Was: found.was,
	}
	err = s.a.recordAudit(ctx, auditAuthor(ctx, &rivorav1.AuditEntry{
		Action: "event.resend", DestinationId: resent.GetDestinationId(), Reason: reason,
		Detail: fmt.Sprintf("resent event %s (%s, type %s) to customer %s lane %s", id, stateWord(found.was), resent.GetType(), resent.GetCustomerId(), resent.GetLaneKey()),
	}))
	if err != nil {
		// Resent: saying so matters more than the audit's failure. Not
		// Unavailable, which invites a retry.
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("event %s was resent (do not resend it again), but: %w", id, err))
	}
	return connect.NewResponse(resp), nil
}

// resendFound is what a resend sends: the event as it was delivered or
// died, how it ended, when, and the dedup id that makes the resend of that
// ending happen once.
type resendFound struct {
	event   *rivorav1.Event
	was     rivorav1.EventState
	endedAt time.Time
	dedupID string
}

// resendable finds what to send again: the event as last delivered (the
// history keeps it) or as it died (the dead-letter archive).
func (s *eventService) resendable(ctx context.Context, id string) (resendFound, error) {
	outcomes, err := s.a.history.Lookup(ctx, id)
	if err != nil {
		return resendFound{}, connect.NewError(connect.CodeUnavailable, err)
	}
	var f resendFound
	for _, o := range outcomes {
		switch o.GetKind() {
		case rivorav1.EventOutcome_KIND_DELIVERED:
			f.was, f.endedAt = rivorav1.EventState_EVENT_STATE_DELIVERED, o.GetAttempt().GetAt().AsTime()
		case rivorav1.EventOutcome_KIND_DEAD:
			f.was = rivorav1.EventState_EVENT_STATE_DEAD
		}
	}
	switch f.was {
	case rivorav1.EventState_EVENT_STATE_DELIVERED:
		ev, err := s.a.history.Body(ctx, id)
		if err != nil {
			return f, connect.NewError(connect.CodeUnavailable, err)
		}
		if ev == nil {
			return f, connect.NewError(connect.CodeNotFound, fmt.Errorf("event %s was delivered, but its body is no longer in the history (expired, or delivered by a version that did not keep it)", id))
		}
		f.event, f.dedupID = ev, fmt.Sprintf("resend:%s:%d", id, f.endedAt.UnixNano())
		return f, nil
	case rivorav1.EventState_EVENT_STATE_DEAD:
		dl, err := s.a.deadLetters.GetDeadLetter(ctx, connect.NewRequest(&rivorav1.GetDeadLetterRequest{EventId: id, DestinationId: outcomes[0].GetDestinationId()}))
		if connect.CodeOf(err) == connect.CodeNotFound {
			return f, connect.NewError(connect.CodeUnavailable, fmt.Errorf("event %s is dead but its dead letter is not in the archive yet; retry in a few seconds", id))
		}
		if err != nil {
			return f, err
		}
		d := dl.Msg.GetDeadLetter()
		f.event, f.endedAt = d.GetEvent(), d.GetDeadAt().AsTime()
		f.dedupID = ingest.ReplayDedupID(d)
		return f, nil
	}
	return f, connect.NewError(connect.CodeNotFound, fmt.Errorf("event %s: %w as delivered or dead here (never accepted, still moving into its lane, or its history expired); see `rivoractl events get %s`", id, errNotFound, id))
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
