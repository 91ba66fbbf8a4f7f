// Package metrics exposes the controller's Prometheus metrics: budgets,
// reservations, decisions, tasks by phase, batches, status writes and
// get's listings, the accounts' fair share (WatchAccounts, the account
// label bounded by MaxAccountLabels). It owns the registry; it reads the
// governor only through BudgetSource and the accounts through the function
// WatchAccounts is given, at scrape time, and never touches files or
// processes.
package metrics

import (
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

const namespace = "lardon3d"

// Metrics holds the controller's collectors.
type Metrics struct {
	registry      *prometheus.Registry
	decisions     *prometheus.CounterVec
	tasks         *prometheus.GaugeVec
	batchDuration *prometheus.HistogramVec
	batchPeak     *prometheus.HistogramVec
	statusWrites  *prometheus.HistogramVec
	listings      *prometheus.HistogramVec
	refused       *prometheus.CounterVec
	evictions     prometheus.Counter
	ready         atomic.Bool
}

// New registers every collector; budgets are read from src at scrape time.
func New(src BudgetSource) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "governor_decisions_total",
			Help: "Governor decisions taken for the queue, by verdict and reason.",
		}, []string{"verdict", "reason"}),
		tasks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "tasks",
			Help: "Tasks known to the controller, by phase.",
		}, []string{"phase"}),
		batchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "batch_duration_seconds",
			Help:    "Duration of finished batches, by task class.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 12),
		}, []string{"class"}),
		batchPeak: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "batch_peak_memory_bytes",
			Help:    "Peak resident memory of finished batches' process groups, by task class.",
			Buckets: prometheus.ExponentialBuckets(16<<20, 2, 12),
		}, []string{"class"}),
		statusWrites: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "status_write_duration_seconds",
			Help:    "Latency of status write-backs into manifests, by result.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"result"}),
		listings: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "get_listing_duration_seconds",
			Help:    "Time taken to answer get's listings asked on the controller's socket, by result (served, or declined: get read the spool itself).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}, []string{"result"}),
	}
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "phase_transitions_refused_total",
		Help: "Phase transitions the phase table forbids, refused by the controller (each one is a bug).",
	}, []string{"from", "to"})
	m.registry.MustRegister(m.refused)
	m.evictions = newEvictions()
	m.registry.MustRegister(m.evictions)
	m.registry.MustRegister(m.decisions, m.tasks, m.batchDuration, m.batchPeak, m.statusWrites, m.listings,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if src != nil {
		m.registry.MustRegister(newBudgetCollector(src))
	}
	return m
}

// ObserveDecision counts a governor decision.
func (m *Metrics) ObserveDecision(d governor.Decision) {
	m.decisions.WithLabelValues(d.Verdict.String(), string(d.Reason)).Inc()
}

// ObserveBatch records a finished batch.
func (m *Metrics) ObserveBatch(class string, d time.Duration, peakBytes int64) {
	m.batchDuration.WithLabelValues(class).Observe(d.Seconds())
	if peakBytes > 0 {
		m.batchPeak.WithLabelValues(class).Observe(float64(peakBytes))
	}
}

// ObserveStatusWrite records one status write's latency.
func (m *Metrics) ObserveStatusWrite(d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.statusWrites.WithLabelValues(result).Observe(d.Seconds())
}

// ObserveListing records how long a listing asked of the controller took
// to answer, and whether it was served.
func (m *Metrics) ObserveListing(d time.Duration, served bool) {
	result := "served"
	if !served {
		result = "declined"
	}
	m.listings.WithLabelValues(result).Observe(d.Seconds())
}

// ObservePhaseRefused counts a forbidden phase transition.
func (m *Metrics) ObservePhaseRefused(from, to v1alpha1.Phase) {
	m.refused.WithLabelValues(string(from), string(to)).Inc()
}

// SetPhases replaces the count of tasks per phase.
func (m *Metrics) SetPhases(counts map[v1alpha1.Phase]int) {
	for _, p := range v1alpha1.Phases {
		m.tasks.WithLabelValues(string(p)).Set(float64(counts[p]))
	}
}

