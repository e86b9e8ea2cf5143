package agent

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/rivora/rivora/internal/backoff"
)

// replicatedCreate creates the cell's replicated streams at startup (New).
//
// In a fresh cell, creating a replicated stream can fail while its peers
// catch up with the cluster (no suitable peers until a third agent is
// up, a reply that never comes): retry for a while. The agents of a fresh
// cell create the same streams at once, and the first request's reply
// often never comes although the stream is created, while a repeat is
// answered at once. So an attempt is bounded short at first, and the
// bound doubles only when an attempt ran out of it (a loaded cell gets
// the time it needs); an attempt refused at once keeps its bound and
// waits it out before the next, so refusals do not hammer the forming
// cluster. A fresh cell's agents started ~4 s sooner with a 250 ms first
// bound than with a fixed 1 s (e2e cluster tests' logs, 2026-12-07).
type replicatedCreate struct {
	bounds backoff.Backoff // each attempt's bound: Initial, doubled up to Max
	pause  time.Duration   // at least this between two attempts
	giveUp time.Duration   // no attempt starts after this long
	log    *slog.Logger
}

// startupCreate is New's: a first attempt of 250 ms, up to the client's
// 5 s, for 2 minutes.
func startupCreate(log *slog.Logger) *replicatedCreate {
	return &replicatedCreate{
		bounds: backoff.Backoff{Initial: 250 * time.Millisecond, Max: 5 * time.Second},
		pause:  100 * time.Millisecond,
		giveUp: 2 * time.Minute,
		log:    log,
	}
}

// run calls create until it succeeds, ctx ends or giveUp has passed, and
// returns its last error. Each call gets a context bounded as above.
func (c *replicatedCreate) run(ctx context.Context, what string, create func(ctx context.Context) error) error {
	deadline := time.Now().Add(c.giveUp)
	bounds := c.bounds // each stream starts from the first bound
	bound := bounds.Next()
	var loggedAt time.Time
	for {
		started := time.Now()
		attemptCtx, cancel := context.WithTimeout(ctx, bound)
		err := create(attemptCtx)
		timedOut := errors.Is(attemptCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		if time.Since(loggedAt) >= 5*time.Second {
			loggedAt = time.Now()
			c.log.Info("creating a replicated stream; retrying", "stream", what, "error", err)
		}
		wait := max(c.pause, bound-time.Since(started))
		if timedOut {
			bound = bounds.Next()
			wait = c.pause
		}
		if !backoff.Sleep(ctx, wait) {
			return err
		}
	}
}
