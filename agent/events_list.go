package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/history"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Listing bounds.
const (
	defaultListLimit = 100
	maxListLimit     = 1000
)

// ListEvents lists a destination's events, newest first: pending ones
// from the scheduler (by acceptance), delivered and dead ones from the
// history (by when they finished).
func (s *eventService) ListEvents(ctx context.Context, req *connect.Request[rivorav1.ListEventsRequest]) (*connect.Response[rivorav1.ListEventsResponse], error) {
	q, err := parseListRequest(req.Msg)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	// Only the owner knows the destination's pending events.
	if _, err := s.a.ownedDestination(q.destination); err != nil {
		return nil, err
	}
	var all []listed
	resp := &rivorav1.ListEventsResponse{}
	if q.pending || q.inFlightOnly {
		w := s.a.sched.WalkPending(q.pendingFilter())
		if err := walkPaced(ctx, w); err != nil {
			return nil, walkError(err)
		}
		pend, truncated := w.Result()
		resp.Truncated = truncated
		for _, p := range pend {
			all = append(all, listed{at: p.Entry.AcceptedAt, summary: s.pendingSummary(ctx, p)})
		}
	}
	if q.history.Delivered || q.history.Dead {
		l, err := s.a.history.List(ctx, q.history)
		if err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, err)
		}
		resp.Truncated = resp.Truncated || l.Truncated
		if !l.SearchedBackTo.IsZero() {
			resp.SearchedBackTo = timestamppb.New(l.SearchedBackTo)
		}
		for _, f := range l.Events {
			all = append(all, listed{at: f.At, summary: finishedSummary(f)})
		}
	}
	slices.SortStableFunc(all, func(x, y listed) int { return y.at.Compare(x.at) })
	all = newestPerEvent(all)
	if len(all) > q.limit {
		all, resp.Truncated = all[:q.limit], true
	}
	for _, l := range all {
		resp.Events = append(resp.Events, l.summary)
	}
	return connect.NewResponse(resp), nil
}

// newestPerEvent keeps, of a listing sorted newest first, each event's
// first (newest) entry: a resent or replayed event is pending again while
// the history still holds how it ended before, and an event resent twice
// ended twice.
func newestPerEvent(all []listed) []listed {
	seen := make(map[string]bool, len(all))
	out := all[:0]
	for _, l := range all {
		if id := l.summary.GetEventId(); !seen[id] {
			seen[id] = true
			out = append(out, l)
		}
	}
	return out
}

// listed is one event of a listing and the time it is ordered by.
type listed struct {
	at      time.Time
	summary *rivorav1.EventSummary
}

// listQuery is a validated ListEventsRequest.
type listQuery struct {
	destination, customer, lane string
	since, until                time.Time
	limit                       int
	pending, inFlightOnly       bool
	history                     history.Filter
}

func parseListRequest(m *rivorav1.ListEventsRequest) (listQuery, error) {
	q := listQuery{destination: m.GetDestinationId(), customer: m.GetCustomerId(), lane: m.GetLaneKey(), limit: int(m.GetLimit())}
	if err := lanes.ValidateID("destination_id", q.destination); err != nil {
		return q, fmt.Errorf("%w (events are listed per destination)", err)
	}
	if q.lane != "" && q.customer == "" {
		return q, errors.New("lane_key needs customer_id: a lane is one customer's")
	}
	switch {
	case q.limit == 0:
		q.limit = defaultListLimit
	case q.limit < 0 || q.limit > maxListLimit:
		return q, fmt.Errorf("limit must be 1–%d, got %d", maxListLimit, q.limit)
	}
	if m.GetSince() != nil {
		q.since = m.GetSince().AsTime()
	}
	if m.GetUntil() != nil {
		q.until = m.GetUntil().AsTime()
	}
	if !q.since.IsZero() && !q.until.IsZero() && q.since.After(q.until) {
		return q, fmt.Errorf("since (%s) is after until (%s)", q.since.Format(time.RFC3339), q.until.Format(time.RFC3339))
	}
	h := history.Filter{Destination: q.destination, Customer: q.customer, Lane: q.lane, Since: q.since, Until: q.until, Limit: q.limit}
	switch st := m.GetState(); st {
	case rivorav1.EventState_EVENT_STATE_UNSPECIFIED:
		q.pending, h.Delivered, h.Dead = true, true, true
	case rivorav1.EventState_EVENT_STATE_PENDING:
		q.pending = true
	case rivorav1.EventState_EVENT_STATE_IN_FLIGHT:
		q.inFlightOnly = true
	case rivorav1.EventState_EVENT_STATE_DELIVERED:
		h.Delivered = true
	case rivorav1.EventState_EVENT_STATE_DEAD:
		h.Dead = true
	default:
		return q, fmt.Errorf("unknown state %v", st)
	}
	q.history = h
	return q, nil
}

func (q listQuery) pendingFilter() scheduler.PendingFilter {
	return scheduler.PendingFilter{Destination: q.destination, Customer: q.customer, Lane: q.lane, Since: q.since, Until: q.until, Limit: q.limit, InFlightOnly: q.inFlightOnly}
}

// pendingSummary describes a pending event. Its type is loaded from the
// lane store when the scheduler does not hold the event in memory (one
// direct read by sequence; left empty if that fails).
func (s *eventService) pendingSummary(ctx context.Context, p scheduler.PendingEvent) *rivorav1.EventSummary {
	sum := &rivorav1.EventSummary{
		EventId: p.Entry.EventID, DestinationId: p.Lane.Destination, CustomerId: p.Lane.Customer, LaneKey: p.Lane.Key,
		State: rivorav1.EventState_EVENT_STATE_PENDING, AcceptedAt: timestamppb.New(p.Entry.AcceptedAt),
	}
	if p.InFlight {
		sum.State = rivorav1.EventState_EVENT_STATE_IN_FLIGHT
	}
	if p.IsHead {
		sum.Attempts, sum.LastStatus, sum.LastError = int32(p.Head.Attempts), int32(p.Head.LastStatus), p.Head.LastError
	}
	if ev := p.Entry.Event; ev != nil {
		sum.Type = ev.GetType()
	} else if part := s.a.partition(p.Partition); part != nil {
		if ev, err := part.Load(ctx, &scheduler.Attempt{Entry: p.Entry}); err == nil {
			sum.Type = ev.GetType()
		}
	}
	return sum
}

// finishedSummary describes a delivered or dead event from its terminal
// record.
func finishedSummary(f history.Finished) *rivorav1.EventSummary {
	o := f.Outcome
	sum := &rivorav1.EventSummary{
		EventId: o.GetEventId(), DestinationId: o.GetDestinationId(), CustomerId: o.GetCustomerId(), LaneKey: o.GetLaneKey(),
		Type: o.GetType(), AcceptedAt: o.GetAcceptedAt(), FinishedAt: timestamppb.New(f.At),
	}
	switch o.GetKind() {
	case rivorav1.EventOutcome_KIND_DELIVERED:
		sum.State = rivorav1.EventState_EVENT_STATE_DELIVERED
		sum.Attempts, sum.LastStatus = o.GetAttempt().GetNumber(), o.GetAttempt().GetStatusCode()
	case rivorav1.EventOutcome_KIND_DEAD:
		sum.State = rivorav1.EventState_EVENT_STATE_DEAD
		sum.Attempts, sum.LastStatus, sum.LastError = o.GetAttempts(), o.GetLastStatus(), o.GetLastError()
		sum.DeadReason = o.GetDeadReason()
	}
	return sum
}
