package owner

import dto "github.com/prometheus/client_model/go"

// Settle applies a verdict as the delivery workers do (tests settle
// attempts whose result they make up).
var Settle = settle

// Reforwarded is rivora_edge_reforwarded_events_total: edges' events
// dropped as taken again.
func Reforwarded() float64 {
	var m dto.Metric
	if err := reforwardedTotal.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// Scan is the rebuild's read of a whole stream.
var Scan = scan
