package metrics

import "github.com/prometheus/client_golang/prometheus"

// outsideDesc is the memory the programs outside the batches use.
var outsideDesc = prometheus.NewDesc(prometheus.BuildFQName(namespace, "memory", "outside_batches_bytes"),
	"Memory used by programs outside the batches: capacity less available less the batches' measured usage.", nil, nil)

func newEvictions() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Name: "evictions_total",
		Help: "Batches made to yield their memory to programs outside the batches (memory pressure).",
	})
}

// ObserveEviction counts a batch evicted for memory pressure.
func (m *Metrics) ObserveEviction() { m.evictions.Inc() }
