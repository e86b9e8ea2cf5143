package owner

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

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
)

// ForgetDestinationMetrics deletes every series labelled with a deleted
// destination, so /metrics does not keep it until a restart.
func ForgetDestinationMetrics(destinationID string) {
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
