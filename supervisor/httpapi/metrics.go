package httpapi

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Roles are the states kha_role is exported for, so that every one of them
// has a series (0 or 1) from the start and alerts on absent series are not
// needed.
var Roles = []string{"starting", "standby", "promoting", "active", "demoting", "fencing"}

// FenceReasons are the supervisor's fence kinds (supervisor.Transition.Kind
// on the way into fencing); kha_fences_total has a series for each from
// the start, so that increase() sees the first fence.
var FenceReasons = []string{"deadline", "key_lost", "lease_lost", "record_lost", "drill", "demote_failed"}

// Leases are the two leases a member renews: its membership record's and,
// while it leads, the election key's.
var Leases = []string{"member", "election"}

// transitions are the (from, to, reason) triples of the lifecycle that
// kha_transitions_total starts at 0. A triple not listed still counts; it
// just has no series until it first happens.
var transitions = func() [][3]string {
	t := [][3]string{
		{"starting", "standby", "registered"},
		{"standby", "promoting", "elected"},
		{"promoting", "active", "units_started"},
		{"demoting", "standby", "released"},
		{"demoting", "stopped", "shutdown"},
		{"standby", "stopped", "shutdown"},
		{"standby", "starting", "member_lease_lost"},
		{"promoting", "demoting", "member_lease_lost"},
	}
	for _, from := range []string{"promoting", "active"} {
		for _, r := range []string{"shutdown", "handoff", "banned", "failure_threshold", "promotion_failed"} {
			t = append(t, [3]string{from, "demoting", r})
		}
	}
	for _, from := range []string{"promoting", "active", "demoting"} {
		for _, r := range FenceReasons {
			t = append(t, [3]string{from, "fencing", r})
		}
	}
	return t
}()

// Metrics are the collectors the core updates. Label values must come from
// small fixed sets (states, reason codes, unit names): each distinct value
// is a series forever.
type Metrics struct {
	Role           *prometheus.GaugeVec     // kha_role{role}: 1 for the current role, 0 for the others
	LeaseTimeLeft  prometheus.Gauge         // kha_lease_time_left_seconds
	Transitions    *prometheus.CounterVec   // kha_transitions_total{from,to,reason}
	Fences         *prometheus.CounterVec   // kha_fences_total{reason}
	LastFence      prometheus.Gauge         // kha_last_fence_timestamp_seconds
	LastFenceInfo  *prometheus.GaugeVec     // kha_last_fence_info{reason}
	UnitActive     *prometheus.GaugeVec     // kha_unit_active{unit}
	RenewDuration  *prometheus.HistogramVec // kha_renew_duration_seconds{lease,endpoint}
	RenewFailures  *prometheus.CounterVec   // kha_renew_failures_total{lease}
	DropinMismatch *prometheus.GaugeVec     // kha_dropin_mismatch{unit}
	StrayProcesses *prometheus.GaugeVec     // kha_stray_processes{unit}
	ExecWatch      prometheus.Gauge         // kha_exec_watch: 1 while strays are found at their exec
	ExecKills      prometheus.Counter       // kha_stray_exec_kills_total
	ExecToKill     prometheus.Gauge         // kha_stray_exec_to_kill_seconds: the last one's
	BuildInfo      *prometheus.GaugeVec     // kha_build_info{version,goversion}

	fenceSlack *optionalGauge // kha_fence_slack_seconds, only while holding the lease

	mu        sync.Mutex
	roles     map[string]bool
	execKills int64 // kills already counted in ExecKills
}

// MetricsOption adjusts NewMetrics.
type MetricsOption func(*metricsSetup)

type metricsSetup struct {
	units     []string
	endpoints []string
	version   string
	runtime   bool
}

// WithUnits starts the per-unit series of units (the managed units) at 0.
func WithUnits(units ...string) MetricsOption {
	return func(s *metricsSetup) { s.units = append(s.units, units...) }
}

// WithEndpoints starts kha_renew_duration_seconds at 0 for every lease and
// each of endpoints (the configured etcd endpoints), so that a member that
// never answers first still has a series.
func WithEndpoints(endpoints ...string) MetricsOption {
	return func(s *metricsSetup) { s.endpoints = append(s.endpoints, endpoints...) }
}

// WithVersion sets kha_build_info's version label.
func WithVersion(v string) MetricsOption { return func(s *metricsSetup) { s.version = v } }

// WithoutRuntime leaves out the Go, process and Go build-info collectors
// (tests that register twice in one process).
func WithoutRuntime() MetricsOption { return func(s *metricsSetup) { s.runtime = false } }

// RenewBuckets span a loopback etcd (about 1 ms) to the 1-2 s request
// timeout, where a renewal counts as failed.
var RenewBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2}

