package poll

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	ctx := context.Background()
	n := 0
	if err := Until(ctx, time.Second, time.Millisecond, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("Until = %v after %d checks, want nil after 3", err, n)
	}

	last := errors.New("still not")
	var te *TimeoutError
	if err := Until(ctx, 20*time.Millisecond, time.Millisecond, func() error { return last }); !errors.As(err, &te) || te.Last != last {
		t.Fatalf("Until past its limit = %v, want a TimeoutError with the last check error", err)
	}

	fatal := errors.New("cannot get better")
	calls := 0
	if err := Until(ctx, time.Second, time.Millisecond, func() error { calls++; return GiveUp(fatal) }); err != fatal || calls != 1 {
		t.Fatalf("Until with GiveUp = %v after %d checks, want the given-up error after 1", err, calls)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := Until(cctx, 0, time.Millisecond, func() error { return last }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Until on a cancelled context = %v, want context.Canceled", err)
	}
}

func TestCheck(t *testing.T) {
	last := errors.New("still not")
	if err := Check(0, time.Millisecond, func() error { return last }); err != last {
		t.Fatalf("Check with no time left = %v, want the check's error", err)
	}
	if err := Check(time.Second, time.Millisecond, func() error { return nil }); err != nil {
		t.Fatalf("Check = %v, want nil", err)
	}
}

func TestWithin(t *testing.T) {
	var n atomic.Int32
	if err := Within(time.Second, func() bool { return n.Add(1) >= 3 }); err != nil {
		t.Fatalf("Within: %v after %d polls, want nil", err, n.Load())
	}
	if err := Within(30*time.Millisecond, func() bool { return false }); err != ErrTimeout {
		t.Fatalf("Within on a condition that never holds = %v, want ErrTimeout", err)
	}
}
