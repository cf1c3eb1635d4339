package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// apiFenceCollector exports the fence at the API server, read at scrape
// time from the supervisor's status and the fence itself.
type apiFenceCollector struct {
	mode      string
	fence     *apiFence // nil when off
	status    func() supervisor.Status
	apiserver []string // configured, for kha_api_fence_apiserver_down

	modeD, tokenD, termD, matchD, handoverD, handoverAtD, downD, decisionsD, unfencedD, unlistedD, refusedD, webhookD *prometheus.Desc
}

// DescribeAPIFence is the API fence's collector with no fence or
// supervisor behind it, for listing its metrics (the metrics table's test):
// Run registers the same.
func DescribeAPIFence(mode string) prometheus.Collector {
	return newAPIFenceCollector(mode, nil, nil, nil)
}

func newAPIFenceCollector(mode string, f *apiFence, status func() supervisor.Status, apiservers []string) *apiFenceCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &apiFenceCollector{mode: mode, fence: f, status: status, apiserver: apiservers,
		modeD:       d("kha_api_fence_mode", "1 for the configured api_fence.mode, 0 for the others.", "mode"),
		tokenD:      d("kha_api_fence_token", "The fencing token the apiservers' parameter holds, as this node last wrote or read it (token mode); 0 unknown."),
		termD:       d("kha_api_fence_term_token", "The elected term's fencing token as this node sees it (the leader's); 0 none."),
		matchD:      d("kha_api_fence_token_matches", "1 when the apiservers hold the elected term's token (token mode), else 0: the leader's units' writes are refused."),
		handoverD:   d("kha_api_fence_handover_seconds", "How long this node's last token handover took (write and confirmation on every apiserver)."),
		handoverAtD: d("kha_api_fence_handover_timestamp_seconds", "When this node's last token handover was confirmed on every apiserver (Unix time)."),
		downD:       d("kha_api_fence_apiserver_down", "1 while a gate skips this apiserver after a failed connection.", "apiserver"),
		unfencedD: d("kha_api_fence_unfenced", "1 when the leader's last self-check found this apiserver admitting a write with a stale fencing token "+
			"(the policy unbound, in Audit, or changed): the fence is off there.", "apiserver"),
		webhookD: d("kha_api_fence_webhook_registered", "Token mode, on the leader: 1 when its last self-check found the token webhook's registration in force "+
			"(present, failurePolicy Fail), 0 when missing or weakened: an apiserver whose cache of the parameter is behind then admits a stale token."),
		unlistedD: d("kha_api_fence_unlisted_apiservers", "How many apiservers the cluster knows that api_fence.apiservers does not list (token mode promotions fail while any)."),
		refusedD: d("kha_api_fence_gate_refused_total", "Connections a unit's API gate refused because the process at the other end does not run in the unit "+
			"(a second copy with the unit's kubeconfig); each is logged as an ERROR with its PID and command line.", "unit"),
		decisionsD: d("kha_api_fence_webhook_decisions_total", "The token webhook's answers: admitted, denied (a fenced write without the current token), unfenced (not a managed user's write).", "decision"),
	}
}

func (c *apiFenceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.modeD, c.tokenD, c.termD, c.matchD, c.handoverD, c.handoverAtD, c.downD, c.decisionsD, c.unfencedD, c.unlistedD, c.refusedD, c.webhookD} {
		ch <- d
	}
}

func (c *apiFenceCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, m := range config.APIFenceModes {
		gauge(c.modeD, b2f(m == c.mode), m)
	}
	if c.fence == nil {
		return
	}
	st := c.status().APIFence
	if st == nil {
		return
	}
	gauge(c.tokenD, float64(st.Token))
	gauge(c.termD, float64(st.Term))
	gauge(c.matchD, b2f(st.Matches))
	if !st.PublishedAt.IsZero() {
		gauge(c.handoverD, float64(st.TookMS)/1000)
		gauge(c.handoverAtD, float64(st.PublishedAt.UnixNano())/1e9)
	}
	down := map[string]bool{}
	for _, h := range st.Down {
		down[h] = true
	}
	unfenced := map[string]bool{}
	for _, h := range st.Unfenced {
		unfenced[h] = true
	}
	for _, h := range c.apiserver {
		gauge(c.downD, b2f(down[h]), h)
		if c.mode == config.APIFenceToken {
			gauge(c.unfencedD, b2f(unfenced[h]), h)
		}
	}
	if c.mode == config.APIFenceToken {
		gauge(c.unlistedD, float64(len(st.Unlisted)))
		if st.Published != 0 && st.Published == st.Term { // the leader: it checks
			gauge(c.webhookD, b2f(st.WebhookOff == ""))
		}
	}
	fst := c.fence.Status()
	for unit, n := range fst.Refused {
		ch <- prometheus.MustNewConstMetric(c.refusedD, prometheus.CounterValue, float64(n), unit)
	}
	if w := fst.Webhook; w != nil {
		for _, x := range []struct {
			name string
			n    int64
		}{{"admitted", w.Admitted}, {"denied", w.Denied}, {"unfenced", w.Unfenced}} {
			ch <- prometheus.MustNewConstMetric(c.decisionsD, prometheus.CounterValue, float64(x.n), x.name)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
