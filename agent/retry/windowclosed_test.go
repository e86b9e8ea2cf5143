package retry_test

import (
	"testing"
	"time"

	"github.com/rivora/rivora/agent/retry"
)

// The events a window shortened to w ends at once (limits set --window):
// those accepted by WindowClosedBy, their paused time not counted.
func TestWindowClosedBy(t *testing.T) {
	now := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	cases := []struct {
		name   string
		pauses retry.Pauses
		want   time.Time
	}{
		{"never paused", nil, ago(time.Minute)},
		{"paused before", retry.Pauses{{Start: ago(10 * time.Minute), End: ago(5 * time.Minute)}}, ago(time.Minute)},
		// Paused for the last 3 minutes: an event 4 minutes old counts
		// 1 minute; one 3.5 minutes old, 30 s.
		{"paused now", retry.Pauses{{Start: ago(3 * time.Minute)}}, ago(4 * time.Minute)},
		{"paused twice", retry.Pauses{{Start: ago(10 * time.Minute), End: ago(8 * time.Minute)}, {Start: ago(30 * time.Second), End: ago(10 * time.Second)}}, ago(80 * time.Second)},
	}
	for _, c := range cases {
		got := retry.WindowClosedBy(time.Minute, now, c.pauses.Between)
		if !got.Equal(c.want) {
			t.Errorf("%s: closed by %s, want %s", c.name, now.Sub(got), now.Sub(c.want))
		}
		// Each side of it, as the owner decides (verdict: window end not
		// after now).
		p := retry.Policy{Window: time.Minute}
		for _, a := range []time.Time{got, got.Add(-time.Second), got.Add(time.Nanosecond), got.Add(time.Second)} {
			closed := !p.WindowEnd(a.Add(c.pauses.Between(a, now))).After(now)
			if closed != !a.After(got) {
				t.Errorf("%s: accepted %s ago: window closed %v, but WindowClosedBy says %v", c.name, now.Sub(a), closed, !a.After(got))
			}
		}
	}
	if got := retry.WindowClosedBy(0, now, retry.Pauses(nil).Between); !got.IsZero() {
		t.Errorf("no window: closed by %v, want zero", got)
	}
}
