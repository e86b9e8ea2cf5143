package api

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/partitions"
	"github.com/rivora/rivora/agent/retry"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/internal/errkind"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// partitionService implements rivora.v1.PartitionService for the control
// plane. Whatever fails, it answers Unavailable: the control plane asks
// another agent, or again.
type partitionService struct {
	*server
}

// CountPending counts a destination's pending events, or one of its
// subscription's (subscription_id), and, asked for, the lanes whose head
// used at least heads_with_attempts attempts (a walk of its lanes, paced
// as lanes list's).
func (s *partitionService) CountPending(ctx context.Context, req *connect.Request[rivorav1.CountPendingRequest]) (*connect.Response[rivorav1.CountPendingResponse], error) {
	dest, sub := req.Msg.GetDestinationId(), req.Msg.GetSubscriptionId()
	n := s.sched.Pending(dest)
	if sub != "" {
		n = s.sched.PendingOf(dest, sub)
	}
	resp := &rivorav1.CountPendingResponse{Pending: int64(n)}
	if least := req.Msg.GetHeadsWithAttempts(); least > 0 && n > 0 {
		w := s.sched.WalkLanes(dest, scheduler.LaneFilter{Subscription: sub, MinAttempts: int(least)})
		if err := walkPaced(ctx, w); err != nil {
			return nil, err // the caller gave up (Canceled), or its deadline passed
		}
		resp.HeadsWithAttempts = int64(w.Result().Matched)
	}
	if window := req.Msg.GetPastWindow().AsDuration(); window > 0 && n > 0 {
		w := s.sched.CountAccepted(dest, s.windowClosedBy(dest, window, time.Now()))
		if err := walkPaced(ctx, w); err != nil {
			return nil, err
		}
		resp.PastWindow = int64(w.Counted())
	}
	return connect.NewResponse(resp), nil
}

// windowClosedBy gives, per subscription of destination dest's lanes, the
// latest acceptance time of the events past a window this long at now
// (retry.WindowClosedBy, with the pauses their owner counts); zero, none,
// when the destination is not in the config here. Each subscription's is
// worked out once.
func (s *partitionService) windowClosedBy(dest string, window time.Duration, now time.Time) func(subscription string) time.Time {
	d, ok := s.registry.Get(dest)
	by := map[string]time.Time{}
	return func(sub string) time.Time {
		if !ok {
			return time.Time{}
		}
		if at, done := by[sub]; done {
			return at
		}
		var subPaused retry.Pauses
		if sub != "" {
			if sb, ok := s.subs.Get(sub); ok {
				subPaused = sb.HeldPauses()
			}
		}
		by[sub] = retry.WindowClosedBy(window, now, func(from, to time.Time) time.Duration { return d.PausedBetweenWith(subPaused, from, to) })
		return by[sub]
	}
}

// ArchivePending dead-letters a destination's pending events, or one of
// its subscription's (subscription_id), with reason deleted, and says
// what it left to the attempts in flight.
func (s *partitionService) ArchivePending(ctx context.Context, req *connect.Request[rivorav1.ArchivePendingRequest]) (*connect.Response[rivorav1.ArchivePendingResponse], error) {
	n, err := s.parts.ArchivePending(ctx, req.Msg.GetDestinationId(), req.Msg.GetSubscriptionId())
	if err != nil {
		return nil, errkind.Tag(errkind.Unavailable, err)
	}
	return connect.NewResponse(&rivorav1.ArchivePendingResponse{Archived: int64(n.Now), InFlight: int64(n.InFlight), ArchivedLater: int64(n.Later)}), nil
}

func (s *partitionService) GetHealth(_ context.Context, req *connect.Request[rivorav1.GetHealthRequest]) (*connect.Response[rivorav1.GetHealthResponse], error) {
	h := Health(s.sched, s.parts, s.registry, req.Msg.GetDestinationId(), req.Msg.GetRateHistory())
	return connect.NewResponse(&rivorav1.GetHealthResponse{Destinations: h}), nil
}

// StateOpening is the health state of a destination whose partition this
// agent holds but has not rebuilt yet: its figures are not known.
const StateOpening = "opening"

