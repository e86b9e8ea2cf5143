package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// ListLanes limits.
const (
	defaultLaneLimit = 100
	maxLaneLimit     = 10000
)

// laneService implements rivora.v1.LaneService for the partitions this
// agent owns: it shows a destination's lanes from the scheduler and skips
// a lane's poison head.
type laneService struct {
	a *Agent
}

func (s *laneService) ListLanes(ctx context.Context, req *connect.Request[rivorav1.ListLanesRequest]) (*connect.Response[rivorav1.ListLanesResponse], error) {
	m := req.Msg
	limit, err := laneLimit(m.GetLimit())
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if err := validateLaneFilter(m.GetDestinationId(), m.GetCustomerId()); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if _, err := s.owned(m.GetDestinationId()); err != nil {
		return nil, err
	}
	w := s.a.sched.WalkLanes(m.GetDestinationId(), scheduler.LaneFilter{Customer: m.GetCustomerId(), Stuck: m.GetStuck(), Limit: limit})
	if err := walkPaced(ctx, w); err != nil {
		return nil, walkError(err)
	}
	list := w.Result()
	resp := &rivorav1.ListLanesResponse{Matched: int64(list.Matched), Truncated: list.Matched > len(list.Lanes)}
	for _, ls := range list.Lanes {
		resp.Lanes = append(resp.Lanes, laneToProto(m.GetDestinationId(), ls))
	}
	return connect.NewResponse(resp), nil
}

// A lane walk rests listRest after each listBusy of walking, so that
// ListLanes (or ListEvents) calls back to back take at most about a third
// of a core from delivery; 1M lanes walk in some 15 ms of CPU, so a call
// over them takes some 50–100 ms (go run ./e2e/bench lanes).
const (
	listBusy = time.Millisecond
	listRest = 2 * time.Millisecond
)

// laneWalker is a scheduler walk over a destination's lanes that its
// caller paces: a *scheduler.LaneWalk (ListLanes) or a
// *scheduler.PendingWalk (pending events for ListEvents).
type laneWalker interface {
	Step() bool
	Close()
}

// walkPaced runs a lane walk to its end, resting between chunks; on an
// error (ctx ended) the walk is closed and its result is not whole.
func walkPaced(ctx context.Context, w laneWalker) error {
	defer w.Close()
	busy := time.Now()
	for w.Step() {
		if time.Since(busy) < listBusy {
			continue
		}
		select {
		case <-time.After(listRest):
		case <-ctx.Done():
			return ctx.Err()
		}
		busy = time.Now()
	}
	return nil
}

func laneLimit(limit int32) (int, error) {
	switch {
	case limit == 0:
		return defaultLaneLimit, nil
	case limit < 0 || limit > maxLaneLimit:
		return 0, fmt.Errorf("limit %d: use 1 to %d (default %d)", limit, maxLaneLimit, defaultLaneLimit)
	}
	return int(limit), nil
}

func validateLaneFilter(destinationID, customerID string) error {
	if err := lanes.ValidateID("destination_id", destinationID); err != nil {
		return err
	}
	if customerID != "" {
		return lanes.ValidateID("customer_id", customerID)
	}
	return nil
}

func laneToProto(destinationID string, ls scheduler.LaneSummary) *rivorav1.LaneSummary {
	out := &rivorav1.LaneSummary{
		DestinationId: destinationID, CustomerId: ls.ID.Customer, LaneKey: ls.ID.Key, Depth: int32(ls.Depth),
		HeadEventId: ls.HeadEventID, HeadAttempts: int32(ls.Head.Attempts), LastStatus: int32(ls.Head.LastStatus),
		LastError: ls.Head.LastError, HeadSince: timestamppb.New(ls.HeadSince), Held: ls.Head.HeldByDestination,
	}
	if !ls.NextAttemptAt.IsZero() {
		out.NextAttemptAt = timestamppb.New(ls.NextAttemptAt)
	}
	switch ls.State {
	case scheduler.LaneDue:
		out.State = rivorav1.LaneState_LANE_STATE_DUE
	case scheduler.LaneWaiting:
		out.State = rivorav1.LaneState_LANE_STATE_WAITING
	case scheduler.LaneInFlight:
		out.State = rivorav1.LaneState_LANE_STATE_IN_FLIGHT
	}
	return out
}

// owned returns the partition of a destination this agent serves, or the
// error to answer (see ownedDestination).
func (s *laneService) owned(destinationID string) (int, error) {
	return s.a.ownedDestination(destinationID)
}

