package httpapi

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Roles are the states kha_role is exported for, so that every one of them
// has a series (0 or 1) from the start and alerts on absent series are not
// needed.
var Roles = []string{"standby", "promoting", "active", "demoting", "fencing"}

// Metrics are the collectors the core updates. Label values must come from
// small fixed sets (states, reason codes, unit names): each distinct value
// is a series forever.
type Metrics struct {
	Role          *prometheus.GaugeVec   // kha_role{role}: 1 for the current role, 0 for the others
	LeaseTimeLeft prometheus.Gauge       // kha_lease_time_left_seconds
	FenceSlack    prometheus.Gauge       // kha_fence_slack_seconds: time until the fence deadline
	Transitions   *prometheus.CounterVec // kha_transitions_total{from,to,reason}
	Fences        *prometheus.CounterVec // kha_fences_total{reason}
	UnitActive    *prometheus.GaugeVec   // kha_unit_active{unit}
	RenewLatency  prometheus.Histogram   // kha_renew_latency_seconds
	RenewFailures prometheus.Counter     // kha_renew_failures_total

	mu    sync.Mutex
	roles map[string]bool
}

// RenewBuckets span a loopback etcd (about 1 ms) to the 1-2 s request
// timeout, where a renewal counts as failed.
var RenewBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2}

// NewMetrics creates the collectors and registers them with reg (none when
// reg is nil).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Role: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kha_role", Help: "1 for this node's current role, 0 for the others.",
		}, []string{"role"}),
		LeaseTimeLeft: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kha_lease_time_left_seconds", Help: "How long the held election lease is still guaranteed valid on this node's clock; 0 when none is held.",
		}),
		FenceSlack: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kha_fence_slack_seconds", Help: "Time left until the fence deadline (fence_at - now) while active; low values mean renewals are late.",
		}),
		Transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kha_transitions_total", Help: "State transitions of this node, by from, to and reason.",
		}, []string{"from", "to", "reason"}),
		Fences: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kha_fences_total", Help: "Times this node fenced itself, by reason.",
		}, []string{"reason"}),
		UnitActive: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kha_unit_active", Help: "1 while the managed unit may have live processes on this node, else 0.",
		}, []string{"unit"}),
		RenewLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kha_renew_latency_seconds", Help: "Round trip of successful lease renewals, from send to answer.",
			Buckets: RenewBuckets,
		}),
		RenewFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kha_renew_failures_total", Help: "Lease renewals that failed or timed out.",
		}),
		roles: map[string]bool{},
	}
	for _, r := range Roles {
		m.roles[r] = true
		m.Role.WithLabelValues(r).Set(0)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.Role, m.LeaseTimeLeft, m.FenceSlack, m.Transitions,
		m.Fences, m.UnitActive, m.RenewLatency, m.RenewFailures} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("httpapi: register metrics: %w", err)
		}
	}
	return m, nil
}

// SetRole sets kha_role to 1 for role and 0 for every other role seen.
func (m *Metrics) SetRole(role string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.roles[role] = true
	for r := range m.roles {
		v := 0.0
		if r == role {
			v = 1
		}
		m.Role.WithLabelValues(r).Set(v)
	}
}

// Transition counts one transition and makes to the current role.
func (m *Metrics) Transition(from, to, reason string) {
	m.Transitions.WithLabelValues(from, to, reason).Inc()
	m.SetRole(to)
}

// Fenced counts one fence.
func (m *Metrics) Fenced(reason string) { m.Fences.WithLabelValues(reason).Inc() }

// SetUnitActive records whether unit may have live processes.
func (m *Metrics) SetUnitActive(unit string, active bool) {
	v := 0.0
	if active {
		v = 1
	}
	m.UnitActive.WithLabelValues(unit).Set(v)
}

// Renewed records one renewal attempt: its latency when it succeeded, a
// failure otherwise.
func (m *Metrics) Renewed(latency time.Duration, err error) {
	if err != nil {
		m.RenewFailures.Inc()
		return
	}
	m.RenewLatency.Observe(latency.Seconds())
}

// SetLease records the lease time left (clamped at 0: a lapsed lease has
// none) and the fence slack (kept negative when the deadline was overrun,
// which is worth seeing).
func (m *Metrics) SetLease(leaseLeft, fenceSlack time.Duration) {
	m.LeaseTimeLeft.Set(max(leaseLeft, 0).Seconds())
	m.FenceSlack.Set(fenceSlack.Seconds())
}
