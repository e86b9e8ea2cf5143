package owner

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// An operator's archive counts what the scheduler holds, and events
// INGEST acknowledged for the partition reach the scheduler only once the
// mover moved them: it first waits for the mover (awaitMoved).

// moveCatchUp bounds how long an operator's archive waits for the mover.
// A mover that keeps up moves what INGEST holds in milliseconds (tens of
// thousands of events a second); one still behind after this is far
// behind or stalled (its watch restarts it after the mover stall timeout,
// 30 s by default). The archive then goes on with what the lanes hold:
// an operator deleting a destination in an incident is not kept waiting
// for a backlog to drain, and the events still in INGEST die at their
// own turn (reason deleted), uncounted (the agent's log says so). It is
// shorter than deletingHold, so that a subscription's hold, taken before
// the wait, outlasts it, and well inside the control plane's 30 s agent
// RPC timeout.
const moveCatchUp = 8 * time.Second

// catchUpMargin is left of the caller's deadline when the wait for the
// mover gives up early: the archive and its answer still fit in it.
const catchUpMargin = time.Second

// catchUpPoll is how often awaitMoved looks at the mover's progress (an
// atomic load; the wait is an operator's, rare).
const catchUpPoll = 5 * time.Millisecond

// awaitMoved returns once the mover has handled every event INGEST
// acknowledged for this partition before the call: each is then in the
// scheduler (the writer registers a moved event before the mover records
// it moved, movedThrough). An event the fast path stored straight into
// the lanes is in the scheduler before its publisher is answered, so no
// event accepted here before the call is missing from a count that
// follows. (An edge's events reach INGEST when the cell sources them:
// one an edge accepted but the cell has not sourced yet is not waited
// for.)
//
// It stores a barrier in INGEST (as the mover does before it opens the
// fast path) and waits until the mover has moved past it: the barrier's
// store goes through INGEST's leader and a quorum of its replicas, so
// every event acknowledged before it has a lower sequence, which a read
// of INGEST's last sequence could not promise (a server cut off while it
// led INGEST still answers, from its stale copy, for a while).
//
// It gives up waiting after moveCatchUp, or catchUpMargin before ctx's
// deadline, or when INGEST does not take the barrier, logs it, and
// returns nil: the archive counts what the lanes hold (see moveCatchUp).
// A caller with less than catchUpMargin left gets an error at once.
// ErrNotOwned when the partition stopped, or stopped handing events to
// the scheduler (a handoff), meanwhile: a count then would be short with
// no sign of it. ctx's error when the caller gave up.
func (o *Partition) awaitMoved(ctx context.Context) error {
	bound, err := o.catchUpBound(ctx)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	w := o.writer
	ack, err := w.js.PublishMsg(wctx, barrierMsg(o.p))
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return ctx.Err()
		}
		o.log.Warn("an operator's archive counts what the lanes hold: storing a barrier in INGEST to learn what it holds for the partition failed; events still there are archived at their turn, uncounted", "error", err)
		return o.stillHandingOver()
	}
	started := time.Now()
	tick := time.NewTicker(catchUpPoll)
	defer tick.Stop()
	for w.movedThrough.Load() < ack.Sequence {
		select {
		case <-tick.C:
		case <-w.writerDone:
			return fmt.Errorf("partition %d: %w", o.p, ErrNotOwned)
		case <-wctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return ctx.Err()
			}
			o.log.Warn("an operator's archive counts what the lanes hold: the mover did not catch up with INGEST in time; events still there are archived at their turn, uncounted",
				"waited", time.Since(started).Round(time.Millisecond), "moved_through", w.movedThrough.Load(), "barrier", ack.Sequence)
			return o.stillHandingOver()
		}
	}
	return o.stillHandingOver()
}

// catchUpBound is how long awaitMoved may wait for ctx's caller: an
// error for a caller already gone, or with less than catchUpMargin
// left, which an archive this late could not answer in time. The
// archives call it first, before they take or hold anything.
func (o *Partition) catchUpBound(ctx context.Context) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	bound := moveCatchUp
	if deadline, ok := ctx.Deadline(); ok {
		bound = min(bound, time.Until(deadline)-catchUpMargin)
	}
	if bound <= 0 {
		return 0, fmt.Errorf("partition %d: less than %s left before the caller's deadline to wait for the mover and archive; retry with more time: %w", o.p, catchUpMargin, context.DeadlineExceeded)
	}
	return bound, nil
}

// stillHandingOver is ErrNotOwned once the writer hands the scheduler
// nothing more (detached: the partition is being handed off): a count
// then would be short with no sign of it. The archive asks again once it
// took the lanes (a handoff may begin in between).
func (o *Partition) stillHandingOver() error {
	if o.writer.isDetached() {
		return fmt.Errorf("partition %d is being handed to another owner; retry: %w", o.p, ErrNotOwned)
	}
	return nil
}
