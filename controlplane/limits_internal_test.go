package controlplane

import (
	"testing"
	"time"
)

// Durations in limits diff read as limits get writes them.
func TestCompactDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{72 * time.Hour: "72h", 5 * time.Minute: "5m", 90 * time.Second: "1m30s", 10 * time.Second: "10s", time.Hour + 30*time.Second: "1h0m30s", 1500 * time.Millisecond: "1.5s", 0: "0s"} {
		if got := compactDuration(d); got != want {
			t.Errorf("compactDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
