package history

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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

// running holds the stop functions of the histories NewRunning started.
var running sync.Map // *History → func()

// NewRunning is New with Run started; the test's cleanup (or Stop) ends it.
func NewRunning(tb testing.TB, ctx context.Context, js jetstream.JetStream, cfg Config, log *slog.Logger) (*History, error) {
	h, err := New(ctx, js, cfg, log)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(runCtx) }()
	stop := func() { cancel(); <-done }
	running.Store(h, stop)
	tb.Cleanup(stop)
	return h, nil
}

// Stop ends the Run NewRunning started and waits for it (what Close did
// before the writer ran under its owner's context); twice is fine.
func Stop(h *History) {
	if stop, ok := running.Load(h); ok {
		stop.(func())()
	}
}

// LookupReads is rivora_history_lookup_subjects_total: the subjects
// lookups read through their index, and whole.
func LookupReads() (indexed, whole float64) {
	var m dto.Metric
	if err := readByIndex.Write(&m); err != nil {
		panic(err)
	}
	indexed = m.GetCounter().GetValue()
	if err := readWhole.Write(&m); err != nil {
		panic(err)
	}
	return indexed, m.GetCounter().GetValue()
}

// IsIndex reports whether a history message is an index.
func IsIndex(data []byte) bool { return isIndex(data) }
