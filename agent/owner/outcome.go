package owner

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/agent/retry"
	"github.com/rivora/rivora/agent/scheduler"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Attempt outcomes: the Partition methods the delivery workers call. They
// hold no state of their own; they move the scheduler's lanes on and tell
// the parts what became of each event (the ledger head record, the
// dead-letter hand-off, the reclaimer's done bookkeeping, the cache).

// Load returns the event of an attempt, from memory or the lane store.
func (o *Partition) Load(ctx context.Context, a *scheduler.Attempt) (*rivorav1.Event, error) {
	if a.Entry.Event != nil {
		return a.Entry.Event, nil
	}
	raw, err := o.lanes.GetMsg(ctx, a.Entry.Seq)
	if err != nil {
		return nil, fmt.Errorf("load event %s (seq %d): %w", a.Entry.EventID, a.Entry.Seq, err)
	}
	ev := &rivorav1.Event{}
	if err := proto.Unmarshal(raw.Data, ev); err != nil {
		return nil, fmt.Errorf("decode event %s (seq %d): %w", a.Entry.EventID, a.Entry.Seq, err)
	}
	return ev, nil
}

// Complete records the outcome of an attempt and moves its lane on.
func (o *Partition) Complete(ctx context.Context, a *scheduler.Attempt, ev *rivorav1.Event, res delivery.Result) {
	now := o.deps.Clock.Now()
	attempt := &rivorav1.Attempt{
		Number:     int32(a.Number),
		At:         timestamppb.New(a.StartedAt),
		StatusCode: int32(res.Status),
		Duration:   durationpb.New(res.Duration),
	}
	fault := o.observe(a, ev, res)
	if res.OK() {
		// Recorded before the lane lets go, so `events get` never finds
		// the event in neither place.
		o.deps.History.Record(outcome(ev, rivorav1.EventOutcome_KIND_DELIVERED, attempt))
		o.deps.History.RecordBody(ev)
		out := o.deps.Scheduler.Succeeded(a)
		o.afterAdvance(a, out)
		return
	}
	attempt.Error = res.Err.Error()
	if res.Gone() {
		// 410: the partner wants no more webhooks. The agent has disabled
		// the destination (paused until an operator resumes it); the
		// event keeps its attempts, its schedule and its place at its
		// lane's head, and is not dead-lettered.
		o.deps.History.Record(outcome(ev, rivorav1.EventOutcome_KIND_ATTEMPT_FAILED, attempt))
		o.deps.Scheduler.Retry(a, a.Head)
		return
	}
	if fault && !o.deps.Scheduler.OtherwiseHealthy(a) {
		// The destination is down or throttling: the event waits for it
		// and keeps its attempts; only its window ends it.
		o.deps.History.Record(outcome(ev, rivorav1.EventOutcome_KIND_ATTEMPT_FAILED, attempt))
		o.hold(ctx, a, ev, res, attempt.Error, now)
		return
	}
	// Charged to the event (its own failure, or the destination's while it
	// is otherwise healthy): it retries on its own back-off, not held for
	// a destination that answers the other lanes.
	head := failedHead(a, res.Status, attempt.Error, false, now)
	decision := o.decide(ev, head.Attempts, res.RetryAfter, now)
	o.deps.History.Record(outcome(ev, rivorav1.EventOutcome_KIND_ATTEMPT_FAILED, attempt))
	switch decision.Verdict {
	case retry.Retry:
		head.NotBefore = decision.NotBefore
		o.retryLater(ctx, a, head)
	case retry.ExhaustedAttempts:
		o.kill(ctx, a, ev, head, rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS)
	case retry.ExhaustedWindow:
		o.kill(ctx, a, ev, head, rivorav1.DeadReason_DEAD_REASON_WINDOW)
	}
}

// observe counts an attempt and tells the scheduler how its destination
// answered; it reports whether a failure is the destination's.
func (o *Partition) observe(a *scheduler.Attempt, ev *rivorav1.Event, res delivery.Result) bool {
	if o.registered(ev.GetDestinationId()) {
		attemptsTotal.WithLabelValues(ev.GetDestinationId(), res.StatusClass()).Inc()
		attemptSeconds.WithLabelValues(ev.GetDestinationId()).Observe(res.Duration.Seconds())
		if res.Status == http.StatusTooManyRequests {
			throttledTotal.WithLabelValues(ev.GetDestinationId()).Inc()
		}
	}
	fault := res.DestinationFault()
	cause := ""
	if res.Err != nil {
		cause = res.Err.Error()
	}
	if tr, changed := o.deps.Scheduler.Observe(a, res.Status, fault, res.RetryAfter, cause); changed {
		o.log.Info("destination health changed", "destination", ev.GetDestinationId(), "from", tr.From.String(), "to", tr.To.String(), "cause", tr.Cause)
	}
	return fault
}

