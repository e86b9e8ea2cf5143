package controlplane

import (
	"fmt"
	"time"

	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/internal/limitbounds"
	"github.com/rivora/rivora/internal/rates"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// The bounds of every limit, the one set both the API (create, update,
// override) and the limits file are checked against (checkLimits). A field
// left unset (0, or no duration) is not checked: it inherits the layer
// below (limits file, then DefaultLimits).
const (
	MinRatePerSecond = rates.Min
	MaxRatePerSecond = rates.Max
	MaxBurst         = limitbounds.MaxBurst
	MaxAttemptsLimit = limitbounds.MaxAttempts
	MaxInFlightLimit = limitbounds.MaxInFlight
	MaxWindow        = 90 * 24 * time.Hour
	MinTimeout       = 100 * time.Millisecond
	MaxTimeout       = 5 * time.Minute
)

// checkLimits checks every field of l that is set; the error names the
// field and its bound (an ErrInvalid).
func checkLimits(l *rivorav1.Limits) error {
	for _, f := range limitFields {
		if err := checkLimit(l, f); err != nil {
			return err
		}
	}
	return nil
}

// limitBound says what values a field takes, for error messages.
func limitBound(field string) string {
	switch field {
	case "rate_per_second":
		return rates.Bound()
	case "burst":
		return fmt.Sprintf("a whole number from 1 to %d", MaxBurst)
	case "max_attempts":
		return fmt.Sprintf("a whole number from 1 to %d", MaxAttemptsLimit)
	case "max_in_flight":
		return fmt.Sprintf("a whole number from 1 to %d", MaxInFlightLimit)
	case "window":
		return fmt.Sprintf("a duration more than 0 and at most %s (90 days), such as 72h", MaxWindow)
	case "timeout":
		return fmt.Sprintf("a duration from %s to %s, such as 10s", MinTimeout, MaxTimeout)
	}
	return "unknown"
}

// checkLimit checks one field of l, if set. Negative numbers count as set
// (and are refused): only 0 means unset.
func checkLimit(l *rivorav1.Limits, field string) error {
	var ok bool
	var got string
	switch field {
	case "rate_per_second":
		r := l.GetRatePerSecond()
		// NaN and ±Inf fail too: NaN would lift every limit. So does a
		// rate under the floor (1e-300): its events would wait out
		// their window.
		ok, got = r == 0 || rates.Valid(r), fmt.Sprint(r)
	case "burst":
		ok, got = countOK(l.GetBurst(), MaxBurst), fmt.Sprint(l.GetBurst())
	case "max_attempts":
		ok, got = countOK(l.GetMaxAttempts(), MaxAttemptsLimit), fmt.Sprint(l.GetMaxAttempts())
	case "max_in_flight":
		ok, got = countOK(l.GetMaxInFlight(), MaxInFlightLimit), fmt.Sprint(l.GetMaxInFlight())
	case "window":
		w := l.GetWindow()
		ok = w == nil || (w.IsValid() && w.AsDuration() > 0 && w.AsDuration() <= MaxWindow)
		got = w.AsDuration().String()
	case "timeout":
		t := l.GetTimeout()
		ok = t == nil || (t.IsValid() && t.AsDuration() >= MinTimeout && t.AsDuration() <= MaxTimeout)
		got = t.AsDuration().String()
	default:
		ok = true
	}
	if !ok {
		bound := limitBound(field)
		err := errorf(ErrInvalid, "%s must be %s, got %s", field, bound, got)
		return errkind.WithInfo(err, errkind.InvalidLimitReason, map[string]string{"field": field, "bound": bound, "got": got})
	}
	return nil
}

func countOK(v, most int32) bool { return v == 0 || (v >= 1 && v <= most) }
