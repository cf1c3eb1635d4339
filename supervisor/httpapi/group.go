package httpapi

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Warner is optionally implemented by a Source: problems that do not stop
// the loop but need an operator (members configured differently, expected
// peers without a record). /healthz lists them after its verdict, which
// stays the loop's: a monitor alerts on the lines or on GroupMetrics.
type Warner interface {
	Warnings() []string
}

// GroupMetrics count the group problems a member sees.
type GroupMetrics struct {
	ConfigMismatch prometheus.Gauge // kha_config_mismatch_members
	MissingPeers   prometheus.Gauge // kha_missing_peers
}

// NewGroupMetrics creates the gauges and registers them with reg (none
// when reg is nil).
func NewGroupMetrics(reg prometheus.Registerer) (*GroupMetrics, error) {
	g := &GroupMetrics{
		ConfigMismatch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kha_config_mismatch_members", Help: "Members whose record shows a configuration (cluster, prefix, managed units, etcd cluster) different from this node's.",
		}),
		MissingPeers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kha_missing_peers", Help: "Configured peers without a member record in this group for longer than a lease TTL.",
		}),
	}
	if reg == nil {
		return g, nil
	}
	for _, c := range []prometheus.Collector{g.ConfigMismatch, g.MissingPeers} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("httpapi: register metrics: %w", err)
		}
	}
	return g, nil
}

// Set records the numbers of members configured differently and of
// missing peers.
func (g *GroupMetrics) Set(mismatched, missing int) {
	g.ConfigMismatch.Set(float64(mismatched))
	g.MissingPeers.Set(float64(missing))
}

func warningLines(src Source) string {
	w, ok := src.(Warner)
	if !ok {
		return ""
	}
	var out string
	for _, line := range w.Warnings() {
		out += "warning: " + line + "\n"
	}
	return out
}
