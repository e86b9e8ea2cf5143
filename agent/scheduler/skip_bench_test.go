package scheduler

import (
	"errors"
	"runtime"
	"testing"
)

// BenchmarkTakeHeadRefused is a refused skip on a destination of 1M
// pending lanes of 16 customers: a lane key with nothing pending, and a
// lane named under a subscription that does not route it (the refusal
// names the lane published to the destination). TakeHead holds the
// scheduler's lock throughout, so its time is what every delivery of the
// partition waits for.
func BenchmarkTakeHeadRefused(b *testing.B) {
	s := bigScheduler(1_000_000)
	runtime.GC()
	b.Run("nothing-pending", func(b *testing.B) {
		id := lid("big", "c3", "no-such-lane")
		for b.Loop() {
			if _, err := s.TakeHead(id, ""); !errors.Is(err, ErrNoLane) {
				b.Fatal(err)
			}
		}
	})
	b.Run("other-subscription", func(b *testing.B) {
		id := lid("big", "c3", "lane-3")
		id.Subscription = "sub_1"
		for b.Loop() {
			var others *OtherSubscriptionsError
			if _, err := s.TakeHead(id, ""); !errors.As(err, &others) {
				b.Fatal(err)
			}
		}
	})
}
