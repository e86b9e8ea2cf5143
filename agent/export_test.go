package agent

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/diskroom"
	"github.com/rivora/rivora/agent/scheduler"
)

// JetStream is the embedded server's JetStream, for tests that break a
// store on purpose.
func (a *Agent) JetStream() jetstream.JetStream { return a.nats.JetStream() }

// Room is the watch of the store's room (nil: not watched).
func (a *Agent) Room() *diskroom.Watch { return a.room }

// Scheduler is the agent's scheduler, for tests that look at a pending
// event's head.
func (a *Agent) Scheduler() *scheduler.Scheduler { return a.sched }
