package deadletters

import (
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/archive"
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
