package owner

import (
	"context"
	"log/slog"
	"time"

	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/retry"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/agent/subscriptions"
	"github.com/rivora/rivora/agent/verdict"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Sender sends one attempt to its partner (delivery.Sender).
type Sender interface {
	Send(ctx context.Context, req delivery.Request) delivery.Result
}

// Worker runs the attempts the scheduler hands out; the agent's delivery
// workers share one.
type Worker struct {
	Scheduler *scheduler.Scheduler
	Sender    Sender
	Clock     clock.Clock
	Log       *slog.Logger
	// Disable stops an attempt's destination here after a 410, before the
	// attempt settles, so that its lane is not handed out again first
	// (nil: nothing).
	Disable func(a *scheduler.Attempt, ev *rivorav1.Event, res delivery.Result)
}

// Attempt runs one attempt of partition part (nil: the partition is not
// open here) from its facts to its settlement: it gathers the facts,
// decides (verdict.Decide), sends when the verdict says so and decides
// again with the partner's answer, then settles. Every path ends in
// exactly one settle; it returns the verdict applied, and an error when
// the settlement failed (the attempt was settled before: a defect).
func (w Worker) Attempt(ctx context.Context, part *Partition, a *scheduler.Attempt) (verdict.Verdict, error) {
	f := verdict.Facts{Attempt: a, Now: w.Clock.Now(), Jitter: retry.Jittered}
	var ev *rivorav1.Event
	var endpoint destinations.Endpoint
	var timeout time.Duration
	if part != nil {
		f.PartitionOpen = true
		ev, f.LoadErr = part.Load(ctx, a)
		if f.LoadErr == nil {
			endpoint, timeout = part.gather(&f, ev)
		}
		f.LoadGone = loadGone(f.LoadErr)
	}
	v := verdict.Decide(f)
	var res delivery.Result
	if v.Kind == verdict.Send {
		res = w.Sender.Send(ctx, delivery.Request{Endpoint: endpoint, Event: ev, Attempt: a.Number, Timeout: timeout, BudgetWait: a.BudgetWait})
		f.Result = &res
		obs := part.observe(a, ev, res)
		f.OtherwiseHealthy, f.GoneOnlyItsCustomers = obs.OtherwiseHealthy, obs.GoneOnlyItsCustomers
		f.Now = w.Clock.Now()
		if d, ok := part.deps.Registry.Get(ev.GetDestinationId()); ok {
			f.Policy, f.WindowStart = d.Retry, windowStart(ev, part.pausedBetween(d, ev), f.Now)
		}
		v = verdict.Decide(f)
	}
	if v.Disable && w.Disable != nil {
		w.Disable(a, ev, res)
	}
	switch {
	case v.Kind == verdict.Skip:
		w.Log.Error("skipping an event that cannot be loaded", "event_id", a.Entry.EventID, "lane", a.Lane.ID.String(), "error", f.LoadErr)
	case f.LoadErr != nil:
		w.Log.Warn("the lane store did not answer a load; trying the event again", "event_id", a.Entry.EventID, "lane", a.Lane.ID.String(), "error", f.LoadErr)
	}
	_, err := settle(ctx, w.Scheduler, part, a, ev, v, res)
	return v, err
}

// gather fills in the facts of a loaded event's attempt from the config:
// its destination, its subscription (for an event one routed) and the
// partition's lease; it returns where and how to send it.
func (o *Partition) gather(f *verdict.Facts, ev *rivorav1.Event) (destinations.Endpoint, time.Duration) {
	f.Conflict = ev.GetIdempotencyConflict()
	f.Owned = o.Owned()
	f.ConfigBehind = o.deps.Applied != nil && o.deps.Applied() < ev.GetConfigVersion()
	var sub *subscriptions.Subscription
	if id := ev.GetSubscriptionId(); id != "" {
		var ok bool
		sub, ok = o.deps.Subscriptions.Get(id)
		f.SubscriptionMissing = !ok
		f.SubscriptionDeleting = ok && o.deleting.held(id, f.Now)
		f.SubscriptionPaused = ok && sub.Held()
	}
	dest, ok := o.deps.Registry.Get(ev.GetDestinationId())
	f.DestinationKnown = ok
	if !ok {
		return destinations.Endpoint{}, 0
	}
	// 0: accepted before events carried their version (or by a gateway
	// that knows none), which says nothing.
	f.DestinationRecreated = ev.GetConfigVersion() != 0 && dest.CreatedVersion > ev.GetConfigVersion()
	// An unusable destination (its config did not build here) is held
	// as a paused one (Held); its build error keeps it from
	// being sent to also should that ever change (no signer, no client
	// certificate).
	f.Paused, f.EndpointErr = dest.Held(), dest.Unusable
	// Likewise a subscription whose secret did not load (held as
	// paused): never sent unsigned, nor signed with the destination's
	// secret in place of its own.
	if f.EndpointErr == nil && sub != nil && sub.UnusableHeld {
		f.EndpointErr = sub.Unusable
	}
	f.Shared = dest.OwnerCustomer == ""
	f.Policy, f.WindowStart = dest.Retry, windowStart(ev, o.pausedBetween(dest, ev), f.Now)
	return dest.Endpoint(sub), dest.Timeout
}

// pausedBetween is what holds an event's window: its destination's
// pauses, and its subscription's (with the stretches it was held
// unusable) for an event one routed.
func (o *Partition) pausedBetween(dest *destinations.Destination, ev *rivorav1.Event) func(from, to time.Time) time.Duration {
	var subPaused retry.Pauses
	if id := ev.GetSubscriptionId(); id != "" {
		if sub, ok := o.deps.Subscriptions.Get(id); ok {
			subPaused = sub.HeldPauses()
		}
	}
	return func(from, to time.Time) time.Duration { return dest.PausedBetweenWith(subPaused, from, to) }
}

// windowStart is when an event's window started: at acceptance, moved on
// by the time its destination (or subscription) was paused since.
func windowStart(ev *rivorav1.Event, pausedBetween func(from, to time.Time) time.Duration, now time.Time) time.Time {
	start := ev.GetAcceptedAt().AsTime()
	return start.Add(pausedBetween(start, now))
}

// observe counts an attempt and tells the scheduler how its destination
// answered; it returns what the scheduler answers in the same call:
// whether the destination is otherwise healthy, and whether a 410 is its
// customer's alone.
func (o *Partition) observe(a *scheduler.Attempt, ev *rivorav1.Event, res delivery.Result) scheduler.Observation {
	if dest, ok := o.deps.Registry.Get(ev.GetDestinationId()); ok {
		metricsFor(dest).count(res)
	}
	cause := ""
	if res.Err != nil {
		cause = res.Err.Error()
	}
	if res.CertificateRefused {
		o.deps.Scheduler.NoteCertificateRefused(a)
	}
	obs := o.deps.Scheduler.Observe(a, res.Status, res.DestinationFault(), res.RetryAfter, cause)
	if obs.Changed {
		o.log.Info("destination health changed", "destination", ev.GetDestinationId(), "from", obs.Transition.From.String(), "to", obs.Transition.To.String(), "cause", obs.Transition.Cause)
	}
	return obs
}
