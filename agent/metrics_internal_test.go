package agent

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/limits"
	"github.com/rivora/rivora/agent/scheduler"
)

// A paused destination is exported as paused, whatever its health state
// (healthy, until it answers otherwise): a dashboard tells a stopped
// destination from one that delivers.
func TestPausedDestinationMetric(t *testing.T) {
	s := scheduler.New(clock.NewManual(time.Unix(1_000_000, 0)))
	for _, id := range []string{"running", "stopped"} {
		s.SetLimits(id, 0, limits.Limits{RatePerSecond: 10, Burst: 10, MaxInFlight: 1})
	}
	s.SetPaused("stopped", 0, true)
	ch := make(chan prometheus.Metric, 64)
	c := newDestinationCollector(s)
	c.Collect(ch)
	close(ch)
	got := map[string]float64{}
	for m := range ch {
		if m.Desc() != c.paused {
			continue
		}
		var out dto.Metric
		if err := m.Write(&out); err != nil {
			t.Fatal(err)
		}
		got[out.GetLabel()[0].GetValue()] = out.GetGauge().GetValue()
	}
	if got["running"] != 0 || got["stopped"] != 1 || len(got) != 2 {
		t.Fatalf("rivora_destination_paused = %v, want running 0, stopped 1", got)
	}
}