// NewMetrics creates the collectors, starts every series whose label values
// are known up front, and registers them with reg (none when reg is nil)
// together with the Go runtime, process and build-info collectors.
func NewMetrics(reg prometheus.Registerer, opts ...MetricsOption) (*Metrics, error) {
	setup := metricsSetup{version: "unknown", runtime: true}
	for _, o := range opts {
		o(&setup)
	}
	m := newCollectors()
	m.preset(setup)
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.Role, m.LeaseTimeLeft, m.fenceSlack, m.Transitions, m.Fences, m.LastFence, m.LastFenceInfo, m.UnitActive,
		m.RenewDuration, m.RenewFailures, m.DropinMismatch, m.StrayProcesses, m.ExecWatch, m.ExecKills, m.ExecToKill, m.BuildInfo}
	if setup.runtime {
		cs = append(cs, collectors.NewGoCollector(), collectors.NewBuildInfoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("httpapi: register metrics: %w", err)
		}
	}
	return m, nil
}

func newCollectors() *Metrics {
	return &Metrics{
		Role: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kha_role", Help: "1 for this node's current role, 0 for the others.",
		}, []string{"role"}),
		LeaseTimeLeft: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kha_lease_time_left_seconds", Help: "How long the held election lease is still guaranteed valid on this node's clock; 0 when none is held.",
		}),
		fenceSlack: newOptionalGauge(prometheus.NewDesc("kha_fence_slack_seconds",
			"Time left until the fence deadline (fence_at - now) while this node holds the election lease; absent otherwise. Low values mean renewals are late.", nil, nil)),
		Transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kha_transitions_total", Help: "State transitions of this node, by from, to and reason.",
		}, []string{"from", "to", "reason"}),
		Fences: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kha_fences_total", Help: "Times this node fenced itself, by reason.",
		}, []string{"reason"}),
		LastFence: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kha_last_fence_timestamp_seconds", Help: "When this node last fenced itself (Unix time; from history across restarts), 0 if never.",
		}),
		LastFenceInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kha_last_fence_info", Help: "1 for the reason of this node's last fence; absent if it never fenced.",
		}, []string{"reason"}),
		UnitActive: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kha_unit_active", Help: "1 while the managed unit may have live processes on this node, else 0.",
		}, []string{"unit"}),
		RenewDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kha_renew_duration_seconds", Help: "Round trip of successful lease renewals, from send to the first answer, by lease (member, election) and the etcd endpoint that answered first (renewals go to every member at once).",
			Buckets: RenewBuckets,
		}, []string{"lease", "endpoint"}),
		RenewFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kha_renew_failures_total", Help: "Lease renewals that failed or timed out through every etcd member, by lease (member, election).",
		}, []string{"lease"}),
		DropinMismatch: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kha_dropin_mismatch", Help: "1 while a managed unit's drop-in differs from what `kha-supervisor install-dropins` writes (the unit may start unguarded), else 0.",
		}, []string{"unit"}),
		StrayProcesses: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kha_stray_processes", Help: "Processes of a managed unit's program found running where this node may not run them (a standby, or outside the unit), by unit.",
		}, []string{"unit"}),
		ExecWatch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kha_exec_watch", Help: "1 while the kernel tells this member of every exec (fanotify), so that a stray copy is stopped at its exec; 0 while stray copies are found by the /proc poll only (units.exec_watch off or unavailable).",
		}),
		ExecKills: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kha_stray_exec_kills_total", Help: "Copies of a managed component killed at their exec by this process.",
		}),
		ExecToKill: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kha_stray_exec_to_kill_seconds", Help: "Time from the start of the last copy killed at its exec to its SIGKILL (10 ms resolution); 0 if none.",
		}),
		BuildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kha_build_info", Help: "Always 1; the labels say which kha-supervisor build runs.",
		}, []string{"version", "goversion"}),
		roles: map[string]bool{},
	}
}