// Health reports destinations' budgets and backlogs ("" = all), with
// their rate history when withRates, and why this agent cannot build a
// destination's config (registry's Unusable) beside its budget's state,
// which state keeps: the control plane ranks it with the pause.
func Health(sched *scheduler.Scheduler, parts *partitions.Set, registry *destinations.Registry, destinationID string, withRates bool) []*rivorav1.DestinationHealth {
	var out []*rivorav1.DestinationHealth
	for _, snap := range sched.Snapshot(destinationID) {
		if !snap.Configured && snap.Pending == 0 {
			continue
		}
		h := healthToProto(snap)
		if d, ok := registry.Get(snap.ID); ok && d.Unusable != nil {
			// Its build errors name what is wrong, never a secret or key.
			h.Unusable = d.Unusable.Error()
		}
		if parts.OpeningDestination(snap.ID) {
			// Its lanes are being rebuilt here: nothing of its backlog
			// or budget is known yet (PENDING 0 read as drained).
			h.State = StateOpening
		}
		if withRates {
			rates, transitions := sched.RateHistory(snap.ID)
			h.RateHistory = rateHistoryToProto(rates)
			for _, t := range transitions {
				h.Transitions = append(h.Transitions, &rivorav1.HealthTransition{At: timestamppb.New(t.At), From: t.From.String(), To: t.To.String(), Cause: t.Cause})
			}
		}
		if part := parts.OfDestination(snap.ID); part != nil {
			h.UnarchivedDeadLetters = int64(part.Unarchived(snap.ID))
			h.ArchivedDeadLetters = part.Archived(snap.ID)
		}
		out = append(out, h)
	}
	return out
}

func healthToProto(s scheduler.DestinationSnapshot) *rivorav1.DestinationHealth {
	h := &rivorav1.DestinationHealth{
		DestinationId:  s.ID,
		State:          s.State.String(),
		ConfiguredRate: s.ConfiguredRate,
		CurrentRate:    s.CurrentRate,
		LearnedRate:    s.LearnedRate,
		Tokens:         s.Tokens,
		InFlight:       int32(s.InFlight),
		MaxInFlight:    int32(s.MaxInFlight),
		PendingEvents:  int64(s.Pending),
		PriorityClass:  destinations.ClassToProto(s.Class),
	}
	if !s.Configured {
		h.State = "unconfigured"
	}
	for _, c := range s.Customers {
		h.Customers = append(h.Customers, &rivorav1.CustomerBacklog{
			CustomerId: c.ID, Weight: c.Weight, DueLanes: int64(c.DueLanes), WaitingLanes: int64(c.WaitingLanes),
			InFlight: int64(c.InFlight), PendingEvents: int64(c.Pending),
		})
	}
	for _, st := range s.LastStatuses {
		h.LastStatuses = append(h.LastStatuses, int32(st))
	}
	if t := s.LastTransition; t != nil {
		h.LastTransition = &rivorav1.HealthTransition{At: timestamppb.New(t.At), From: t.From.String(), To: t.To.String(), Cause: t.Cause}
	}
	if !s.HoldUntil.IsZero() && s.HoldUntil.After(time.Now()) {
		h.HoldUntil = timestamppb.New(s.HoldUntil)
	}
	if !s.CertificateRefusedAt.IsZero() {
		h.ClientCertificateRefusedAt = timestamppb.New(s.CertificateRefusedAt)
	}
	if !s.OldestPending.IsZero() {
		h.OldestPendingAge = durationpb.New(max(time.Since(s.OldestPending), 0).Round(time.Millisecond))
	}
	h.AttemptsLastMinute = int64(s.LastMinuteAttempts)
	h.ArrivalsLastMinute = int64(s.LastMinuteArrivals)
	if s.LastMinuteAttempts > 0 {
		h.ThrottledShare = float64(s.LastMinuteThrottled) / float64(s.LastMinuteAttempts)
		h.ServerErrorShare = float64(s.LastMinuteServerErrors) / float64(s.LastMinuteAttempts)
		h.NoAnswerShare = float64(s.LastMinuteNoAnswer) / float64(s.LastMinuteAttempts)
		h.ClientErrorShare = float64(s.LastMinuteClientErrors) / float64(s.LastMinuteAttempts)
	}
	if f := s.LastFailure; !f.At.IsZero() {
		h.LastFailure, h.LastFailureAt = f.Cause, timestamppb.New(f.At)
	}
	return h
}

func rateHistoryToProto(samples []scheduler.RateSample) []*rivorav1.RateSample {
	out := make([]*rivorav1.RateSample, len(samples))
	for i, s := range samples {
		out[i] = &rivorav1.RateSample{
			Start: timestamppb.New(s.Start), ConfiguredRate: s.ConfiguredRate, CurrentRate: s.CurrentRate,
			Attempts: int32(s.Attempts), Delivered: int32(s.Delivered), Throttled: int32(s.Throttled), ServerErrors: int32(s.ServerErrors),
		}
	}
	return out
}
