// Package durations reads the durations Rivora's flags take: Go's
// (90m, 36h) or whole days (7d), which Go's parser does not know.
package durations

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// maxDays bounds a count of days: 100 years, far below where the
// duration would overflow.
const maxDays = 100 * 365

// Parse reads a Go duration or a whole number of days ("7d", "-2d").
func Parse(v string) (time.Duration, error) {
	if d, err := time.ParseDuration(v); err == nil {
		return d, nil
	}
	days, found := strings.CutSuffix(v, "d")
	n, err := strconv.Atoi(days)
	switch {
	case !found || err != nil:
		return 0, errors.New("not a duration (90m, 36h) nor a number of days (7d)")
	case n > maxDays || n < -maxDays:
		return 0, errors.New("more than 100 years")
	}
	return time.Duration(n) * 24 * time.Hour, nil
}

// Short writes d as people write limits: "72h", "5m", "1m30s", not
// time.Duration's "72h0m0s" (the same as String otherwise).
func Short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
