package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/rivora/rivora/controlplane"
)

// capacityFlags are the caps on the control plane's state, of `rivora
// controlplane` and `rivora dev`.
func capacityFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "max-destinations", Value: controlplane.DefaultMaxDestinations, EnvVars: []string{"RIVORA_MAX_DESTINATIONS"},
			Usage: "at most `N` registered destinations; creating one more is refused (ResourceExhausted) until one is deleted. Each costs every agent a budget and a feed entry"},
	}
}

// capacityConfig checks the cap flags into cfg.
func capacityConfig(c *cli.Context, cfg *controlplane.Config) error {
	n := c.Int("max-destinations")
	if n < 1 {
		return cli.Exit(fmt.Sprintf("--max-destinations %d: want at least 1", n), 2)
	}
	cfg.MaxDestinations = n
	return nil
}
