package history

import (
	"time"

	dto "github.com/prometheus/client_model/go"
)

// SetNow makes h write (and list) as if the time were now().
func SetNow(h *History, now func() time.Time) { h.now = now }

// Published is the count of messages (batches) h published.
func Published(h *History) uint64 { return h.w.published.Load() }

// Queued is the bytes of records h holds, not yet published.
func Queued(h *History) int64 { return h.w.queued.Load() }

// RecordErrors is rivora_history_record_errors_total.
func RecordErrors() float64 {
	var m dto.Metric
	if err := recordErrors.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
