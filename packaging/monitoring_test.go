package packaging

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/httpapi"
)

// The example alert rules and dashboard shipped in the package.
const (
	alertsFile    = "packaging/monitoring/kha-supervisor-alerts.yml"
	dashboardFile = "packaging/monitoring/kha-supervisor-dashboard.json"
)

// prometheusOwn are series Prometheus adds per target itself; every other
// name in the examples must come from the daemon.
var prometheusOwn = map[string]bool{"up": true}

// daemonMetricNames is every series name the daemon's registry exposes,
// with the _bucket/_sum/_count series of histograms and summaries.
func daemonMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := httpapi.NewMetrics(reg, httpapi.WithUnits(config.Default().Units.Managed...),
		httpapi.WithEndpoints(config.Default().Etcd.Endpoints...))
	if err != nil {
		t.Fatal(err)
	}
	m.SetLease(time.Second, time.Second, true) // the leader's fence slack
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		names[n] = true
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[n+"_sum"], names[n+"_count"] = true, true
		}
	}
	return names
}

// selectorNames parses expr and returns the metric names it selects.
func selectorNames(t *testing.T, where, expr string) []string {
	t.Helper()
	e, err := parser.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q: %v", where, expr, err)
		return nil
	}
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			if vs.Name == "" {
				t.Errorf("%s: %q selects without a metric name", where, expr)
			}
			out = append(out, vs.Name)
		}
		return nil
	})
	return out
}

// TestAlertRules checks the example rules as `promtool check rules` does
// (rulefmt validates the structure, every expression and every template)
// and that they cover what issue 9 asks for, with metric names the daemon
// really exports.
// apiFenceMetrics are exported by the fence's collector, which lives in
// the daemon's main package (cmd/kha-supervisor/apifencemetrics.go, whose
// test gathers each of them) and cannot be registered here.
var apiFenceMetrics = map[string]bool{"kha_api_fence_unfenced": true, "kha_api_fence_unlisted_apiservers": true}

func TestAlertRules(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), alertsFile))
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(b, false, model.UTF8Validation)
	for _, err := range errs {
		t.Errorf("%s: %v", alertsFile, err)
	}
	if groups == nil {
		t.FailNow()
	}
	names := daemonMetricNames(t)
	alerts := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("%s: rule %q is not an alert", alertsFile, r.Record)
				continue
			}
			alerts[r.Alert] = true
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: %s lacks a severity or a summary", alertsFile, r.Alert)
			}
			for _, n := range selectorNames(t, alertsFile+": "+r.Alert, r.Expr) {
				if !names[n] && !prometheusOwn[n] && !apiFenceMetrics[n] {
					t.Errorf("%s: %s uses %s, which the daemon does not export", alertsFile, r.Alert, n)
				}
			}
		}
	}
	for _, want := range []string{"KhaSupervisorFenced", "KhaNoLeader", "KhaRenewalFailures", "KhaDropinMismatch", "KhaStrayProcess"} {
		if !alerts[want] {
			t.Errorf("%s has no %s alert", alertsFile, want)
		}
	}
}

// TestDashboard checks the example Grafana dashboard: valid JSON, and every
// query parses and uses metric names the daemon exports.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: no title, uid or panels", dashboardFile)
	}
	// Grafana's own range variables, as Grafana substitutes them.
	vars := strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "6h")
	names := daemonMetricNames(t)
	used := map[string]bool{}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", dashboardFile, p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range selectorNames(t, dashboardFile+": "+p.Title, vars.Replace(tg.Expr)) {
				used[n] = true
				if !names[n] {
					t.Errorf("%s: panel %q uses %s, which the daemon does not export", dashboardFile, p.Title, n)
				}
			}
		}
	}
	// Every kha_ metric is on the dashboard somewhere.
	var missing []string
	for n := range names {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(n, "kha_") && !used[n] && !used[base+"_bucket"] && !used[base] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%s shows nothing of %s", dashboardFile, strings.Join(missing, ", "))
	}
}
