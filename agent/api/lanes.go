package api

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/agent/upstream"
	"github.com/rivora/rivora/internal/errkind"
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
	*server
}

func (s *laneService) ListLanes(ctx context.Context, req *connect.Request[rivorav1.ListLanesRequest]) (*connect.Response[rivorav1.ListLanesResponse], error) {
	m := req.Msg
	limit, err := laneLimit(m.GetLimit())
	if err != nil {
		return nil, errkind.Tag(errkind.Invalid, err)
	}
	if err := validateLaneFilter(m.GetDestinationId(), m.GetCustomerId(), m.GetSubscriptionId()); err != nil {
		return nil, errkind.Tag(errkind.Invalid, err)
	}
	if _, err := s.ownedDestination(ctx, m.GetDestinationId()); err != nil {
		return nil, err
	}
	w := s.sched.WalkLanes(m.GetDestinationId(), scheduler.LaneFilter{
		Customer: m.GetCustomerId(), Subscription: m.GetSubscriptionId(), Stuck: m.GetStuck(), Limit: limit,
	})
	if err := walkPaced(ctx, w); err != nil {
		return nil, err // the caller gave up (Canceled), or its deadline passed
	}
	list := w.Result()
	if list.Matched == 0 {
		if err := s.unknownSubscription(ctx, m.GetSubscriptionId()); err != nil {
			return nil, err
		}
	}
	resp := &rivorav1.ListLanesResponse{Matched: int64(list.Matched), Truncated: list.Matched > len(list.Lanes)}
	destinationPaused := s.lanePause(m.GetDestinationId(), "")
	for _, ls := range list.Lanes {
		l := laneToProto(m.GetDestinationId(), ls)
		if l.Paused = destinationPaused; l.Paused == "" && ls.ID.Subscription != "" {
			l.Paused = s.lanePause("", ls.ID.Subscription)
		}
		resp.Lanes = append(resp.Lanes, l)
	}
	return connect.NewResponse(resp), nil
}

