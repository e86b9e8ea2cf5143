package rates_test

import (
	"math"
	"testing"

	"github.com/rivora/rivora/internal/rates"
)

func TestValidAndClamp(t *testing.T) {
	for _, c := range []struct {
		r     float64
		valid bool
		clamp float64
	}{
		{0.001, true, 0.001}, {1e6, true, 1e6}, {50, true, 50},
		{0.000999, false, 0.001}, {1e-300, false, 0.001}, {5e-324, false, 0.001}, {0, false, 0.001}, {-1, false, 0.001},
		{math.NaN(), false, 0.001}, {math.Inf(1), false, 1e6}, {math.Inf(-1), false, 0.001}, {1e6 + 1, false, 1e6},
	} {
		if got := rates.Valid(c.r); got != c.valid {
			t.Errorf("Valid(%v) = %v, want %v", c.r, got, c.valid)
		}
		if got := rates.Clamp(c.r); got != c.clamp {
			t.Errorf("Clamp(%v) = %v, want %v", c.r, got, c.clamp)
		}
	}
}
