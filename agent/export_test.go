package agent

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/diskroom"
	"github.com/rivora/rivora/agent/retry"
	"github.com/rivora/rivora/agent/scheduler"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// SetMangleDestination sets c's test seam that changes a copy of each
// destination's config before the agent builds it (Config.mangleDestination):
// set in a rig's Agent callback, before the agent starts.
func SetMangleDestination(c *Config, mangle func(*rivorav1.Destination)) {
	c.mangleDestination = mangle
}

// SetMangleSubscription is SetMangleDestination for each subscription's
// config (Config.mangleSubscription).
func SetMangleSubscription(c *Config, mangle func(*rivorav1.Subscription)) {
	c.mangleSubscription = mangle
}

// JetStream is the embedded server's JetStream, for tests that break a
// store on purpose.
func (a *Agent) JetStream() jetstream.JetStream { return a.nats.JetStream() }

// Room is the watch of the store's room (nil: not watched).
func (a *Agent) Room() *diskroom.Watch { return a.room }

// Scheduler is the agent's scheduler, for tests that look at a pending
// event's head.
func (a *Agent) Scheduler() *scheduler.Scheduler { return a.sched }

// UnusableStretches are the stretches the agent held destination id as
// unusable (nil: none, or no such destination).
func (a *Agent) UnusableStretches(id string) retry.Pauses {
	d, ok := a.registry.Get(id)
	if !ok {
		return nil
	}
	return d.UnusableStretches
}