// failedHead is the lane head's state after a failed attempt; held: it
// waits for its destination (hold), not for its own retry time.
func failedHead(a *scheduler.Attempt, status int, cause string, held bool, now time.Time) scheduler.Head {
	head := a.Head
	head.Attempts = a.Number
	head.LastStatus = status
	head.LastError = cause
	head.LastAttemptAt = now
	head.HeldByDestination = held
	if head.FirstAttemptAt.IsZero() {
		head.FirstAttemptAt = a.StartedAt
	}
	return head
}

// decide applies the destination's retry policy after a failed attempt.
func (o *Partition) decide(ev *rivorav1.Event, attempts int, retryAfter time.Duration, now time.Time) retry.Decision {
	policy, windowStart := o.policy(ev, now)
	wait := max(retry.Jittered(policy.Backoff(attempts)), retryAfter)
	return policy.Next(attempts, windowStart, now, wait)
}

// policy is the event's retry policy and the start of its window: the
// window runs from acceptance, not counting time the destination was
// paused.
func (o *Partition) policy(ev *rivorav1.Event, now time.Time) (retry.Policy, time.Time) {
	policy := retry.DefaultPolicy()
	windowStart := ev.GetAcceptedAt().AsTime()
	if d, ok := o.deps.Registry.Get(ev.GetDestinationId()); ok {
		policy = d.Retry
		windowStart = windowStart.Add(d.PausedBetween(windowStart, now))
	}
	return policy, windowStart
}

// hold records a failure that is the destination's while it is not
// otherwise healthy (scheduler.OtherwiseHealthy): no attempt is charged;
// the event waits for the destination (a parked destination's lanes are
// held until it recovers) and dies with reason window once its window
// closes, never earlier.
func (o *Partition) hold(ctx context.Context, a *scheduler.Attempt, ev *rivorav1.Event, res delivery.Result, cause string, now time.Time) {
	head := failedHead(a, res.Status, cause, true, now)
	head.Attempts = a.Head.Attempts // not charged
	policy, windowStart := o.policy(ev, now)
	head.WindowEnd = policy.WindowEnd(windowStart)
	wait := max(retry.Jittered(policy.Backoff(max(head.Attempts, 1))), res.RetryAfter)
	decision := policy.Hold(windowStart, now, wait)
	if decision.Verdict == retry.ExhaustedWindow {
		o.kill(ctx, a, ev, head, rivorav1.DeadReason_DEAD_REASON_WINDOW)
		return
	}
	head.NotBefore = decision.NotBefore
	if a.Head.HeldByDestination && !a.Head.FirstAttemptAt.IsZero() {
		// Already held: only its last status and retry time change, and a
		// rebuild tries a held head soon either way. No ledger record per
		// probe.
		o.deps.Scheduler.Retry(a, head)
		return
	}
	o.retryLater(ctx, a, head)
}

// Expire dead-letters (reason window) an event its parked destination
// held until its window closed, without an attempt. When a pause moved
// the window on, it waits again.
func (o *Partition) Expire(ctx context.Context, a *scheduler.Attempt, ev *rivorav1.Event) {
	now := o.deps.Clock.Now()
	policy, windowStart := o.policy(ev, now)
	end := policy.WindowEnd(windowStart)
	if end.IsZero() || now.Before(end) {
		head := a.Head
		head.WindowEnd = end
		o.deps.Scheduler.Retry(a, head)
		return
	}
	o.kill(ctx, a, ev, a.Head, rivorav1.DeadReason_DEAD_REASON_WINDOW)
}

// Abandon dead-letters an attempt's event without sending it (its
// destination was deleted while the attempt was being handed out).
func (o *Partition) Abandon(ctx context.Context, a *scheduler.Attempt, ev *rivorav1.Event, reason rivorav1.DeadReason) {
	o.kill(ctx, a, ev, a.Head, reason)
	// The lane's later events were held back with it while it was in
	// flight; they follow it to the archive.
	if _, err := o.ArchiveDestination(ctx, ev.GetDestinationId()); err != nil {
		o.log.Warn("archive the rest of a deleted destination", "destination", ev.GetDestinationId(), "error", err)
	}
}

