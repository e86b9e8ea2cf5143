package edged

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/agent/subscriptions"
)

// newRegistry is the edge's own metrics registry: its buffer and link,
// ingest's, the store's group commit, process and Go. The default
// registry also holds the cell's series (lanes, dead letters, history,
// edge sources), registered by packages the edge links but does not run:
// always 0 here, they would mislead a sum over every target.
func newRegistry(m *monitor) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	all := []prometheus.Collector{
		newEdgeCollector(m),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
	}
	all = append(all, ingest.Collectors()...)
	all = append(all, subscriptions.Collectors()...)
	all = append(all, natsd.Collectors()...)
	for _, c := range all {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// Metrics serves the edge's /metrics, from its own registry.
func (e *Edge) Metrics() http.Handler {
	return promhttp.InstrumentMetricHandler(e.metrics, promhttp.HandlerFor(e.metrics, promhttp.HandlerOpts{Registry: e.metrics}))
}

// edgeCollector exports the monitor's last sample on each scrape.
type edgeCollector struct {
	m                                                     *monitor
	events, bytes, maxBytes, connected, oldest, forwarded *prometheus.Desc
}

func newEdgeCollector(m *monitor) *edgeCollector {
	return &edgeCollector{
		m:         m,
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
	m := c.m
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
