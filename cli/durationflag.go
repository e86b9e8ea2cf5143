package cli

import (
	"errors"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/rivora/rivora/internal/durations"
)

// durationValue is a duration flag's value: a Go duration (30s, 5m, 72h)
// or whole days (7d), as --ttl of tokens create and --since take them, so
// that every duration flag reads the same.
type durationValue struct{ d time.Duration }

func (v *durationValue) Set(s string) error {
	d, err := durations.Parse(s)
	if err != nil {
		return errors.New("not a duration: use a number with a unit, such as 30s, 5m, 72h or 7d")
	}
	v.d = d
	return nil
}

func (v *durationValue) String() string {
	if v == nil {
		return ""
	}
	return durations.Short(v.d)
}

// durationFlagOf is a duration flag (durationValue) defaulting to def.
func durationFlagOf(name, usage string, def time.Duration, defaultText string) *ucli.GenericFlag {
	return &ucli.GenericFlag{Name: name, Usage: usage, Value: &durationValue{d: def}, DefaultText: defaultText}
}

// flagDuration is a duration flag's value (its default when not set).
func flagDuration(c *ucli.Context, name string) time.Duration {
	if v, ok := c.Generic(name).(*durationValue); ok && v != nil {
		return v.d
	}
	return 0
}
