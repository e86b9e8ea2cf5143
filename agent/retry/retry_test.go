package retry_test

import (
	"testing"
	"time"

	"github.com/rivora/rivora/agent/retry"
)

func TestBackoffDoublesAndCaps(t *testing.T) {
	p := retry.Policy{Base: time.Second, Cap: 10 * time.Second}
	want := []time.Duration{1, 2, 4, 8, 10, 10}
	for i, w := range want {
		if got := p.Backoff(i + 1); got != w*time.Second {
			t.Fatalf("Backoff(%d) = %s, want %s", i+1, got, w*time.Second)
		}
	}
	if got := retry.DefaultPolicy().Backoff(100); got != time.Hour {
		t.Fatalf("Backoff(100) = %s, want the 1h cap", got)
	}
}

func TestJitteredStaysInRange(t *testing.T) {
	for range 1000 {
		d := retry.Jittered(8 * time.Second)
		if d < 4*time.Second || d > 8*time.Second {
			t.Fatalf("Jittered(8s) = %s, outside [4s, 8s]", d)
		}
	}
}

func TestNext(t *testing.T) {
	p := retry.Policy{Base: time.Second, Cap: time.Hour, MaxAttempts: 3, Window: time.Minute}
	accepted := time.Unix(1000, 0)
	now := accepted.Add(10 * time.Second)
	if d := p.Next(1, accepted, now, 2*time.Second); d.Verdict != retry.Retry || !d.NotBefore.Equal(now.Add(2*time.Second)) {
		t.Fatalf("Next(1) = %+v", d)
	}
	if d := p.Next(3, accepted, now, time.Second); d.Verdict != retry.ExhaustedAttempts {
		t.Fatalf("Next(3) with max 3 = %+v, want ExhaustedAttempts", d)
	}
	if d := p.Next(1, accepted, accepted.Add(59*time.Second), 2*time.Second); d.Verdict != retry.ExhaustedWindow {
		t.Fatalf("retry past the window = %+v, want ExhaustedWindow", d)
	}
}

// Hold (a failure not charged to the event): the event waits, at most until
// its window end, and only a closed window ends it — never earlier, whatever
// the attempts.
func TestHold(t *testing.T) {
	p := retry.Policy{Base: time.Second, Cap: time.Hour, MaxAttempts: 3, Window: time.Minute}
	start := time.Unix(1000, 0)
	end := start.Add(time.Minute)
	if got := p.WindowEnd(start); !got.Equal(end) {
		t.Fatalf("WindowEnd = %s, want %s", got, end)
	}
	now := start.Add(10 * time.Second)
	if d := p.Hold(start, now, 2*time.Second); d.Verdict != retry.Retry || !d.NotBefore.Equal(now.Add(2*time.Second)) {
		t.Fatalf("Hold 10 s into the window = %+v, want a retry 2 s later", d)
	}
	// Where Next would already give up (the next retry falls past the
	// window), Hold waits until the window end.
	late := start.Add(59 * time.Second)
	if d := p.Next(1, start, late, 2*time.Second); d.Verdict != retry.ExhaustedWindow {
		t.Fatalf("Next 59 s in = %+v, want ExhaustedWindow", d)
	}
	if d := p.Hold(start, late, 2*time.Second); d.Verdict != retry.Retry || !d.NotBefore.Equal(end) {
		t.Fatalf("Hold 59 s in = %+v, want a retry at the window end %s", d, end)
	}
	if d := p.Hold(start, end.Add(-time.Nanosecond), time.Second); d.Verdict != retry.Retry {
		t.Fatalf("Hold just before the window end = %+v, want Retry", d)
	}
	if d := p.Hold(start, end, time.Second); d.Verdict != retry.ExhaustedWindow {
		t.Fatalf("Hold at the window end = %+v, want ExhaustedWindow", d)
	}
	if d := (retry.Policy{Base: time.Second}).Hold(start, end.Add(time.Hour), time.Second); d.Verdict != retry.Retry {
		t.Fatalf("Hold without a window = %+v, want Retry", d)
	}
}

// LastResume is the last interval's end, whatever the clocks said: a
// leader whose clock is behind an earlier one's still records a new
// resume there. A pause that lasts has none.
func TestLastResume(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 6, 0, 0, 0, time.UTC)
	ps := retry.Pauses{{Start: t0, End: t0.Add(time.Hour)}, {Start: t0.Add(2 * time.Hour), End: t0.Add(30 * time.Minute)}}
	if got := ps.LastResume(); !got.Equal(t0.Add(30 * time.Minute)) {
		t.Errorf("LastResume = %v, want the last interval's end", got)
	}
	ps = append(ps, retry.Pause{Start: t0.Add(3 * time.Hour)})
	if got := ps.LastResume(); !got.IsZero() {
		t.Errorf("LastResume while paused = %v, want zero", got)
	}
	if got := (retry.Pauses{}).LastResume(); !got.IsZero() {
		t.Errorf("LastResume of none = %v", got)
	}
}
