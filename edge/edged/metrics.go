package edged

import (
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// current is the monitor the metrics read: the edge of this process (the
// last started, in a test that starts several).
var current atomic.Pointer[monitor]

// edgeCollector exports the monitor's last sample on each scrape.
type edgeCollector struct {
	events, bytes, maxBytes, connected, oldest, forwarded *prometheus.Desc
}

func newEdgeCollector() *edgeCollector {
	return &edgeCollector{
		events:    prometheus.NewDesc("rivora_edge_buffered_events", "Events this edge acknowledged that the cell has not taken yet (its buffer, EDGE_BUFFER).", nil, nil),
		bytes:     prometheus.NewDesc("rivora_edge_buffered_bytes", "Bytes of the events in the buffer: past --max-buffer, Publish is refused (resource_exhausted).", nil, nil),
		maxBytes:  prometheus.NewDesc("rivora_edge_max_buffer_bytes", "--max-buffer: the most bytes of unforwarded events this edge holds.", nil, nil),
		connected: prometheus.NewDesc("rivora_edge_cell_connected", "1 while the edge's leaf connection to the cell is up, else 0.", nil, nil),
		oldest:    prometheus.NewDesc("rivora_edge_oldest_unforwarded_seconds", "Age of the oldest event the cell has not taken yet (0 when none waits): past --buffer-max-age, Publish is refused.", nil, nil),
		forwarded: prometheus.NewDesc("rivora_edge_forwarded_total", "Events the cell has taken from this edge's buffer since the buffer was created.", nil, nil),
	}
}

func (c *edgeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.events, c.bytes, c.maxBytes, c.connected, c.oldest, c.forwarded} {
		ch <- d
	}
}

func (c *edgeCollector) Collect(ch chan<- prometheus.Metric) {
	m := current.Load()
	if m == nil {
		return
	}
	st := m.status()
	connected, oldest := 0.0, 0.0
	if st.CellConnected {
		connected = 1
	}
	if at := st.OldestUnforwarded(); !at.IsZero() {
		oldest = max(0, m.now().Sub(at).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(c.events, prometheus.GaugeValue, float64(st.Buffer.Events))
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(st.Buffer.Bytes))
	ch <- prometheus.MustNewConstMetric(c.maxBytes, prometheus.GaugeValue, float64(m.maxBuffer))
	ch <- prometheus.MustNewConstMetric(c.connected, prometheus.GaugeValue, connected)
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, oldest)
	ch <- prometheus.MustNewConstMetric(c.forwarded, prometheus.CounterValue, float64(st.Buffer.Forwarded()))
}

// registerMetrics makes m the monitor the metrics read, registering the
// collector once per process.
func registerMetrics(m *monitor) error {
	current.Store(m)
	err := prometheus.Register(newEdgeCollector())
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		return nil
	}
	return err
}