// Skip moves a lane past an entry whose event can no longer be loaded.
func (o *Partition) Skip(a *scheduler.Attempt, err error) {
	o.log.Error("skipping an event that cannot be loaded", "event_id", a.Entry.EventID, "lane", a.Lane.ID.String(), "error", err)
	o.afterAdvance(a, o.deps.Scheduler.Succeeded(a))
}

func (o *Partition) retryLater(ctx context.Context, a *scheduler.Attempt, head scheduler.Head) {
	rec := &rivorav1.LaneHead{
		Seq:               a.Entry.Seq,
		EventId:           a.Entry.EventID,
		Attempts:          int32(head.Attempts),
		NotBefore:         timestamppb.New(head.NotBefore),
		LastStatus:        int32(head.LastStatus),
		LastError:         head.LastError,
		FirstAttemptAt:    timestamppb.New(head.FirstAttemptAt),
		LastAttemptAt:     timestamppb.New(head.LastAttemptAt),
		HeldByDestination: head.HeldByDestination,
	}
	// Appended, not rolled up: a rollup by an owner fenced off a moment
	// too late would erase the newer owner's record; the rebuild keeps the
	// last record of the newest epoch, and the subject is purged once the
	// lane moves on (a head collects at most max_attempts records).
	if _, err := o.fence.appendLedger(ctx, a.Lane.ID.HeadSubject(o.p), rec); err != nil {
		// The retry still happens; after a crash this attempt would not be
		// counted.
		o.log.Warn("ledger write failed", "lane", a.Lane.ID.String(), "error", err)
	}
	o.deps.Scheduler.Retry(a, head)
}

func (o *Partition) kill(ctx context.Context, a *scheduler.Attempt, ev *rivorav1.Event, head scheduler.Head, reason rivorav1.DeadReason) {
	if _, err := o.die(ctx, a, ev, head, reason); err != nil {
		// The lane may only advance once the dead letter is durable; try
		// again shortly.
		o.log.Warn("ledger write of dead letter failed; holding the lane", "event_id", ev.GetEventId(), "error", err)
		head.NotBefore = o.deps.Clock.Now().Add(5 * time.Second)
		o.deps.Scheduler.Retry(a, head)
	}
}

// die makes an attempt's event a dead letter and moves its lane on; on
// an error nothing happened and the attempt is still the caller's.
func (o *Partition) die(ctx context.Context, a *scheduler.Attempt, ev *rivorav1.Event, head scheduler.Head, reason rivorav1.DeadReason) (scheduler.Outcome, error) {
	dl := o.deadLetter(ev, a.Entry.Seq, head, reason)
	if err := o.dead.record(ctx, dl); err != nil {
		return scheduler.Outcome{}, err
	}
	o.deps.History.Record(deadOutcome(ev, head, reason))
	out := o.deps.Scheduler.Dead(a)
	o.afterAdvance(a, out)
	if o.registered(ev.GetDestinationId()) {
		deadTotal.WithLabelValues(ev.GetDestinationId(), reasonLabel(reason)).Inc()
	}
	return out, nil
}

// registered: the destination is in the config. An attempt in flight when
// its destination was deleted must not bring back the series the delete
// removed (ForgetDestinationMetrics).
func (o *Partition) registered(destinationID string) bool {
	_, ok := o.deps.Registry.Get(destinationID)
	return ok
}

// SkipHead makes a lane head an operator took (scheduler.TakeHead) a dead
// letter with reason manual, through the same path as any other: the
// ledger, the archive hand-off, the history. The lane moves on; it returns
// how many events the lane still holds. On an error the head is given back,
// unchanged.
func (o *Partition) SkipHead(ctx context.Context, a *scheduler.Attempt) (remaining int, err error) {
	ev, err := o.Load(ctx, a)
	if err == nil {
		var out scheduler.Outcome
		if out, err = o.die(ctx, a, ev, a.Head, rivorav1.DeadReason_DEAD_REASON_MANUAL); err == nil {
			return out.Remaining, nil
		}
	}
	o.deps.Scheduler.Release(a)
	return 0, fmt.Errorf("skip %s of lane %s: %w", a.Entry.EventID, a.Lane.ID, err)
}

func (o *Partition) deadLetter(ev *rivorav1.Event, seq uint64, head scheduler.Head, reason rivorav1.DeadReason) *rivorav1.DeadLetter {
	dl := &rivorav1.DeadLetter{
		Event:      ev,
		Attempts:   int32(head.Attempts),
		LastStatus: int32(head.LastStatus),
		LastError:  head.LastError,
		DeadAt:     timestamppb.New(o.deps.Clock.Now()),
		Reason:     reason,
		Partition:  uint32(o.p),
		LaneSeq:    seq,
	}
	if !head.FirstAttemptAt.IsZero() {
		dl.FirstAttemptAt = timestamppb.New(head.FirstAttemptAt)
		dl.LastAttemptAt = timestamppb.New(head.LastAttemptAt)
	}
	return dl
}

