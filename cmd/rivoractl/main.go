// Command rivoractl is the operator's command line for Rivora: manage
// destinations, publish events and follow their delivery. See `rivoractl
// --help`; the commands live in package cli.
package main

import (
	"os"

	"github.com/rivora/rivora/cli"
)

func main() {
	os.Exit(cli.Run(os.Args))
}
