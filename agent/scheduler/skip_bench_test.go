package scheduler

import (
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"
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

// BenchmarkLockWaitDuringRefusedSkips measures how long taking the
// scheduler's lock (as every delivery step does) waits while refused
// skips of a lane key the customer has routed elsewhere run, one a
// millisecond, on a destination of 1M pending lanes. (Back to back, the
// refusals' goroutine would take the lock again as soon as it let it go,
// and the waits measured would be the mutex's fairness, not the holds.)
func BenchmarkLockWaitDuringRefusedSkips(b *testing.B) {
	s := bigScheduler(1_000_000)
	runtime.GC()
	id := lid("big", "c3", "lane-3")
	id.Subscription = "sub_1"
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		refusals := 0
		for {
			select {
			case <-stop:
				done <- refusals
				return
			default:
			}
			if _, err := s.TakeHead(id, ""); !errors.Is(err, ErrNoLane) {
				panic(err)
			}
			refusals++
			time.Sleep(time.Millisecond)
		}
	}()
	var waits []time.Duration
	for b.Loop() {
		t0 := time.Now()
		s.Pending("big")
		waits = append(waits, time.Since(t0))
		time.Sleep(50 * time.Microsecond)
	}
	close(stop)
	refusals := <-done
	slices.Sort(waits)
	b.ReportMetric(float64(waits[len(waits)/2].Microseconds()), "µs-p50-wait")
	b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds()), "µs-p99-wait")
	b.ReportMetric(float64(waits[len(waits)-1].Microseconds()), "µs-max-wait")
	b.ReportMetric(float64(refusals), "refusals")
}
