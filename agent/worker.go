package agent

import (
	"context"

	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/agent/scheduler"
)

// work is one delivery worker.
func (a *Agent) work(ctx context.Context) {
	// An attempt that started finishes even while draining.
	attemptCtx := context.WithoutCancel(ctx)
	for {
		var att *scheduler.Attempt
		select {
		case att = <-a.sched.Attempts():
		case <-ctx.Done():
			return
		}
		a.attempt(attemptCtx, att)
		a.sched.Done(att)
	}
}

// attempt runs one attempt to its settlement (owner.Worker), in its
// partition when the partition is open here.
func (a *Agent) attempt(ctx context.Context, att *scheduler.Attempt) {
	var part *owner.Partition
	if open, done, ok := a.parts.Attempting(att.Lane.Partition); ok {
		defer done()
		part = open
	}
	if v, err := a.worker.Attempt(ctx, part, att); err != nil {
		a.log.Error("settling an attempt", "event_id", att.Entry.EventID, "verdict", v.Kind.String(), "error", err)
	}
}
