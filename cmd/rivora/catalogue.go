package main

import (
	"github.com/urfave/cli/v2"

	"github.com/rivora/rivora/controlplane"
)

// catalogueFlags are the event-type catalogue's flags, of `rivora
// controlplane` and `rivora dev`.
func catalogueFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "strict-event-types", EnvVars: []string{"RIVORA_STRICT_EVENT_TYPES"},
			Usage: "refuse at ingest (invalid_argument) every event whose type is not in the event-type catalogue (rivoractl event-types create); without it any well-formed type is accepted, and a type with a schema is validated either way"},
	}
}

// catalogueConfig puts the catalogue flags into cfg.
func catalogueConfig(c *cli.Context, cfg *controlplane.Config) {
	cfg.StrictEventTypes = c.Bool("strict-event-types")
}