// preset starts every series whose label values are known.
func (m *Metrics) preset(s metricsSetup) {
	for _, r := range Roles {
		m.roles[r] = true
		m.Role.WithLabelValues(r).Set(0)
	}
	for _, r := range FenceReasons {
		m.Fences.WithLabelValues(r)
	}
	for _, t := range transitions {
		m.Transitions.WithLabelValues(t[0], t[1], t[2])
	}
	for _, l := range Leases {
		m.RenewFailures.WithLabelValues(l)
		for _, ep := range s.endpoints {
			m.RenewDuration.WithLabelValues(l, ep)
		}
	}
	for _, u := range s.units {
		m.UnitActive.WithLabelValues(u).Set(0)
		m.DropinMismatch.WithLabelValues(u).Set(0)
		m.StrayProcesses.WithLabelValues(u).Set(0)
	}
	m.BuildInfo.WithLabelValues(s.version, runtime.Version()).Set(1)
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
func (m *Metrics) Fenced(reason string) { m.fenced(time.Now(), reason) }

func (m *Metrics) fenced(at time.Time, reason string) {
	m.Fences.WithLabelValues(reason).Inc()
	m.LastFence.Set(float64(at.UnixNano()) / 1e9)
	m.LastFenceInfo.Reset()
	m.LastFenceInfo.WithLabelValues(reason).Set(1)
}

// PastFence is one fence of this node before this process started.
type PastFence struct {
	At     time.Time
	Reason string
}

// SeedFences counts the fences of earlier processes of this node (from the
// history, and the run state its predecessor left), so that kha_fences_total
// and the last-fence gauges survive the restart that follows every fence.
func (m *Metrics) SeedFences(past []PastFence) {
	slices.SortFunc(past, func(a, b PastFence) int { return a.At.Compare(b.At) })
	for _, f := range past {
		m.fenced(f.At, f.Reason)
	}
}

// SetUnitActive records whether unit may have live processes.
func (m *Metrics) SetUnitActive(unit string, active bool) {
	m.UnitActive.WithLabelValues(unit).Set(b2f(active))
}

// SetDropinMismatch records whether unit's drop-in is not the one
// install-dropins writes.
func (m *Metrics) SetDropinMismatch(unit string, mismatch bool) {
	m.DropinMismatch.WithLabelValues(unit).Set(b2f(mismatch))
}

// SetStrayProcesses records how many stray processes of unit were found.
func (m *Metrics) SetStrayProcesses(unit string, n int) {
	m.StrayProcesses.WithLabelValues(unit).Set(float64(n))
}

// SetExecWatch records whether the exec watch runs, how many copies it
// has killed in all (kills only grows) and the last one's time to kill.
func (m *Metrics) SetExecWatch(up bool, kills int64, lastToKill time.Duration) {
	m.ExecWatch.Set(b2f(up))
	m.mu.Lock()
	if d := kills - m.execKills; d > 0 {
		m.ExecKills.Add(float64(d))
		m.execKills = kills
	}
	m.mu.Unlock()
	m.ExecToKill.Set(lastToKill.Seconds())
}

// Renewed records one renewal attempt of lease ("member" or "election"):
// its duration under the endpoint that answered first when it succeeded, a
// failure otherwise. Failures have no endpoint label: a renewal fails only
// when every member failed, and a success does not wait for the slower
// members, so no single member is to blame.
func (m *Metrics) Renewed(lease, endpoint string, took time.Duration, err error) {
	if err != nil {
		m.RenewFailures.WithLabelValues(lease).Inc()
		return
	}
	m.RenewDuration.WithLabelValues(lease, endpoint).Observe(took.Seconds())
}

// SetLease records the lease time left (clamped at 0: a lapsed lease has
// none) and, while holding the election lease, the fence slack (kept
// negative when the deadline was overrun, which is worth seeing). Off the
// lease the slack is not 0 but absent: a standby has no deadline, and a 0
// would look like one about to fence.
func (m *Metrics) SetLease(leaseLeft, fenceSlack time.Duration, holding bool) {
	m.LeaseTimeLeft.Set(max(leaseLeft, 0).Seconds())
	m.fenceSlack.set(fenceSlack.Seconds(), holding)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// optionalGauge is a gauge that has no sample while it means nothing.
type optionalGauge struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	v    float64
	ok   bool
}

func newOptionalGauge(d *prometheus.Desc) *optionalGauge { return &optionalGauge{desc: d} }

func (g *optionalGauge) set(v float64, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.v, g.ok = v, ok
}

func (g *optionalGauge) get() (float64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.v, g.ok
}

func (g *optionalGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *optionalGauge) Collect(ch chan<- prometheus.Metric) {
	if v, ok := g.get(); ok {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v)
	}
}

// GroupLabelNames are the labels every series of the daemon carries: the
// group's identity from the configuration (its `cluster` and `etcd.prefix`;
// the election key is prefix/cluster/...). Alert rules group by them, so
// that two groups scraped by one Prometheus are judged apart.
var GroupLabelNames = []string{"cluster", "prefix"}

// WithGroupLabels wraps reg so that every series registered through it
// carries the group's identity as constant labels. Constant labels, not an
// info metric to join: the identity is fixed for the life of the process
// (a change needs a restart), and a rule that must page on two leaders
// should not depend on a join that silently drops series whose info metric
// is missing.
func WithGroupLabels(reg prometheus.Registerer, cluster, prefix string) prometheus.Registerer {
	return prometheus.WrapRegistererWith(prometheus.Labels{"cluster": cluster, "prefix": prefix}, reg)
}
