package backoff

import (
	"context"
	"testing"
	"time"
)

func TestNextDoublesToMaxAndResets(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: 500 * time.Millisecond}
	want := []time.Duration{100, 200, 400, 500, 500}
	for i, w := range want {
		if got := b.Next(); got != w*time.Millisecond {
			t.Fatalf("wait %d = %s, want %s", i, got, w*time.Millisecond)
		}
	}
	b.Reset()
	if got := b.Next(); got != 100*time.Millisecond {
		t.Fatalf("after Reset: %s, want 100ms", got)
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep reported a full wait on a cancelled context")
	}
	if !Sleep(context.Background(), time.Microsecond) {
		t.Fatal("Sleep reported an interrupted wait without a cancel")
	}
}
