package api

import (
	"context"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// eventAnswers is the events service as Handle registers it: GetEvent of
// a dead event whose dead letter this agent's partition still keeps in
// its ledger, the archive not reached yet, says so
// (dead_letter_unarchived). Otherwise `events get` read dead while `dlq
// list`, `dlq show` and `replay`, which read the archive, did not find it
// and failed on the archive's error.
type eventAnswers struct{ *eventService }

func (s eventAnswers) GetEvent(ctx context.Context, req *connect.Request[rivorav1.GetEventRequest]) (*connect.Response[rivorav1.GetEventResponse], error) {
	resp, err := s.eventService.GetEvent(ctx, req)
	if err != nil {
		return nil, err
	}
	ev := resp.Msg
	if ev.GetState() == rivorav1.EventState_EVENT_STATE_DEAD {
		if part := s.parts.OfDestination(ev.GetDestinationId()); part != nil && part.DeadLetterUnarchived(ev.GetEventId()) {
			ev.DeadLetterUnarchived = true
		}
	}
	return resp, nil
}
