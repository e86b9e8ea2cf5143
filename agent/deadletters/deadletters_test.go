package deadletters

import (
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/archive"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func TestHourPrefixes(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	got := hourPrefixes("orders", now.Add(-90*time.Minute), now)
	want := []string{"deadletter/orders/2026/12/01/08/", "deadletter/orders/2026/12/01/09/", "deadletter/orders/2026/12/01/10/"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("hourPrefixes = %v, want %v", got, want)
	}
	// Each prefix matches exactly the keys archive.Key gives for its hour.
	for i, h := range []time.Time{now.Add(-time.Hour), now, now.Add(time.Hour)} {
		if k := archive.Key("orders", h, 3, 1, 2); !strings.HasPrefix(k, got[i]) {
			t.Errorf("key %s does not start with %s", k, got[i])
		}
	}
	if p := hourPrefixes("orders", now.Add(-maxHourLists*time.Hour), now); p != nil {
		t.Errorf("a since %d hours back listed %d hours, want the whole prefix (nil)", maxHourLists, len(p))
	}
}

func TestMatchesReason(t *testing.T) {
	dl := &rivorav1.DeadLetter{Event: &rivorav1.Event{DestinationId: "orders"}, Reason: rivorav1.DeadReason_DEAD_REASON_WINDOW}
	for reason, want := range map[rivorav1.DeadReason]bool{
		rivorav1.DeadReason_DEAD_REASON_UNSPECIFIED:  true,
		rivorav1.DeadReason_DEAD_REASON_WINDOW:       true,
		rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS: false,
		rivorav1.DeadReason_DEAD_REASON_MANUAL:       false,
	} {
		if got := matches(&rivorav1.DeadLetterFilter{DestinationId: "orders", Reason: reason}, dl); got != want {
			t.Errorf("a window dead letter matches reason %v: %v, want %v", reason, got, want)
		}
	}
}
