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

// GroupMetrics count the group problems a member sees, and how many
// members could take over.
type GroupMetrics struct {
	ConfigMismatch prometheus.Gauge // kha_config_mismatch_members
	MissingPeers   prometheus.Gauge // kha_missing_peers
	Eligible       prometheus.Gauge // kha_eligible_members
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
		Eligible: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kha_eligible_members", Help: "Members that could campaign now as this node sees them (standby, units stopped, not banned, not in cooldown, not excluded by a handoff; this node included when it could). On the leader: the standbys able to take over.",
		}),
	}
	if reg == nil {
		return g, nil
	}
	for _, c := range []prometheus.Collector{g.ConfigMismatch, g.MissingPeers, g.Eligible} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("httpapi: register metrics: %w", err)
		}
	}
	return g, nil
}

// Set records the numbers of members configured differently, of missing
// peers and of members that could campaign now.
func (g *GroupMetrics) Set(mismatched, missing, eligible int) {
	g.ConfigMismatch.Set(float64(mismatched))
	g.MissingPeers.Set(float64(missing))
	g.Eligible.Set(float64(eligible))
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
