package owner

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/agent/destinations"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

var (
	attemptsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rivora_delivery_attempts_total",
		Help: "Delivery attempts by destination and outcome class (2xx, 3xx, 4xx, 5xx, error).",
	}, []string{"destination", "class"})
	throttledTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rivora_delivery_throttled_total",
		Help: "Delivery attempts the partner answered 429 Too Many Requests, by destination (also counted in rivora_delivery_attempts_total as 4xx).",
	}, []string{"destination"})
	attemptSeconds = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rivora_delivery_attempt_duration_seconds",
		Help:    "How long delivery attempts took, from sending the request to the partner's answer (or the error), by destination.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"destination"})
	deadTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "rivora_deadletters_total",
		Help: "Events that became dead letters, by destination and reason.",
	}, []string{"destination", "reason"})
	archivedTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rivora_deadletters_archived_total",
		Help: "Dead letters written to the archive.",
	})
	unarchived = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "rivora_deadletters_unarchived",
		Help: "Dead letters held in the ledgers, waiting for the archive.",
	})
	reforwardedTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rivora_edge_reforwarded_events_total",
		Help: "Edges' events the cell took again (forwarded anew after a cell restart) and dropped, for they were stored already.",
	})
	movedTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rivora_lanes_moved_events_total",
		Help: "Events moved from INGEST into lanes.",
	})
	moverStallsTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rivora_lanes_mover_stalls_total",
		Help: "Partition restarts because the mover took nothing from INGEST while INGEST held events for it (its consumer stopped, or it went quiet for the mover stall timeout).",
	})
	moverSkipsTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "rivora_lanes_mover_skips_total",
		Help: "Partition restarts because INGEST's consumer skipped an event of the partition: it handed over a later one while the earlier one waited in INGEST.",
	})
)

// ForgetDestinationMetrics deletes every series labelled with a deleted
// destination, so /metrics does not keep it until a restart.
func ForgetDestinationMetrics(destinationID string) {
	attemptMetricsOf.Delete(destinationID)
	labels := prometheus.Labels{"destination": destinationID}
	attemptsTotal.DeletePartialMatch(labels)
	throttledTotal.DeletePartialMatch(labels)
	attemptSeconds.DeletePartialMatch(labels)
	deadTotal.DeletePartialMatch(labels)
}

func reasonLabel(r rivorav1.DeadReason) string {
	switch r {
	case rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS:
		return "max_attempts"
	case rivorav1.DeadReason_DEAD_REASON_WINDOW:
		return "window"
	case rivorav1.DeadReason_DEAD_REASON_DELETED:
		return "deleted"
	case rivorav1.DeadReason_DEAD_REASON_IDEMPOTENCY_CONFLICT:
		return "idempotency_conflict"
	default:
		return "manual"
	}
}

// attemptMetrics are one destination's series an attempt updates, each
// looked up by its label values once (on its first use, so that a series
// appears when it counts something, as before) rather than on every
// attempt.
type attemptMetrics struct {
	// dest is the destination they were looked up for: a destination
	// deleted and made again is another, whose series
	// ForgetDestinationMetrics deleted in between.
	dest      *destinations.Destination
	seconds   prometheus.Observer
	byClass   [len(delivery.StatusClasses)]lazyCounter
	throttled lazyCounter
}

// lazyCounter is a series looked up on its first use.
type lazyCounter struct {
	once sync.Once
	c    prometheus.Counter
}

func (l *lazyCounter) inc(vec *prometheus.CounterVec, labels ...string) {
	l.once.Do(func() { l.c = vec.WithLabelValues(labels...) })
	l.c.Inc()
}

// attemptMetricsOf holds an *attemptMetrics by destination id.
var attemptMetricsOf sync.Map

// metricsFor returns dest's attempt series.
func metricsFor(dest *destinations.Destination) *attemptMetrics {
	if m, ok := attemptMetricsOf.Load(dest.ID); ok && m.(*attemptMetrics).dest == dest {
		return m.(*attemptMetrics)
	}
	m := &attemptMetrics{dest: dest, seconds: attemptSeconds.WithLabelValues(dest.ID)}
	attemptMetricsOf.Store(dest.ID, m)
	return m
}

// count counts one attempt's result.
func (m *attemptMetrics) count(res delivery.Result) {
	class := res.ClassIndex()
	m.byClass[class].inc(attemptsTotal, m.dest.ID, delivery.StatusClasses[class])
	m.seconds.Observe(res.Duration.Seconds())
	if res.Status == http.StatusTooManyRequests {
		m.throttled.inc(throttledTotal, m.dest.ID)
	}
}
