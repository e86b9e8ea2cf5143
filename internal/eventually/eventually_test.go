package eventually

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestWithin(t *testing.T) {
	var n atomic.Int32
	if err := Within(time.Second, func() bool { return n.Add(1) >= 3 }); err != nil {
		t.Fatalf("Within: %v after %d polls, want nil", err, n.Load())
	}
	if err := Within(30*time.Millisecond, func() bool { return false }); err != ErrTimeout {
		t.Fatalf("Within on a condition that never holds = %v, want ErrTimeout", err)
	}
}
