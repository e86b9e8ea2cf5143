package agent

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rivora/rivora/agent/clock"
	"github.com/rivora/rivora/agent/limits"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/lanes"
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
	c := newDestinationCollector(s, func(string) bool { return true })
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

// A destination whose partition runs on another agent of the cell is not
// exported here: its idle defaults (the configured rate, healthy) hid the
// owner's throttled rate from a dashboard's max over the cell.
func TestOnlyOwnedDestinationsExported(t *testing.T) {
	s := scheduler.New(clock.NewManual(time.Unix(1_000_000, 0)))
	for _, id := range []string{"here", "elsewhere"} {
		s.SetLimits(id, 0, limits.Limits{RatePerSecond: 10, Burst: 10, MaxInFlight: 1})
	}
	ch := make(chan prometheus.Metric, 64)
	c := newDestinationCollector(s, func(id string) bool { return id == "here" })
	c.Collect(ch)
	close(ch)
	got := map[string]bool{}
	for m := range ch {
		var out dto.Metric
		if err := m.Write(&out); err != nil {
			t.Fatal(err)
		}
		for _, l := range out.GetLabel() {
			if l.GetName() == "destination" {
				got[l.GetValue()] = true
			}
		}
	}
	if !got["here"] || got["elsewhere"] {
		t.Fatalf("destinations exported: %v, want here's only", got)
	}
}

// A lane that waits shows in the oldest-pending and oldest-due gauges,
// not only in the console: rivora_lane_backlog counts a lane starved for
// minutes as one lane due, like one due for a millisecond.
func TestOldestPendingAndDueMetrics(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	s := scheduler.New(clk)
	for _, id := range []string{"stuck", "idle"} {
		s.SetLimits(id, 0, limits.Limits{RatePerSecond: 10, Burst: 10, MaxInFlight: 1})
	}
	lane := lanes.ID{Destination: "stuck", Customer: "acme", Key: "u1"}
	accepted := clk.Now().Add(-90 * time.Second)
	s.AppendAll(0, []scheduler.LaneAppend{{ID: lane, Subject: lane.Subject(0), Entries: []scheduler.Entry{
		{Seq: 1, EventID: "e1", AcceptedAt: accepted}, {Seq: 2, EventID: "e2", AcceptedAt: accepted.Add(time.Second)},
	}}})
	clk.Advance(30 * time.Second) // due since the append; nothing takes it
	ch := make(chan prometheus.Metric, 64)
	c := newDestinationCollector(s, func(string) bool { return true })
	c.Collect(ch)
	close(ch)
	got := map[string]map[string]float64{"pending": {}, "due": {}}
	for m := range ch {
		var kind string
		switch m.Desc() {
		case c.oldestPending:
			kind = "pending"
		case c.oldestDue:
			kind = "due"
		default:
			continue
		}
		var out dto.Metric
		if err := m.Write(&out); err != nil {
			t.Fatal(err)
		}
		got[kind][out.GetLabel()[0].GetValue()] = out.GetGauge().GetValue()
	}
	want := map[string]map[string]float64{"pending": {"stuck": 120, "idle": 0}, "due": {"stuck": 30, "idle": 0}}
	for kind, byDest := range want {
		for dest, v := range byDest {
			if g, ok := got[kind][dest]; !ok || g != v {
				t.Errorf("oldest %s seconds of %s = %v (exported: %v), want %v", kind, dest, g, ok, v)
			}
		}
	}
}
