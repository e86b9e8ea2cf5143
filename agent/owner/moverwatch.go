package owner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Events that another agent accepted for a partition wait in INGEST until
// the partition's mover takes them from its consumer; while any wait
// there, the owner's own events queue behind them too (the fast-path
// gate). A mover that takes nothing any more thus stops the partition's
// traffic without a failed write or an error to show for it: the chaos
// hour of issue 27 lost 780 acknowledged events so, for the rest of the
// run. The mover restarts the partition when its consumer stops
// (ErrMoverStopped); watchMover is the net under every other way it could
// go quiet: INGEST holds messages for the partition (waiting or delivered
// and unacked) and the mover took none of them for the mover stall
// timeout. It logs what it saw and stops the partition (ErrMoverStalled);
// the agent reopens it with a fresh consumer, which hands every unmoved
// message over again, in order.
//
// A busy mover costs it nothing (it reads a counter); an idle one, one
// consumer info request per check.

// DefaultMoverStallTimeout is how long INGEST may hold messages for a
// partition that its mover takes none of before the partition restarts.
// It is longer than any wait a working mover makes with messages at hand:
// a move whose acks do not come ends within the writer's ack wait (about
// 19s), a cut-off store is given up after the store stall timeout (15s),
// and a check or comparison against the idempotency records ends within
// its own timeout (10s, 5s) and counts as progress when it is retried; so
// only a mover that is stuck restarts.
const DefaultMoverStallTimeout = 30 * time.Second

// ErrMoverStalled means INGEST held messages for the partition that its
// mover took none of for the mover stall timeout.
var ErrMoverStalled = errors.New("INGEST holds events the mover does not take; restarting the partition")

// moverInfoTimeout bounds one look at the mover's consumer.
const moverInfoTimeout = 3 * time.Second

// moverStallTimeout is the partition's mover stall timeout.
func (o *Partition) moverStallTimeout() time.Duration {
	if o.deps.MoverStallTimeout > 0 {
		return o.deps.MoverStallTimeout
	}
	return DefaultMoverStallTimeout
}

// watchMover stops the partition with ErrMoverStalled once INGEST held
// messages for it, seen at every check for the mover stall timeout, while
// the mover took none (see above). A consumer that cannot be read is
// logged, not judged: INGEST without a quorum stalls every mover alike,
// and a restart would not help.
func (o *Partition) watchMover(ctx context.Context) error {
	timeout := o.moverStallTimeout()
	t := time.NewTicker(timeout / 6)
	defer t.Stop()
	seen := o.mover.progress.Load()
	// waitingSince: since when every check saw messages waiting; unreadSince:
	// since when every check failed to read the consumer (zero: not so).
	var waitingSince, unreadSince time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if now := o.mover.progress.Load(); now != seen {
			seen, waitingSince, unreadSince = now, time.Time{}, time.Time{}
			continue
		}
		ictx, cancel := context.WithTimeout(ctx, moverInfoTimeout)
		info, err := o.mover.ingest.Info(ictx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		now := time.Now()
		unreadable := err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound)
		if !unreadable {
			unreadSince = time.Time{}
		}
		switch {
		case unreadable && unreadSince.IsZero():
			// Only checks that read the consumer judge the mover: what
			// waited through an outage of INGEST is no sign of a stuck
			// mover once INGEST answers again.
			unreadSince, waitingSince = now, time.Time{}
			continue
		case unreadable:
			// A fault's few seconds are every partition's; said once the
			// consumer could not be read for the timeout, then every
			// timeout.
			waitingSince = time.Time{}
			if quiet := now.Sub(unreadSince); quiet >= timeout {
				unreadSince = now
				o.log.Warn("cannot read the mover's INGEST consumer; events accepted by other agents may wait", "error", err, "for", quiet.Round(time.Millisecond), "moved_through", o.writer.movedThrough.Load())
			}
			continue
		case err == nil && info.NumPending == 0 && info.NumAckPending == 0:
			waitingSince = time.Time{}
			continue
		case waitingSince.IsZero():
			waitingSince = now
			continue
		case now.Sub(waitingSince) < timeout:
			continue
		}
		if o.mover.progress.Load() != seen {
			continue // it took something while we looked
		}
		return o.moverStalled(info, err, now.Sub(waitingSince))
	}
}

// moverStalled logs a stalled mover with what its consumer said (info,
// or why not: err) and returns the partition's error.
func (o *Partition) moverStalled(info *jetstream.ConsumerInfo, err error, quiet time.Duration) error {
	moverStallsTotal.Inc()
	quiet = quiet.Round(time.Millisecond)
	consumeErr := o.mover.lastConsumeErr()
	if err != nil {
		o.log.Warn("the mover's INGEST consumer is gone while the partition runs; restarting the partition", "error", err, "for", quiet, "moved_through", o.writer.movedThrough.Load(), "consume_error", consumeErr)
		return fmt.Errorf("%w (partition %d: its consumer is gone: %v)", ErrMoverStalled, o.p, err)
	}
	o.log.Warn("INGEST holds events for this partition that its mover has not taken; restarting the partition",
		"waiting", info.NumPending, "unacked", info.NumAckPending, "pulls_waiting", info.NumWaiting,
		"delivered_stream_seq", info.Delivered.Stream, "ack_floor_stream_seq", info.AckFloor.Stream,
		"moved_through", o.writer.movedThrough.Load(), "for", quiet, "consume_error", consumeErr)
	return fmt.Errorf("%w (partition %d: %d waiting and %d unacked in INGEST, none taken for %s)", ErrMoverStalled, o.p, info.NumPending, info.NumAckPending, quiet)
}