// afterAdvance tells the cache and the reclaimer that a lane moved past
// an attempt's entry.
func (o *Partition) afterAdvance(a *scheduler.Attempt, out scheduler.Outcome) {
	o.cache.forget(a.Entry)
	o.reclaim.noteDone(a.Lane.Subject, a.Entry.Seq)
	if out.PurgeLedger {
		o.reclaim.noteLedgerPurge(a.Lane.ID.HeadSubject(o.p))
	}
}

// ArchiveDestination dead-letters every pending event of a destination that
// is not in flight (reason "deleted") and returns how many.
func (o *Partition) ArchiveDestination(ctx context.Context, destinationID string) (int, error) {
	taken := o.deps.Scheduler.TakeDestination(destinationID)
	n := 0
	var firstErr error
	for lane, entries := range taken {
		for _, e := range entries {
			if err := o.archiveTaken(ctx, destinationID, lane, e); err != nil {
				firstErr = cmpErr(firstErr, err)
				continue
			}
			n++
		}
		o.reclaim.noteLedgerPurge(lane.ID.HeadSubject(o.p))
	}
	return n, firstErr
}

// archiveTaken dead-letters one entry taken from its lane (reason
// "deleted").
func (o *Partition) archiveTaken(ctx context.Context, destinationID string, lane *scheduler.Lane, e scheduler.Entry) error {
	o.cache.forget(e)
	ev, err := o.Load(ctx, &scheduler.Attempt{Lane: lane, Entry: e})
	if err != nil {
		return err
	}
	dl := o.deadLetter(ev, e.Seq, scheduler.Head{}, rivorav1.DeadReason_DEAD_REASON_DELETED)
	if err := o.dead.record(ctx, dl); err != nil {
		return err
	}
	o.reclaim.noteDone(lane.Subject, e.Seq)
	o.deps.History.Record(deadOutcome(ev, scheduler.Head{}, dl.Reason))
	deadTotal.WithLabelValues(destinationID, reasonLabel(dl.Reason)).Inc()
	return nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// deadOutcome is an event's dead record; it carries the head's attempts
// and last failure, so a listing needs no other record.
func deadOutcome(ev *rivorav1.Event, head scheduler.Head, reason rivorav1.DeadReason) *rivorav1.EventOutcome {
	o := outcome(ev, rivorav1.EventOutcome_KIND_DEAD, nil)
	o.DeadReason = reason
	o.Attempts, o.LastStatus, o.LastError = int32(head.Attempts), int32(head.LastStatus), head.LastError
	return o
}

func outcome(ev *rivorav1.Event, kind rivorav1.EventOutcome_Kind, a *rivorav1.Attempt) *rivorav1.EventOutcome {
	return &rivorav1.EventOutcome{
		Kind: kind, EventId: ev.GetEventId(), DestinationId: ev.GetDestinationId(), CustomerId: ev.GetCustomerId(),
		LaneKey: ev.GetLaneKey(), Type: ev.GetType(), AcceptedAt: ev.GetAcceptedAt(), Attempt: a,
	}
}

// cacheBudget bounds the bytes of events a partition keeps in memory.
const cacheBudget = 64 << 20

// eventCache counts the bytes of the events kept in memory with their
// scheduler entries; above cacheBudget entries keep only their sequence
// and delivery loads the event from the lane store.
//
// Invariant: bytes is the sum of cachedSize over the events keep returned
// and forget has not given back. Only one goroutine keeps at a time (the
// rebuild, then the writer's ackLoop), so bytes never exceeds cacheBudget.
type eventCache struct {
	bytes atomic.Int64
}

func cachedSize(ev *rivorav1.Event) int64 { return int64(len(ev.GetPayload()) + 128) }

// keep returns ev to hold in its scheduler entry while the cache has room,
// else nil (delivery then loads it by sequence): a large backlog costs
// memory per lane and entry, not per payload byte.
func (c *eventCache) keep(ev *rivorav1.Event) *rivorav1.Event {
	size := cachedSize(ev)
	if c.bytes.Load()+size > cacheBudget {
		return nil
	}
	c.bytes.Add(size)
	return ev
}

// forget gives an entry's cached bytes back.
func (c *eventCache) forget(e scheduler.Entry) {
	if e.Event != nil {
		c.bytes.Add(-cachedSize(e.Event))
	}
}
