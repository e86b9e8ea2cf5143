package agent

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rivora/rivora/agent/scheduler"
)

// destinationCollector exports the scheduler's per-destination state on
// each scrape (no bookkeeping on the delivery path), for the destinations
// whose partition runs on this agent: every agent of a cell knows every
// destination's limits, and another's would export its idle defaults (the
// configured rate, healthy, a full bucket), which a dashboard's max over
// the cell's agents took for the owner's throttled figures.
type destinationCollector struct {
	sched *scheduler.Scheduler
	owned func(destinationID string) bool

	rate, ceiling, learned, state, paused, inFlight, tokens, backlog *prometheus.Desc
	oldestPending, oldestDue                                         *prometheus.Desc
	workers, workersBusy                                             *prometheus.Desc
}

func newDestinationCollector(s *scheduler.Scheduler, owned func(destinationID string) bool) *destinationCollector {
	return &destinationCollector{
		sched:         s,
		owned:         owned,
		rate:          prometheus.NewDesc("rivora_destination_rate_per_second", "Current refill rate of the destination's budget (after AIMD).", []string{"destination"}, nil),
		ceiling:       prometheus.NewDesc("rivora_destination_configured_rate_per_second", "Configured rate of the destination's budget.", []string{"destination"}, nil),
		learned:       prometheus.NewDesc("rivora_destination_learned_rate_per_second", "The partner's ceiling as the budget learned it from throttling (the rate_per_second to configure); 0 when none is remembered.", []string{"destination"}, nil),
		state:         prometheus.NewDesc("rivora_destination_state", "Health state: 0 healthy, 1 degraded, 2 parked.", []string{"destination"}, nil),
		paused:        prometheus.NewDesc("rivora_destination_paused", "1 while no attempt goes out to the destination: paused by an operator, disabled by its partner's 410, or held as its config does not build on this agent (logged at error); its state says how it last answered, not that it is stopped; else 0.", []string{"destination"}, nil),
		inFlight:      prometheus.NewDesc("rivora_destination_in_flight", "Attempts in flight.", []string{"destination"}, nil),
		tokens:        prometheus.NewDesc("rivora_destination_tokens", "Tokens in the destination's bucket.", []string{"destination"}, nil),
		oldestPending: prometheus.NewDesc("rivora_destination_oldest_pending_seconds", "Age of the destination's oldest pending event (since it was accepted); 0 when none is pending.", []string{"destination"}, nil),
		oldestDue:     prometheus.NewDesc("rivora_destination_oldest_due_seconds", "How long the lane due the longest has been due without its head being sent (waiting for a token, an in-flight slot, a worker or its customer's turn); 0 when no lane is due.", []string{"destination"}, nil),
		backlog:       prometheus.NewDesc("rivora_lane_backlog", "Pending events by destination, customer and lane state (due, waiting, in_flight: lanes; pending: events).", []string{"destination", "customer", "kind"}, nil),
		workers:       prometheus.NewDesc("rivora_delivery_workers", "Delivery workers (--workers), shared by every destination.", nil, nil),
		workersBusy:   prometheus.NewDesc("rivora_delivery_workers_busy", "Delivery workers holding an attempt. From --workers minus an eighth on, only destinations with nothing in flight get one.", nil, nil),
	}
}

func (c *destinationCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.rate, c.ceiling, c.learned, c.state, c.paused, c.inFlight, c.tokens, c.oldestPending, c.oldestDue, c.backlog, c.workers, c.workersBusy} {
		ch <- d
	}
}

func (c *destinationCollector) Collect(ch chan<- prometheus.Metric) {
	workers, busy := c.sched.Workers()
	ch <- prometheus.MustNewConstMetric(c.workers, prometheus.GaugeValue, float64(workers))
	ch <- prometheus.MustNewConstMetric(c.workersBusy, prometheus.GaugeValue, float64(busy))
	for _, s := range c.sched.Snapshot("") {
		if !c.owned(s.ID) {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.rate, prometheus.GaugeValue, s.CurrentRate, s.ID)
		ch <- prometheus.MustNewConstMetric(c.ceiling, prometheus.GaugeValue, s.ConfiguredRate, s.ID)
		ch <- prometheus.MustNewConstMetric(c.learned, prometheus.GaugeValue, s.LearnedRate, s.ID)
		ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, float64(s.State), s.ID)
		paused := 0.0
		if s.Paused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, paused, s.ID)
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(s.InFlight), s.ID)
		ch <- prometheus.MustNewConstMetric(c.tokens, prometheus.GaugeValue, s.Tokens, s.ID)
		ch <- prometheus.MustNewConstMetric(c.oldestPending, prometheus.GaugeValue, age(s.At, s.OldestPending), s.ID)
		ch <- prometheus.MustNewConstMetric(c.oldestDue, prometheus.GaugeValue, age(s.At, s.OldestDue), s.ID)
		for _, cu := range s.Customers {
			ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(cu.DueLanes), s.ID, cu.ID, "due")
			ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(cu.WaitingLanes), s.ID, cu.ID, "waiting")
			ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(cu.InFlight), s.ID, cu.ID, "in_flight")
			ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(cu.Pending), s.ID, cu.ID, "pending")
		}
	}
}

// age is the seconds from since to now; 0 for a zero since (nothing
// pending or due).
func age(now, since time.Time) float64 {
	if since.IsZero() {
		return 0
	}
	return max(now.Sub(since).Seconds(), 0)
}

// registerMetrics registers the collector once per process.
func registerMetrics(s *scheduler.Scheduler, owned func(destinationID string) bool) error {
	err := prometheus.Register(newDestinationCollector(s, owned))
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		return nil
	}
	return err
}
