// Command rivora runs Rivora's servers: `rivora dev` runs the control plane
// and one agent in one process on embedded defaults; `rivora controlplane`
// and `rivora agent` run them apart.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	app := &cli.App{
		Name:    "rivora",
		Usage:   "webhook delivery: accept events durably, deliver them signed, in order, with retries",
		Version: version,
		Commands: []*cli.Command{
			devCommand(),
			controlPlaneCommand(),
			agentCommand(),
		},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "rivora: %v\n", err)
		os.Exit(1)
	}
}
