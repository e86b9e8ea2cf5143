package agent

import (
	"context"
	"time"

	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/agent/scheduler"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// work is one delivery worker.
func (a *Agent) work(ctx context.Context) {
	for {
		var att *scheduler.Attempt
		select {
		case att = <-a.sched.Attempts():
		case <-ctx.Done():
			return
		}
		// An attempt that started finishes even while draining.
		a.attempt(context.WithoutCancel(ctx), att)
	}
}

func (a *Agent) attempt(ctx context.Context, att *scheduler.Attempt) {
	run, ok := a.parts.attempting(att.Lane.Partition)
	if !ok {
		// Its partition is still opening (the rebuild registers lanes
		// before the partition is installed), or was just released: try
		// again shortly rather than spin.
		head := att.Head
		head.NotBefore = time.Now().Add(100 * time.Millisecond)
		a.sched.Retry(att, head)
		return
	}
	defer run.inFlight.Done()
	part := run.part
	ev, err := part.Load(ctx, att)
	if err != nil {
		part.Skip(att, err)
		return
	}
	dest, ok := a.registry.Get(ev.GetDestinationId())
	if !ok {
		// Deleted (with --force) while this attempt was out: archive it like
		// the rest of the destination's pending events.
		part.Abandon(ctx, att, ev, rivorav1.DeadReason_DEAD_REASON_DELETED)
		return
	}
	if dest.Paused {
		// Picked just before the pause arrived: not sent. The lane waits,
		// unchanged, with the rest of the destination.
		a.sched.Release(att)
		return
	}
	if att.Expired {
		part.Expire(ctx, att, ev)
		return
	}
	endpoint, err := a.registry.Endpoint(dest.ID, ev.GetCustomerId())
	if err != nil {
		head := att.Head
		head.NotBefore = time.Now().Add(time.Second)
		a.sched.Retry(att, head)
		return
	}
	if !part.Owned() {
		// Fenced: the lease lapsed (the partition is stopping). Another
		// agent delivers it now.
		return
	}
	res := a.sender.Send(ctx, delivery.Request{Endpoint: endpoint, Event: ev, Attempt: att.Number, Timeout: dest.Timeout, BudgetWait: att.BudgetWait})
	if res.Gone() {
		a.disableHere(att, ev, res)
	}
	part.Complete(ctx, att, ev, res)
}

