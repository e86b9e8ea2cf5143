package owner

import (
	"context"
	"fmt"
	"time"

	"sync"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/agent/verdict"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// deadLetterRetry is how long a lane waits when its head's dead letter
// could not be recorded: it may only advance once the dead letter is
// durable.
const deadLetterRetry = 5 * time.Second

// settle applies verdict v to attempt a of partition part (nil only for
// the verdicts that record nothing: Wait and Release): it records what v
// needs, in this order — the history of the attempt sent (res), the
// ledger head record, the dead letter and its history — and then makes
// the one scheduler call that ends the attempt. It is the only place an
// attempt is settled.
//
// A dead letter that cannot be recorded leaves the lane where it is: an
// operator's skip (reason manual) gives the head back unchanged and
// returns the error; any other waits deadLetterRetry and tries again.
func settle(ctx context.Context, sched *scheduler.Scheduler, part *Partition, a *scheduler.Attempt, ev *rivorav1.Event, v verdict.Verdict, res delivery.Result) (scheduler.Outcome, error) {
	var st scheduler.Settlement
	var failed error
	switch v.Kind {
	case verdict.Delivered:
		// Recorded before the lane lets go, so `events get` never finds
		// the event in neither place.
		part.recordAttempt(ev, rivorav1.EventOutcome_KIND_DELIVERED, a, res, "")
		part.deps.History.RecordBody(ev)
		st = scheduler.Settlement{Kind: scheduler.Advance}
	case verdict.Skip:
		st = scheduler.Settlement{Kind: scheduler.Advance}
	case verdict.Retry, verdict.Hold, verdict.Wait:
		if v.Sent {
			part.recordFailedAttempt(ev, a, res, v.NotCharged(res))
		}
		if v.Ledger {
			part.appendHead(ctx, a, v.Head)
		}
		st = scheduler.Settlement{Kind: scheduler.Retry, Head: v.Head}
	case verdict.Release:
		st = scheduler.Settlement{Kind: scheduler.Release}
	case verdict.Dead:
		if v.Sent {
			part.recordFailedAttempt(ev, a, res, v.NotCharged(res))
		}
		st = scheduler.Settlement{Kind: scheduler.AdvanceDead, Unsent: !v.Sent}
		if err := part.recordDead(ctx, a, ev, v.Head, v.Reason); err != nil {
			if v.Reason == rivorav1.DeadReason_DEAD_REASON_MANUAL {
				failed = fmt.Errorf("skip %s of lane %s: %w", a.Entry.EventID, a.Lane.ID, err)
				st = scheduler.Settlement{Kind: scheduler.Release}
			} else {
				part.log.Warn("ledger write of dead letter failed; holding the lane", "event_id", ev.GetEventId(), "error", err)
				head := v.Head
				head.NotBefore = part.deps.Clock.Now().Add(deadLetterRetry)
				st = scheduler.Settlement{Kind: scheduler.Retry, Head: head}
			}
		}
	default:
		panic(fmt.Sprintf("owner: verdict %v cannot be settled", v.Kind))
	}
	out, err := sched.Settle(a, st)
	if err != nil {
		// A defect: the attempt's first settlement stands.
		return out, fmt.Errorf("settle %s (%s): %w", a.Entry.EventID, v.Kind, err)
	}
	if st.Kind == scheduler.Advance || st.Kind == scheduler.AdvanceDead {
		part.afterAdvance(a, out)
	}
	if st.Kind == scheduler.AdvanceDead && part.registered(ev.GetDestinationId()) {
		deadTotal.WithLabelValues(ev.GetDestinationId(), reasonLabel(v.Reason)).Inc()
	}
	if v.ArchiveSubscriptionRest {
		// The subscription's other events were held back with it while
		// it was in flight; they follow it to the archive.
		if _, err := part.archiveSubscription(ctx, ev.GetDestinationId(), ev.GetSubscriptionId()); err != nil {
			part.log.Warn("archive the rest of a deleted subscription", "subscription", ev.GetSubscriptionId(), "error", err)
		}
	}
	return out, failed
}

// SkipHead makes a lane head an operator took (scheduler.TakeHead) a dead
// letter with reason manual, through the same settlement as any other
// attempt: the ledger, the archive hand-off, the history. The lane moves
// on; it returns how many events the lane still holds. On an error the
// head is given back, unchanged.
func (o *Partition) SkipHead(ctx context.Context, a *scheduler.Attempt) (remaining int, err error) {
	ev, err := o.Load(ctx, a)
	v := verdict.Verdict{Kind: verdict.Dead, Head: a.Head, Reason: rivorav1.DeadReason_DEAD_REASON_MANUAL}
	if err != nil {
		v = verdict.Verdict{Kind: verdict.Release}
		err = fmt.Errorf("skip %s of lane %s: %w", a.Entry.EventID, a.Lane.ID, err)
	}
	out, settleErr := settle(ctx, o.deps.Scheduler, o, a, ev, v, delivery.Result{})
	if err == nil {
		err = settleErr
	}
	if err != nil {
		return 0, err
	}
	return out.Remaining, nil
}

// attemptOutcome is the history's record of an attempt sent, in one
// piece, reused: History.Record encodes a record before it returns, and
// an attempt's records cost delivery as much as the rest of its
// bookkeeping.
type attemptOutcome struct {
	outcome rivorav1.EventOutcome
	attempt rivorav1.Attempt
	at      timestamppb.Timestamp
	took    durationpb.Duration
	charged bool
}

var attemptOutcomes = sync.Pool{New: func() any { return new(attemptOutcome) }}

// recordAttempt records an attempt sent (kind: delivered, or failed);
// notCharged says why it used none of the event's attempts ("": it used
// one).
func (o *Partition) recordAttempt(ev *rivorav1.Event, kind rivorav1.EventOutcome_Kind, a *scheduler.Attempt, res delivery.Result, notCharged string) {
	rec := attemptOutcomes.Get().(*attemptOutcome)
	defer func() {
		// Cleared for the next, holding on to none of this event's.
		rec.outcome.Reset()
		rec.attempt.Reset()
		attemptOutcomes.Put(rec)
	}()
	setOutcome(&rec.outcome, ev, kind, &rec.attempt)
	rec.at.Seconds, rec.at.Nanos = a.StartedAt.Unix(), int32(a.StartedAt.Nanosecond())
	rec.took.Seconds, rec.took.Nanos = int64(res.Duration/time.Second), int32(res.Duration%time.Second)
	rec.attempt.Number = int32(a.Number)
	rec.attempt.At = &rec.at
	rec.attempt.StatusCode = int32(res.Status)
	rec.attempt.Duration = &rec.took
	rec.charged = notCharged == ""
	rec.attempt.Charged = &rec.charged
	rec.attempt.NotChargedReason = notCharged
	if res.Err != nil {
		rec.attempt.Error = res.Err.Error()
	}
	o.deps.History.Record(&rec.outcome)
}

func (o *Partition) recordFailedAttempt(ev *rivorav1.Event, a *scheduler.Attempt, res delivery.Result, notCharged string) {
	o.recordAttempt(ev, rivorav1.EventOutcome_KIND_ATTEMPT_FAILED, a, res, notCharged)
}

// appendHead writes a head's new state to the ledger. Appended, not
// rolled up: a rollup by an owner fenced off a moment too late would
// erase the newer owner's record; the rebuild keeps the last record of
// the newest epoch, and the subject is purged once the lane moves on (a
// head collects at most max_attempts records).
func (o *Partition) appendHead(ctx context.Context, a *scheduler.Attempt, head scheduler.Head) {
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
	if _, err := o.fence.appendLedger(ctx, a.Lane.ID.HeadSubject(o.p), rec); err != nil {
		// The retry still happens; after a crash this attempt would not be
		// counted.
		o.log.Warn("ledger write failed", "lane", a.Lane.ID.String(), "error", err)
	}
}

// recordDead makes an attempt's event a dead letter (the ledger, the
// archive hand-off) and records it in the history; on an error nothing
// was recorded.
func (o *Partition) recordDead(ctx context.Context, a *scheduler.Attempt, ev *rivorav1.Event, head scheduler.Head, reason rivorav1.DeadReason) error {
	if err := o.dead.record(ctx, o.deadLetter(ev, a.Entry.Seq, head, reason)); err != nil {
		return err
	}
	o.deps.History.Record(deadOutcome(ev, head, reason))
	return nil
}
