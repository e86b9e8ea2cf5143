package server

import (
	"errors"
	"fmt"

	"github.com/rivora/rivora/agent/natsd"
)

// natsPortFlags name the flag that sets each port of an agent's embedded
// NATS server (rivora agent and rivora dev).
var natsPortFlags = map[string]string{
	natsd.ClientPort:  "--nats-listen",
	natsd.ClusterPort: "--nats-cluster",
	natsd.LeafPort:    "--leaf-listen",
}

// withPortFlag names the flag behind a port the agent's NATS server could
// not open: "--nats-listen ADDR: bind: address already in use". Other
// errors are returned as they are.
func withPortFlag(err error) error {
	var port *natsd.ListenError
	if !errors.As(err, &port) {
		return err
	}
	return fmt.Errorf("%s %s: %w", natsPortFlags[port.Port], port.Addr, port.Err)
}
