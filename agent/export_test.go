package agent

import "github.com/nats-io/nats.go/jetstream"

// JetStream is the embedded server's JetStream, for tests that break a
// store on purpose.
func (a *Agent) JetStream() jetstream.JetStream { return a.nats.JetStream() }