// ownedDestination returns the partition of a destination this agent
// serves, or the error to answer: no config yet, unknown destination, or
// one whose partition another agent owns (then only the control plane, or
// that agent, knows its pending events).
func (a *Agent) ownedDestination(destinationID string) (int, error) {
	n := int(a.partitionCount.Load())
	if n == 0 {
		return 0, connect.NewError(connect.CodeUnavailable, errors.New("this agent has no configuration from the control plane yet"))
	}
	if _, ok := a.registry.Get(destinationID); !ok && a.sched.Pending(destinationID) == 0 {
		return 0, connect.NewError(connect.CodeNotFound, fmt.Errorf("destination %s: %w (see rivoractl destinations list)", destinationID, errNotFound))
	}
	p := lanes.Partition(destinationID, n)
	if a.partition(p) == nil {
		return 0, connect.NewError(connect.CodeNotFound, fmt.Errorf("destination %s: its partition %d is %w on this agent; ask the control plane, or the agent that owns it (rivoractl agents)", destinationID, p, errNotOwnedHere))
	}
	return p, nil
}

var errNotOwnedHere = errors.New("not owned")

// walkError is a paced walk's end by its caller: it gave up, or its
// deadline passed.
func walkError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return connect.NewError(connect.CodeCanceled, err)
}

func (s *laneService) SkipLaneHead(ctx context.Context, req *connect.Request[rivorav1.SkipLaneHeadRequest]) (*connect.Response[rivorav1.SkipLaneHeadResponse], error) {
	m := req.Msg
	if err := validateSkip(m); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	p, err := s.owned(m.GetDestinationId())
	if err != nil {
		return nil, err
	}
	// Counted as an attempt on the partition, so a handoff waits for it.
	run, ok := s.a.parts.attempting(p)
	if !ok {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("partition %d of destination %s is being handed off; try again shortly", p, m.GetDestinationId()))
	}
	id := lanes.ID{Destination: m.GetDestinationId(), Customer: m.GetCustomerId(), Key: m.GetLaneKey()}
	att, err := s.a.sched.TakeHead(id, m.GetHeadEventId())
	if err != nil {
		run.inFlight.Done()
		return nil, takeHeadError(id, m.GetHeadEventId(), err)
	}
	// Once taken, the skip and its audit entry go through even if the
	// caller hangs up: a skip must not be left half done or unaudited.
	ctx = context.WithoutCancel(ctx)
	remaining, err := run.part.SkipHead(ctx, att)
	run.inFlight.Done() // the skip is stored: a handoff need not wait for the audit
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("%w; the head stays in its lane", err))
	}
	s.a.log.Info("lane head skipped", "destination", id.Destination, "lane", id.String(), "event_id", att.Entry.EventID, "reason", m.GetReason())
	resp := &rivorav1.SkipLaneHeadResponse{EventId: att.Entry.EventID, Remaining: int32(remaining)}
	if err := s.audit(ctx, m, id, att.Entry.EventID); err != nil {
		// The skip stands (the event is a dead letter, replayable): say
		// so, and that the audit log misses it. Not Unavailable: a retry
		// would skip the next head.
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("event %s is a dead letter (reason manual; %d left in the lane): do not skip again; %w", att.Entry.EventID, remaining, err))
	}
	return connect.NewResponse(resp), nil
}

func validateSkip(m *rivorav1.SkipLaneHeadRequest) error {
	if err := lanes.ValidateID("destination_id", m.GetDestinationId()); err != nil {
		return err
	}
	if err := lanes.ValidateID("customer_id", m.GetCustomerId()); err != nil {
		return err
	}
	if err := lanes.ValidateLaneKey(m.GetLaneKey()); err != nil {
		return err
	}
	if m.GetHeadEventId() != "" {
		if err := lanes.ValidateEventID("head_event_id", m.GetHeadEventId()); err != nil {
			return err
		}
	}
	if m.GetReason() == "" {
		return errors.New("reason is required: say why the head is skipped (it goes to the audit log)")
	}
	return nil
}

// takeHeadError words TakeHead's refusals for the operator.
func takeHeadError(id lanes.ID, expect string, err error) error {
	switch {
	case errors.Is(err, scheduler.ErrNoLane):
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("lane %s: %w (nothing pending; see rivoractl lanes list --destination %s)", id, err, id.Destination))
	case errors.Is(err, scheduler.ErrHeadInFlight):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("lane %s: %w; try again once its attempt ends", id, err))
	case errors.Is(err, scheduler.ErrHeadMoved):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("lane %s: head is no longer %s (delivered, dead or skipped meanwhile): %w; list the lane again", id, expect, err))
	}
	return connect.NewError(connect.CodeInternal, err)
}

func (s *laneService) audit(ctx context.Context, m *rivorav1.SkipLaneHeadRequest, id lanes.ID, eventID string) error {
	return s.a.recordAudit(ctx, auditAuthor(ctx, &rivorav1.AuditEntry{
		Action: "lane.skip", DestinationId: id.Destination, Reason: m.GetReason(),
		Detail: fmt.Sprintf("event %s of lane %s/%s skipped: dead letter (reason manual)", eventID, id.Customer, id.Key),
	}))
}
