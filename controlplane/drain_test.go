package controlplane

import (
	"testing"
	"time"
)

func TestDrainTime(t *testing.T) {
	for _, tc := range []struct {
		pending int64
		rate    float64
		want    time.Duration
		never   bool
	}{
		{pending: 0, rate: 0, want: 0},
		{pending: 0, rate: 5, want: 0},
		{pending: 20, rate: 2, want: 10 * time.Second},
		{pending: 20, rate: 8, want: 2500 * time.Millisecond},
		{pending: 1, rate: 3, want: 333 * time.Millisecond},
		{pending: 10, rate: 0, never: true},
		{pending: 10, rate: -1, never: true},
		{pending: 1_000_000, rate: 1e-9, never: true}, // over a century
	} {
		got := drainTime(tc.pending, tc.rate)
		switch {
		case tc.never && got != nil:
			t.Errorf("drainTime(%d, %v) = %v; want unset (never drains)", tc.pending, tc.rate, got.AsDuration())
		case !tc.never && (got == nil || got.AsDuration() != tc.want):
			t.Errorf("drainTime(%d, %v) = %v; want %v", tc.pending, tc.rate, got, tc.want)
		}
	}
}
