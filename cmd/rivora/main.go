// Command rivora runs Rivora's servers: `rivora dev` runs the control plane
// and one agent in one process on embedded defaults; `rivora controlplane`
// and `rivora agent` run them apart; `rivora edge` accepts events beside
// the publishing apps and forwards them to a cell.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/rivora/rivora/internal/buildinfo"
)

// version is the build's (internal/buildinfo).
var version = buildinfo.Version()

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "rivora: %v\n", err)
		os.Exit(1)
	}
}

// newApp builds the command tree: main runs it, and a test checks the
// Nomad jobs in deploy/ against its flags.
func newApp() *cli.App {
	return &cli.App{
		Name:    "rivora",
		Usage:   "webhook delivery: accept events durably, deliver them signed, in order, with retries",
		Version: version,
		Commands: []*cli.Command{
			devCommand(),
			controlPlaneCommand(),
			agentCommand(),
			edgeCommand(),
		},
	}
}