// lanePause says, for a lane listing, whether a destination's config
// pauses it (destinationID set) or a subscription is paused
// (subscriptionID set): LaneSummary.paused.
func (s *laneService) lanePause(destinationID, subscriptionID string) string {
	if subscriptionID != "" {
		sub, ok := s.subs.Get(subscriptionID)
		switch {
		case !ok || !sub.Held():
			return ""
		case sub.UnusableHeld:
			return subscriptionHoldText(sub)
		}
		return "subscription paused"
	}
	// The control plane's pause and this agent's hold, both when both
	// apply: a config mended here leaves the operator's pause in place.
	hold, unusable := s.destinationHold(destinationID)
	var why []string
	switch hold {
	case holdPaused:
		why = append(why, "destination paused")
	case holdDisabled:
		why = append(why, "destination disabled (410 Gone)")
	}
	if unusable != nil {
		why = append(why, unusableText(unusable))
	}
	return strings.Join(why, "; ")
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

func validateLaneFilter(destinationID, customerID, subscriptionID string) error {
	if err := lanes.ValidateID("destination_id", destinationID); err != nil {
		return err
	}
	if customerID != "" {
		if err := lanes.ValidateID("customer_id", customerID); err != nil {
			return err
		}
	}
	if subscriptionID != "" {
		return lanes.ValidateID("subscription_id", subscriptionID)
	}
	return nil
}

func laneToProto(destinationID string, ls scheduler.LaneSummary) *rivorav1.LaneSummary {
	out := &rivorav1.LaneSummary{
		DestinationId: destinationID, CustomerId: ls.ID.Customer, LaneKey: ls.ID.Key, Depth: int32(ls.Depth),
		HeadEventId: ls.HeadEventID, HeadAttempts: int32(ls.Head.Attempts), LastStatus: int32(ls.Head.LastStatus),
		LastError: ls.Head.LastError, HeadSince: timestamppb.New(ls.HeadSince), Held: ls.Held,
		SubscriptionId: ls.ID.Subscription,
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

func (s *laneService) SkipLaneHead(ctx context.Context, req *connect.Request[rivorav1.SkipLaneHeadRequest]) (*connect.Response[rivorav1.SkipLaneHeadResponse], error) {
	m := req.Msg
	if err := validateSkip(m); err != nil {
		return nil, errkind.Tag(errkind.Invalid, err)
	}
	p, err := s.ownedDestination(ctx, m.GetDestinationId())
	if err != nil {
		return nil, err
	}
	// Counted as an attempt on the partition, so a handoff waits for it.
	part, done, ok := s.parts.Attempting(p)
	if !ok {
		return nil, errkind.Errorf(errkind.Unavailable, "partition %d of destination %s is being handed off; try again shortly", p, m.GetDestinationId())
	}
	id := lanes.ID{Destination: m.GetDestinationId(), Customer: m.GetCustomerId(), Key: m.GetLaneKey(), Subscription: m.GetSubscriptionId()}
	att, err := s.sched.TakeHead(id, m.GetHeadEventId())
	if err != nil {
		done()
		return nil, takeHeadError(id, m.GetHeadEventId(), err)
	}
	// Once taken, the skip and its audit entry go through even if the
	// caller hangs up: a skip must not be left half done or unaudited.
	ctx = context.WithoutCancel(ctx)
	remaining, err := part.SkipHead(ctx, att)
	done() // the skip is stored: a handoff need not wait for the audit
	if err != nil {
		return nil, errkind.Errorf(errkind.Unavailable, "%w; the head stays in its lane", err)
	}
	s.log.Info("lane head skipped", "destination", id.Destination, "lane", id.String(), "event_id", att.Entry.EventID, "reason", m.GetReason())
	resp := &rivorav1.SkipLaneHeadResponse{EventId: att.Entry.EventID, Remaining: int32(remaining)}
	if err := s.audit(ctx, m, id, att.Entry.EventID); err != nil && !errors.Is(err, upstream.ErrAuditQueued) {
		// The skip stands (the event is a dead letter, replayable): say
		// so, and that the audit log misses it. Not Unavailable: a retry
		// would skip the next head.
		return nil, errkind.Errorf(internal, "event %s is a dead letter (reason manual; %d left in the lane): do not skip again; %w", att.Entry.EventID, remaining, err)
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
	if m.GetSubscriptionId() != "" {
		if err := lanes.ValidateID("subscription_id", m.GetSubscriptionId()); err != nil {
			return err
		}
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
	var moved *scheduler.HeadMovedError
	var others *scheduler.OtherSubscriptionsError
	var inFlight *scheduler.HeadInFlightError
	switch {
	case errors.As(err, &others):
		return errkind.Errorf(errkind.NotFound, "lane %s: %w; %s", id, scheduler.ErrNoLane, routedOtherwise(id, others.Subscriptions))
	case errors.Is(err, scheduler.ErrNoLane):
		return errkind.Errorf(errkind.NotFound, "lane %s: %w (nothing pending; see rivoractl lanes list --destination %s)", id, err, id.Destination)
	case errors.As(err, &inFlight) && inFlight.DestinationParked:
		// A parked destination's probe sends the same head again as soon
		// as each attempt ends (a partner that hangs holds it until the
		// timeout): "try again once it ends" never finds it idle.
		return errkind.Errorf(errkind.Precondition, "lane %s: %w and its destination is parked: pause the destination first so it is not sent again once this attempt ends (rivoractl destinations pause %s), skip it once the attempt ends (within the destination's timeout), then rivoractl destinations resume %s", id, err, id.Destination, id.Destination)
	case errors.Is(err, scheduler.ErrHeadInFlight):
		// Not parked: the attempt ends within the destination's timeout,
		// and a failed head then waits for its retry time (a delivered
		// one is gone: --head makes the retry safe).
		return errkind.Errorf(errkind.Precondition, "lane %s: %w; try again once its attempt ends (within the destination's timeout)", id, err)
	case errors.As(err, &moved):
		return errkind.Errorf(errkind.Precondition, "lane %s: its head is %s, not %s (delivered, dead or skipped meanwhile, or never in this lane); list the lane again", id, moved.Head, expect)
	}
	return errkind.Tag(internal, err)
}

// routedOtherwise tells an operator who named a lane with nothing
// pending how the same lane key is named where it has events: its
// subscription is part of a lane's name.
func routedOtherwise(id lanes.ID, subs []string) string {
	var named []string
	for _, sub := range subs {
		if sub == "" {
			named = append(named, "has events published to the destination itself: leave out --subscription")
			continue
		}
		named = append(named, fmt.Sprintf("is routed by subscription %s: add --subscription %s", sub, sub))
	}
	return fmt.Sprintf("lane %s/%s of %s %s (see rivoractl lanes list --destination %s)", id.Customer, id.Key, id.Destination, strings.Join(named, "; it also "), id.Destination)
}

func (s *laneService) audit(ctx context.Context, m *rivorav1.SkipLaneHeadRequest, id lanes.ID, eventID string) error {
	return s.upstream.Audit(ctx, &rivorav1.AuditEntry{
		Action: "lane.skip", DestinationId: id.Destination, Reason: m.GetReason(),
		Detail: fmt.Sprintf("event %s of lane %s/%s%s skipped: dead letter (reason manual)", eventID, id.Customer, id.Key, ofSubscription(id.Subscription)),
	})
}

// ofSubscription names a lane's subscription in an audit entry ("" for a
// lane of events published to the destination).
func ofSubscription(id string) string {
	if id == "" {
		return ""
	}
	return " (subscription " + id + ")"
}
