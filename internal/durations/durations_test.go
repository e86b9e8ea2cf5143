package durations

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for v, want := range map[string]time.Duration{"90m": 90 * time.Minute, "36h": 36 * time.Hour, "7d": 7 * 24 * time.Hour, "0d": 0, "-2d": -48 * time.Hour, "1h30m": 90 * time.Minute} {
		if got, err := Parse(v); err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"", "d", "7", "1.5d", "7 d", "7days", "36501d", "abc"} {
		if got, err := Parse(v); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", v, got)
		}
	}
}

// Short: limits diff and limits get write durations alike.
func TestShort(t *testing.T) {
	for d, want := range map[time.Duration]string{72 * time.Hour: "72h", 5 * time.Minute: "5m", 90 * time.Second: "1m30s", 10 * time.Second: "10s", time.Hour + 30*time.Second: "1h0m30s", 1500 * time.Millisecond: "1.5s", 0: "0s"} {
		if got := Short(d); got != want {
			t.Errorf("Short(%v) = %q, want %q", d, got, want)
		}
	}
}
