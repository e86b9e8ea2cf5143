package main

import (
	"slices"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/rivora/rivora/controlplane"
)

// --strict-event-types, or RIVORA_STRICT_EVENT_TYPES, reaches the control
// plane's config, on both commands that run a control plane.
func TestStrictEventTypesFlag(t *testing.T) {
	app := newApp()
	for _, name := range []string{"controlplane", "dev"} {
		cmd := app.Command(name)
		if cmd == nil || !slices.ContainsFunc(cmd.Flags, func(f cli.Flag) bool { return slices.Contains(f.Names(), "strict-event-types") }) {
			t.Errorf("rivora %s has no --strict-event-types", name)
		}
	}
	strict := func(env string, args ...string) bool {
		t.Helper()
		t.Setenv("RIVORA_STRICT_EVENT_TYPES", env)
		var cfg controlplane.Config
		probe := &cli.App{Flags: catalogueFlags(), Action: func(c *cli.Context) error { catalogueConfig(c, &cfg); return nil }}
		if err := probe.Run(append([]string{"probe"}, args...)); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return cfg.StrictEventTypes
	}
	if strict("") {
		t.Error("strict without the flag")
	}
	if !strict("", "--strict-event-types") {
		t.Error("--strict-event-types did not make it strict")
	}
	if !strict("true") {
		t.Error("RIVORA_STRICT_EVENT_TYPES=true did not make it strict")
	}
}
