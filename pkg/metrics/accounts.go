package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// AccountSample is one account's standing (fair share), at scrape time.
type AccountSample struct {
	// Account names it: a spool's owner or a configured account.
	Account string
	// Usage is its decayed reserved memory·time (byte·seconds);
	// UsageFraction and ShareFraction its parts among the accounts with
	// work.
	Usage, UsageFraction, ShareFraction float64
	// MemoryBytes is reserved for its tasks now.
	MemoryBytes int64
	// Running and Pending count its tasks.
	Running, Pending int
}

// MaxAccountLabels bounds the account label's values: accounts are the
// served spools' owners and the configured ones, few on a machine; past
// this many (in name order), the rest are summed as account="(other)".
const MaxAccountLabels = 32

// WatchAccounts exports the accounts' standings, read from src at scrape
// time: lardon3d_account_usage_byte_seconds, _usage_fraction,
// _share_fraction, _reserved_memory_bytes, _tasks{state}.
func (m *Metrics) WatchAccounts(src func() []AccountSample) {
	m.registry.MustRegister(newAccountCollector(src))
}

type accountCollector struct {
	src                                     func() []AccountSample
	usage, usageFrac, shareFrac, mem, tasks *prometheus.Desc
}

func newAccountCollector(src func() []AccountSample) *accountCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "account", name), help, append([]string{"account"}, labels...), nil)
	}
	return &accountCollector{
		src:       src,
		usage:     d("usage_byte_seconds", "Decayed reserved memory × time of the account's tasks (fair share)."),
		usageFrac: d("usage_fraction", "The account's part of the usage of the accounts with work."),
		shareFrac: d("share_fraction", "The account's part of the shares of the accounts with work."),
		mem:       d("reserved_memory_bytes", "Memory reserved for the account's tasks now."),
		tasks:     d("tasks", "The account's tasks holding a worker (running) or pending.", "state"),
	}
}

// Describe sends every descriptor.
func (c *accountCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.usage, c.usageFrac, c.shareFrac, c.mem, c.tasks} {
		ch <- d
	}
}

// Collect reads the standings once and sends them, the label bounded.
func (c *accountCollector) Collect(ch chan<- prometheus.Metric) {
	samples := slices.Clone(c.src())
	slices.SortFunc(samples, func(a, b AccountSample) int {
		switch {
		case a.Account < b.Account:
			return -1
		case a.Account > b.Account:
			return 1
		}
		return 0
	})
	if len(samples) > MaxAccountLabels {
		other := AccountSample{Account: "(other)"}
		for _, s := range samples[MaxAccountLabels-1:] {
			other.Usage += s.Usage
			other.UsageFraction += s.UsageFraction
			other.ShareFraction += s.ShareFraction
			other.MemoryBytes += s.MemoryBytes
			other.Running += s.Running
			other.Pending += s.Pending
		}
		samples = append(samples[:MaxAccountLabels-1], other)
	}
	for _, s := range samples {
		g := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{s.Account}, labels...)...)
		}
		g(c.usage, s.Usage)
		g(c.usageFrac, s.UsageFraction)
		g(c.shareFrac, s.ShareFraction)
		g(c.mem, float64(s.MemoryBytes))
		g(c.tasks, float64(s.Running), "running")
		g(c.tasks, float64(s.Pending), "pending")
	}
}
