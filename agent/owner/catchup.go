package owner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rivora/rivora/lanes"
)

// An operator's archive counts what the scheduler holds, and events
// INGEST acknowledged for the partition reach the scheduler only once the
// mover moved them: it first waits for the mover (awaitMoved).

// ErrMoverBehind: the partition's mover did not move, within moveCatchUp
// (or the caller's deadline), every event INGEST held for the partition
// when an operator's archive asked. Nothing was archived: a count of the
// lanes alone would leave those events out, and they would become dead
// letters uncounted (or, the delete having failed, be delivered). The
// operator retries once the mover caught up.
var ErrMoverBehind = errors.New("the partition's mover has not moved what INGEST holds for it yet")

// moveCatchUp bounds how long an operator's archive waits for the mover.
// A mover that keeps up moves what INGEST holds in milliseconds (tens of
// thousands of events a second); one still behind after this is far
// behind or stalled (its watch restarts it after the mover stall timeout,
// 30 s by default), and the operator is told so rather than given a short
// count. It stays well inside the control plane's 30 s agent RPC timeout.
const moveCatchUp = 10 * time.Second

// catchUpPoll is how often awaitMoved looks at the mover's progress (an
// atomic load; the wait is an operator's, rare).
const catchUpPoll = 5 * time.Millisecond

// awaitMoved returns once the mover has handled every event INGEST
// acknowledged for this partition before the call: each is then in the
// scheduler (the writer registers a moved event before the mover records
// it moved, movedThrough). An event the fast path stored straight into
// the lanes is in the scheduler before its publisher is answered, so no
// event accepted before the call is missing from a count that follows.
//
// It stores a barrier in INGEST (as the mover does before it opens the
// fast path) and waits until the mover has moved past it: the barrier's
// store goes through INGEST's leader and a quorum of its replicas, so
// every event acknowledged before it has a lower sequence, which a read
// of INGEST's last sequence could not promise (a server cut off while it
// led INGEST still answers, from its stale copy, for a while).
//
// ErrMoverBehind when the mover did not get there within moveCatchUp or
// ctx's deadline (whichever comes first: a caller with less time gets the
// same answer, told in time), ErrNotOwned when the partition stopped
// meanwhile, ctx's error when the caller gave up (cancelled).
func (o *Partition) awaitMoved(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, moveCatchUp)
	defer cancel()
	w := o.writer
	ack, err := w.js.PublishMsg(wctx, barrierMsg(o.p))
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return ctx.Err()
		}
		return fmt.Errorf("partition %d: store a barrier in %s to learn what it holds for the partition: %w", o.p, lanes.IngestStream, err)
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
			return fmt.Errorf("partition %d: %w: %s after the request it had moved %s through seq %d, short of seq %d (the request's mark); nothing archived: retry",
				o.p, ErrMoverBehind, time.Since(started).Round(time.Millisecond), lanes.IngestStream, w.movedThrough.Load(), ack.Sequence)
		}
	}
	return nil
}
