package health

import "github.com/prometheus/client_golang/prometheus"

// Collector exports the probes' reports as Prometheus metrics, read at
// each scrape (the probes keep their own counts; nothing to update).
type Collector struct {
	reports func() []Report

	healthy, consecutive, latency, probes, failures *prometheus.Desc
}

// NewCollector collects what reports returns (for example the
// supervisor's Status().Health).
func NewCollector(reports func() []Report) *Collector {
	unit := []string{"unit"}
	return &Collector{
		reports: reports,
		healthy: prometheus.NewDesc("kha_health_probe_healthy",
			"1 while the unit's health probe passes, 0 while it is starting or unhealthy; absent while not probing (standby, unit stopped).", unit, nil),
		consecutive: prometheus.NewDesc("kha_health_probe_consecutive_failures",
			"Failed health probes of the unit in a row (0 while not probing).", unit, nil),
		latency: prometheus.NewDesc("kha_health_probe_latency_seconds",
			"How long the unit's last health probe took (to its answer or its timeout); absent before the first.", unit, nil),
		probes: prometheus.NewDesc("kha_health_probes_total",
			"Health probes of the unit run by this process.", unit, nil),
		failures: prometheus.NewDesc("kha_health_probe_failures_total",
			"Failed health probes of the unit (counted toward its threshold or not: within the grace too).", unit, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.healthy, c.consecutive, c.latency, c.probes, c.failures} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.reports() {
		if r.State != StateOff {
			v := 0.0
			if r.State == StateHealthy {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, v, r.Unit)
		}
		ch <- prometheus.MustNewConstMetric(c.consecutive, prometheus.GaugeValue, float64(r.Consecutive), r.Unit)
		if r.Last != nil {
			ch <- prometheus.MustNewConstMetric(c.latency, prometheus.GaugeValue, r.Last.Latency.Seconds(), r.Unit)
		}
		ch <- prometheus.MustNewConstMetric(c.probes, prometheus.CounterValue, float64(r.Probes), r.Unit)
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(r.Failures), r.Unit)
	}
}