// SetReady marks the controller ready (the spool was listed once).
func (m *Metrics) SetReady(ready bool) { m.ready.Store(ready) }

// Handler serves /metrics, /healthz, /readyz and, with withPprof, the Go
// profiler under /debug/pprof/ (asked for with --pprof: it exposes the
// process's internals).
func (m *Metrics) Handler(withPprof bool) http.Handler {
	mux := http.NewServeMux()
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !m.ready.Load() {
			http.Error(w, "spool not listed yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// BudgetSource gives the governor's budgets at scrape time.
type BudgetSource interface {
	Budgets() governor.BudgetsView
}

// budgetCollector reads the governor's budgets when scraped.
type budgetCollector struct {
	src          BudgetSource
	capacity     *prometheus.Desc
	margin       *prometheus.Desc
	reserved     *prometheus.Desc
	free         *prometheus.Desc
	reservations *prometheus.Desc
	generation   *prometheus.Desc
	deferred     *prometheus.Desc
}

func newBudgetCollector(src BudgetSource) *budgetCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "budget", name), help, labels, nil)
	}
	return &budgetCollector{
		src:          src,
		capacity:     d("capacity", "Capacity of each budget, in its unit (bytes, threads or slots).", "resource"),
		margin:       d("margin", "Margin kept free of reservations, per budget.", "resource"),
		reserved:     d("reserved", "Amount held by active reservations, per budget.", "resource"),
		free:         d("free", "Amount still grantable, per budget.", "resource"),
		reservations: prometheus.NewDesc(prometheus.BuildFQName(namespace, "governor", "active_reservations"), "Active reservations.", nil, nil),
		generation:   prometheus.NewDesc(prometheus.BuildFQName(namespace, "governor", "generation"), "Generation of the hardware registry.", nil, nil),
		deferred:     prometheus.NewDesc(prometheus.BuildFQName(namespace, "governor", "admission_deferred"), "1 while a signal defers new admissions, by signal.", []string{"signal"}, nil),
	}
}

// Describe sends every descriptor.
func (c *budgetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.capacity, c.margin, c.reserved, c.free, c.reservations, c.generation, c.deferred, outsideDesc} {
		ch <- d
	}
}

// Collect reads the budgets once and sends their values.
func (c *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.src.Budgets()
	send := func(name string, b governor.BudgetState) {
		ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(b.Capacity), name)
		ch <- prometheus.MustNewConstMetric(c.margin, prometheus.GaugeValue, float64(b.Margin), name)
		ch <- prometheus.MustNewConstMetric(c.reserved, prometheus.GaugeValue, float64(b.Reserved), name)
		ch <- prometheus.MustNewConstMetric(c.free, prometheus.GaugeValue, float64(b.Free), name)
	}
	send("memory", v.Memory)
	send("cpu", v.CPU)
	send("io_slots", v.IOSlots)
	send("gpu_slots", v.GPUSlots)
	for _, g := range v.GPUs {
		if g.Known && !g.Unified {
			send("gpu_memory:"+g.ID, g.Memory)
		}
	}
	for _, s := range v.Scratch {
		send("scratch:"+s.Path, s.Bytes)
	}
	ch <- prometheus.MustNewConstMetric(c.reservations, prometheus.GaugeValue, float64(v.Reservations))
	ch <- prometheus.MustNewConstMetric(c.generation, prometheus.GaugeValue, float64(v.Generation))
	ch <- prometheus.MustNewConstMetric(c.deferred, prometheus.GaugeValue, boolGauge(v.LoadDeferred), "load")
	ch <- prometheus.MustNewConstMetric(c.deferred, prometheus.GaugeValue, boolGauge(v.IODeferred), "io_pressure")
	ch <- prometheus.MustNewConstMetric(c.deferred, prometheus.GaugeValue, boolGauge(v.Pressure.Level != governor.PressureNone), "memory_pressure")
	ch <- prometheus.MustNewConstMetric(outsideDesc, prometheus.GaugeValue, float64(v.Pressure.Outside))
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
